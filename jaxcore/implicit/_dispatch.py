"""Multiple dispatch of primitive handlers on the types of their operands.

A handler is an ordinary function whose positional parameters are annotated with the
operand types it accepts: an :class:`ImplicitArray` subclass (matched by
``issubclass``), ``jax.Array`` (matches tracers, concrete JAX and NumPy arrays and
scalars, but never an implicit array), a union of those, or nothing/``Any`` (matches
everything). ``*args: T`` applies ``T`` to the remaining operands. Primitive
parameters arrive as keyword arguments, all of them (so handlers take ``**params``;
see :func:`register`). A handler whose first positional parameter is named
``primitive``/``prim`` or annotated as a ``Primitive`` also receives the primitive.

Annotations written as strings (``from __future__ import annotations``) are resolved
once, at registration, by :func:`typing.get_type_hints` against the globals of the
module that defined the handler and the handler's closure variables; no other code
is evaluated, and an unresolvable name is a ``TypeError`` naming the handler.

Among the handlers that match, the most specific wins (``A`` beats ``B`` when every
parameter type of ``A`` is a subtype of ``B``'s); ties are broken by ``precedence``,
and a remaining tie is an error. The resolution is cached per (primitive, operand
types), and the cache is cleared whenever a handler is registered (which also bumps
:mod:`jaxcore._registry_version`, invalidating cached traces that ran handlers).
"""

from __future__ import annotations

import abc
import functools
import inspect
import sys
import types
import typing as tp

import jax
import jax.extend.core as jex_core
import numpy as np

from jaxcore import _registry_version
from jaxcore.implicit import _base, _fields

_ANY = object
_ARRAY = jax.Array
_ARRAY_TYPES: tuple[type, ...] = (
    jax.Array,
    jax.core.Tracer,
    np.ndarray,
    np.generic,
    bool,
    int,
    float,
    complex,
)
_PRIMITIVE_PARAM_NAMES = frozenset({"primitive", "prim"})

CT = tp.TypeVar("CT", bound=tp.Callable[..., tp.Any])


class AmbiguousHandlerError(TypeError):
    """Two or more equally specific handlers with the same precedence match the operands."""


def _is_arraylike_type(t: type) -> bool:
    if issubclass(t, _base.ImplicitArray):
        return False
    return issubclass(t, _ARRAY_TYPES)


def _atom_matches(atom: type, t: type) -> bool:
    if atom is _ANY:
        return True
    if atom is _ARRAY:
        return _is_arraylike_type(t)
    return issubclass(t, atom)


def _atom_le(a: type, b: type) -> bool:
    """Whether every operand type matched by atom ``a`` is also matched by atom ``b``."""
    if b is _ANY:
        return True
    if a is _ANY:
        return False
    if b is _ARRAY:
        return a is _ARRAY or _is_arraylike_type(a)
    if a is _ARRAY:
        return False
    return issubclass(a, b)


def _type_le(a: tuple[type, ...], b: tuple[type, ...]) -> bool:
    return all(any(_atom_le(x, y) for y in b) for x in a)


def _annotation_atoms(annotation: tp.Any, where: str) -> tuple[type, ...]:
    """Turns a parameter annotation into a tuple of atom types (a union's members)."""
    if annotation is inspect.Parameter.empty or annotation is tp.Any:
        return (_ANY,)
    if annotation is None:
        return (type(None),)
    origin = tp.get_origin(annotation)
    if origin is tp.Union or isinstance(annotation, types.UnionType):
        atoms: list[type] = []
        for arg in tp.get_args(annotation):
            atoms.extend(_annotation_atoms(arg, where))
        return tuple(atoms)
    if origin is not None and isinstance(origin, type):
        return (origin,)
    if isinstance(annotation, type):
        return (annotation,)
    raise TypeError(f"cannot dispatch on annotation {annotation!r} of {where}")


def _annotation_namespaces(fn: tp.Callable[..., tp.Any]) -> tuple[tp.Any, dict, dict]:
    """The function whose annotations count, its module's globals and its closure variables.

    Follows ``__wrapped__`` (``functools.wraps``), ``functools.partial`` and bound
    methods to the function that was written, so names resolve where it was defined.
    """
    target = fn
    while True:
        target = inspect.unwrap(target)
        if isinstance(target, functools.partial):
            target = target.func
        elif isinstance(target, types.MethodType):
            target = target.__func__
        else:
            break
    if not isinstance(target, (types.FunctionType, type)) and callable(target):
        call = type(target).__call__  # a callable object: its __call__
        if isinstance(call, types.FunctionType):
            target = call
    module = sys.modules.get(getattr(target, "__module__", None) or "")
    globalns = getattr(target, "__globals__", None)
    if globalns is None:
        globalns = vars(module) if module is not None else {}
    localns: dict[str, tp.Any] = {}
    code = getattr(target, "__code__", None)
    closure = getattr(target, "__closure__", None)
    if code is not None and closure:
        for name, cell in zip(code.co_freevars, closure):
            try:
                localns[name] = cell.cell_contents
            except ValueError:  # a cell not filled yet
                continue
    return target, globalns, localns


def _resolve_annotations(fn: tp.Callable[..., tp.Any]) -> dict[str, tp.Any]:
    """Resolves ``fn``'s parameter annotations to the objects they name.

    Annotations that are already objects are used as they are. String annotations
    (``from __future__ import annotations``, or quoted names) are resolved by
    :func:`typing.get_type_hints`, against the globals of the module that defined the
    function (following ``functools.wraps``, ``functools.partial`` and bound methods)
    and its closure variables. That is all that is evaluated: no other namespace is
    consulted, so a name that is neither global in that module nor used by the handler
    itself (Python keeps only used enclosing names in a closure) fails to resolve.

    Raises:
        TypeError: If an annotation cannot be resolved; it names the annotation, the
            parameter, the handler and the reason.
    """
    target, globalns, localns = _annotation_namespaces(fn)
    annotations = getattr(target, "__annotations__", None)
    if not annotations:
        return {}
    try:
        return tp.get_type_hints(target, globalns=globalns, localns=localns)
    except Exception:  # noqa: BLE001 - NameError, SyntaxError, TypeError...: found below.
        pass
    for name, annotation in annotations.items():  # find the one that fails, and say so
        one = types.SimpleNamespace(__annotations__={name: annotation})
        try:
            tp.get_type_hints(one, globalns=globalns, localns=localns)
        except Exception as err:  # noqa: BLE001 - reported with the parameter named.
            raise TypeError(
                f"cannot evaluate annotation {annotation!r} of parameter {name!r} of handler "
                f"{getattr(fn, '__qualname__', fn)}: {type(err).__name__}: {err}. String "
                "annotations are resolved with typing.get_type_hints in the globals of the "
                "handler's module and its closure; annotate with the class object itself, "
                "or define the class at module level."
            ) from err
    raise TypeError(f"cannot resolve the annotations of handler {getattr(fn, '__qualname__', fn)}")


class Handler:
    """One registered handler and the operand types it accepts."""

    __slots__ = (
        "fn",
        "precedence",
        "takes_primitive",
        "positional",
        "n_required",
        "varargs",
        "keywords",
        "raw",
    )

    def __init__(
        self,
        fn: tp.Callable[..., tp.Any],
        precedence: int,
        raw: tp.Callable[[tp.Any, tp.Sequence[tp.Any], dict], tp.Any] | None = None,
    ):
        self.fn = fn
        self.precedence = precedence
        # Optional internal fast entry point taking (primitive, values, params) as they
        # come, equivalent to __call__ (used by the built-in rules on hot paths).
        self.raw = raw
        name = getattr(fn, "__qualname__", repr(fn))
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError) as err:
            raise TypeError(f"cannot read the signature of handler {name}: {err}") from err
        hints = _resolve_annotations(fn)
        positional: list[tuple[type, ...]] = []
        n_required = 0
        varargs: tuple[type, ...] | None = None
        takes_primitive = False
        params = list(signature.parameters.values())
        for index, p in enumerate(params):
            annotation = hints.get(p.name, inspect.Parameter.empty)
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                if index == 0 and (
                    p.name in _PRIMITIVE_PARAM_NAMES
                    or (isinstance(annotation, type) and issubclass(annotation, jex_core.Primitive))
                ):
                    takes_primitive = True
                    continue
                positional.append(_annotation_atoms(annotation, f"parameter {p.name!r} of {name}"))
                if p.default is p.empty:
                    n_required = len(positional)
            elif p.kind is p.VAR_POSITIONAL:
                varargs = _annotation_atoms(annotation, f"parameter *{p.name} of {name}")
        # Parameter names a primitive's params may bind to; None when **kwargs takes any.
        self.keywords: frozenset[str] | None = (
            None
            if any(p.kind is p.VAR_KEYWORD for p in params)
            else frozenset(
                p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
            )
        )
        self.takes_primitive = takes_primitive
        self.positional = tuple(positional)
        self.n_required = n_required
        self.varargs = varargs

    def type_at(self, i: int) -> tuple[type, ...]:
        if i < len(self.positional):
            return self.positional[i]
        assert self.varargs is not None
        return self.varargs

    def accepts(self, operand_types: tuple[type, ...]) -> bool:
        n = len(operand_types)
        if n < self.n_required or (self.varargs is None and n > len(self.positional)):
            return False
        for i, t in enumerate(operand_types):
            if not any(_atom_matches(atom, t) for atom in self.type_at(i)):
                return False
        return True

    def at_least_as_specific(self, other: Handler, n: int) -> bool:
        return all(_type_le(self.type_at(i), other.type_at(i)) for i in range(n))

    def __call__(self, primitive: tp.Any, values: tp.Sequence[tp.Any], params: dict) -> tp.Any:
        if self.keywords is not None and not self.keywords.issuperset(params):
            unexpected = sorted(set(params) - self.keywords)
            raise TypeError(
                f"handler {getattr(self.fn, '__qualname__', self.fn)} for primitive "
                f"'{primitive}' does not accept the primitive parameter(s) {unexpected}; "
                "declare them as keyword-only parameters or add **params"
            )
        if self.takes_primitive:
            return self.fn(primitive, *values, **params)
        return self.fn(*values, **params)

    def __repr__(self) -> str:
        return f"<handler {getattr(self.fn, '__qualname__', self.fn)} precedence={self.precedence}>"


_handlers: dict[jex_core.Primitive, list[Handler]] = {}
# The handler (or None) resolved per (primitive, operand types): read directly by the
# interpreter's hot path, filled by resolve(), cleared by registration and whenever
# an ABC gains a virtual subclass (see _check_abc_registrations).
resolved: dict[tuple[jex_core.Primitive, tuple[type, ...]], Handler | None] = {}
MISSING = object()  # resolved.get default: None is a cached "no handler".
# abc.get_cache_token() when `resolved` was last cleared (read by the interpreter).
abc_token: tp.Any = abc.get_cache_token()


def lookup_primitive(name: str) -> jex_core.Primitive:
    """Finds a primitive by its name (``"dot_general"`` or ``"dot_general_p"``).

    Raises:
        ValueError: If no primitive of that name exists in ``jax.extend.core.primitives``
            or ``jax.lax``.
    """
    from jax.extend.core import primitives

    attr = name if name.endswith("_p") else f"{name}_p"
    for module in (primitives, jax.lax):
        found = getattr(module, attr, None)
        if isinstance(found, jex_core.Primitive):
            return found
    for module in (primitives, jax.lax):
        for value in vars(module).values():
            if isinstance(value, jex_core.Primitive) and value.name == name:
                return value
    raise ValueError(
        f"unknown primitive {name!r}: no {attr} in jax.extend.core.primitives or jax.lax; "
        "pass the Primitive object instead"
    )


def register(primitive: jex_core.Primitive | str, *, precedence: int = 0) -> tp.Callable[[CT], CT]:
    """Registers a handler for ``primitive`` applied to implicit arrays.

    The handler receives the operands positionally (optionally preceded by the
    primitive) and the primitive's parameters as keyword arguments, runs in the trace
    that was current around :func:`jaxcore.implicit.implicit`, and returns the result
    (an array or an implicit array; a list for multiple-result primitives). See the
    module docstring for how handlers are matched to operand types.

    **Every parameter of the primitive is passed, by keyword**, so a handler must
    accept all of them: name the ones it reads and take the rest with ``**params``.
    A handler without ``**params`` is called only if its keyword parameters cover
    everything the primitive binds; otherwise the call raises a ``TypeError`` naming
    the parameters it missed. Primitives carry more parameters than their ``jax.lax``
    functions show (``reduce_sum`` binds ``axes`` and ``out_sharding``), and JAX adds
    some between releases, so give every handler ``**params``.

    Like a function under ``jax.jit``, a handler should be pure: under ``jit`` its
    traced operations are cached per operand structure and abstract values and
    replayed, so its Python side effects run once per such signature. Registering a
    handler (or a kernel) invalidates those caches.

    Parameter annotations are resolved as described in the module docstring; string
    annotations (``from __future__ import annotations``) are resolved by
    :func:`typing.get_type_hints` in the handler's module globals and closure, and
    nothing else is evaluated.

    Example:
        >>> import dataclasses
        >>> import jax.numpy as jnp
        >>> from jaxcore.implicit import ImplicitArray, aux_field
        >>> @dataclasses.dataclass
        ... class Scaled(ImplicitArray):
        ...     value: jax.Array
        ...     scale: float = aux_field()
        ...     def materialize(self):
        ...         return self.value * self.scale
        >>> @register("mul")
        ... def _(x: Scaled, y: jax.Array, **params):
        ...     return Scaled(x.value * y, scale=x.scale)
        >>> @register("reduce_sum")
        ... def _(x: Scaled, *, axes, **params):  # reads ``axes``; ``out_sharding`` in params
        ...     return jnp.sum(x.value, axis=axes) * x.scale
        >>> # Without ``**params`` the second handler fails when called, with a TypeError:
        >>> # "... does not accept the primitive parameter(s) ['out_sharding'] ..."

    Args:
        primitive: The primitive, or its name (``"dot_general"``).
        precedence: Breaks ties between equally specific handlers; higher wins.

    Returns:
        A decorator that registers the handler and returns it unchanged.

    Raises:
        ValueError: If ``primitive`` is an unknown name.
        TypeError: If it is neither a name nor a primitive, or an annotation of the
            handler cannot be dispatched on.
    """
    if isinstance(primitive, str):
        primitive = lookup_primitive(primitive)
    elif not isinstance(primitive, jex_core.Primitive):
        raise TypeError(
            f"register() expects a jax Primitive or its name, got {type(primitive).__name__}"
        )
    if not isinstance(precedence, int):
        raise TypeError(f"precedence must be an int, got {precedence!r}")

    def decorator(fn: CT) -> CT:
        _add(primitive, Handler(fn, precedence))
        return fn

    return decorator


def register_builtin(
    primitive: jex_core.Primitive,
    fn: tp.Callable[..., tp.Any],
    *,
    precedence: int,
    raw: tp.Callable[[tp.Any, tp.Sequence[tp.Any], dict], tp.Any],
) -> None:
    """Registers a built-in rule ``fn`` with ``raw``, an equivalent (primitive, values, params) entry."""
    _add(primitive, Handler(fn, precedence, raw=raw))


def _add(primitive: jex_core.Primitive, handler: Handler) -> None:
    _handlers.setdefault(primitive, []).append(handler)
    _clear_resolutions()
    _registry_version.bump()


def _clear_resolutions() -> None:
    global abc_token
    resolved.clear()
    _default_owners.clear()
    abc_token = abc.get_cache_token()


def check_abc_registrations() -> None:
    """Forgets cached resolutions if any ABC gained a virtual subclass since they were made.

    Handlers match operand types with ``issubclass``, which honours
    ``SomeABC.register(cls)``; a registration made after a resolution was cached
    must be seen, so the caches key on :func:`abc.get_cache_token`.
    """
    if abc.get_cache_token() != abc_token:
        _clear_resolutions()
        _registry_version.bump()


def resolve(primitive: jex_core.Primitive, operand_types: tuple[type, ...]) -> Handler | None:
    """Returns the handler for ``primitive`` on operands of these types, or ``None``.

    Raises:
        AmbiguousHandlerError: If several equally specific handlers of the same
            precedence match.
    """
    check_abc_registrations()
    key = (primitive, operand_types)
    try:
        return resolved[key]
    except KeyError:
        pass
    found = _resolve_uncached(primitive, operand_types)
    resolved[key] = found
    return found


def _resolve_uncached(
    primitive: jex_core.Primitive, operand_types: tuple[type, ...]
) -> Handler | None:
    candidates = [h for h in _handlers.get(primitive, ()) if h.accepts(operand_types)]
    if not candidates:
        return None
    n = len(operand_types)
    best = [
        h
        for h in candidates
        if not any(
            o is not h and o.at_least_as_specific(h, n) and not h.at_least_as_specific(o, n)
            for o in candidates
        )
    ]
    top = max(h.precedence for h in best)
    best = [h for h in best if h.precedence == top]
    if len(best) > 1:
        names = ", ".join(t.__name__ for t in operand_types)
        raise AmbiguousHandlerError(
            f"ambiguous handlers for primitive '{primitive}' on operands ({names}): "
            f"{best}; give one of them a higher precedence"
        )
    return best[0]


# The class whose default_handler applies, per operand types (see default_owner).
_default_owners: dict[tuple[type, ...], type] = {}


def default_owner(operand_types: tuple[type, ...]) -> tp.Any:
    """The implicit-array class whose ``default_handler`` runs when no handler matches.

    That is the one class among the operands' that overrides
    :meth:`ImplicitArray.default_handler` (or, when none does, the first implicit
    operand's, which materializes).

    Raises:
        TypeError: If operands of several classes override it with different
            functions: which one should win is ambiguous, so neither is picked.
    """
    owner = _default_owners.get(operand_types)
    if owner is not None:
        return owner
    base = _base.ImplicitArray.default_handler.__func__  # type: ignore[attr-defined]
    first = None
    overriding: dict[tp.Any, type] = {}
    for t in operand_types:
        if t not in _fields.IMPLICIT_TYPES:
            continue
        first = first or t
        handler = tp.cast(tp.Any, t).default_handler
        fn = getattr(handler, "__func__", handler)
        if fn is not base:
            overriding.setdefault(fn, t)
    if len(overriding) > 1:
        names = ", ".join(sorted({t.__name__ for t in overriding.values()}))
        raise TypeError(
            f"operands of types {names} each define their own default_handler, so which "
            "one applies to a primitive with no registered handler is ambiguous; register "
            "a handler for these operand types"
        )
    owner = next(iter(overriding.values())) if overriding else first
    if owner is None:
        raise TypeError(f"no implicit array among operand types {operand_types}")
    if len(_default_owners) >= 4096:
        _default_owners.clear()
    _default_owners[operand_types] = owner
    return owner


def registered_handlers(
    primitive: jex_core.Primitive | str,
) -> tuple[tp.Callable[..., tp.Any], ...]:
    """Returns the functions registered for ``primitive``, oldest first."""
    if isinstance(primitive, str):
        primitive = lookup_primitive(primitive)
    return tuple(h.fn for h in _handlers.get(primitive, ()))

"""The logical shape and dtype of an implicit array: given, computed or discovered.

``shape``/``dtype`` are either passed explicitly, computed by the subclass
(``compute_shape``/``compute_dtype``, properties, or a quax-style ``aval()``), or
discovered by ``jax.eval_shape`` of ``materialize`` (cached per structure, so a tree
round trip does not re-trace); :func:`resolve_aval` finds them at most once per instance.
Discovery materializes, and materializing an array with implicit children needs the
interpreter, which sits above: the package installs that materializer here when it is
assembled (:func:`install_materializer`); until then :func:`materialize_full` just calls
``materialize`` repeatedly. Imports only :mod:`._fields` from the package.
"""

from __future__ import annotations

import contextvars
import dataclasses
import sys
import typing as tp

import jax
import jax.numpy as jnp
import numpy as np

from jaxcore.implicit._fields import IMPLICIT_TYPES, field_layout, is_implicit

# Where an instance caches its resolved ShapedArray (in its __dict__).
_AVAL_ATTR = "_jaxcore_implicit_aval"


class UninitializedAval(Exception):
    """Raised when an implicit array's ``shape`` or ``dtype`` cannot be determined.

    That happens when neither an explicit value, ``compute_shape``/``compute_dtype`` nor
    ``jax.eval_shape`` of ``materialize`` gives one, e.g. when ``materialize`` itself
    reads ``self.shape`` while the shape is being discovered.
    """


# reads the fields of the object it copies, a shape/dtype that was not given explicitly
# reads as None, so the copy recomputes it from its own (possibly replaced) fields.
_REPLACE_CODES = frozenset(
    code
    for fn in (dataclasses.replace, getattr(dataclasses, "_replace", None))
    if (code := getattr(fn, "__code__", None)) is not None
)


def _called_by_replace() -> bool:
    """Whether the attribute read in progress comes from ``dataclasses.replace``."""
    return sys._getframe(2).f_code in _REPLACE_CODES


class AvalAttribute:
    """Data descriptor for ``shape``/``dtype``: explicit value, else computed, else discovered.

    As a dataclass field default it reads as ``None`` (meaning "not given"), so both
    attributes are optional keyword-only constructor arguments. ``dataclasses.replace``
    keeps an explicit value and recomputes one that was not given.
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.slot = f"_jaxcore_explicit_{name}"

    def __get__(self, obj: tp.Any, owner: type | None = None) -> tp.Any:
        if obj is None:
            return None
        explicit = obj.__dict__.get(self.slot)
        if explicit is not None:
            return explicit
        if _called_by_replace():
            return None
        return getattr(resolve_aval(obj), self.name)

    def __set__(self, obj: tp.Any, value: tp.Any) -> None:
        if value is not None:
            value = tuple(int(d) for d in value) if self.name == "shape" else jnp.dtype(value)
        obj.__dict__[self.slot] = value
        obj.__dict__.pop(_AVAL_ATTR, None)


class ComputedAttribute:
    """``shape``/``dtype`` that a subclass computes itself (a property or other descriptor).

    Installed in place of the subclass's own descriptor, which it reads through. The
    dataclass ``__init__`` still assigns the inherited field's default (``None``), which
    is accepted; any other value is an error, since the subclass computes it.
    """

    def __init__(self, name: str, computed: tp.Any):
        self.name = name
        self.computed = computed
        self.__doc__ = getattr(computed, "__doc__", None)

    def __get__(self, obj: tp.Any, owner: type | None = None) -> tp.Any:
        if obj is None:
            return None
        if _called_by_replace():
            return None
        return self.computed.__get__(obj, owner)

    def __set__(self, obj: tp.Any, value: tp.Any) -> None:
        if value is not None:
            raise TypeError(
                f"{type(obj).__name__} computes {self.name} from its fields; it cannot be "
                f"passed as {self.name}={value!r}"
            )


class CallableAval:
    """An implicit array's abstract value, usable as an attribute and as a call.

    ``x.aval`` reads like the :class:`jax.core.ShapedArray` it wraps (``.shape``,
    ``.dtype``, ``==``), and ``x.aval()`` returns that ``ShapedArray`` itself, the
    spelling of quax's ``ArrayValue.aval()``.
    """

    __slots__ = ("_aval",)

    def __init__(self, aval: jax.core.ShapedArray):
        self._aval = aval

    def __call__(self) -> jax.core.ShapedArray:
        return self._aval

    def __getattr__(self, name: str) -> tp.Any:
        return getattr(self._aval, name)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CallableAval):
            other = other._aval
        return bool(self._aval == other)

    def __hash__(self) -> int:
        return hash(self._aval)

    def __repr__(self) -> str:
        return repr(self._aval)


# Structures whose aval is being discovered right now (to catch materialize reading shape).
_discovering: contextvars.ContextVar[frozenset[tp.Any]] = contextvars.ContextVar(
    "jaxcore_implicit_discovering", default=frozenset()
)
_discovered_avals: dict[tp.Any, jax.ShapeDtypeStruct] = {}
_MAX_DISCOVERY_CACHE = 4096


def leaf_signature(leaf: tp.Any) -> tuple[tp.Any, tp.Any]:
    """Returns ``(shape, dtype)`` of an array-like leaf (the type for a Python scalar)."""
    shape = getattr(leaf, "shape", None)
    if shape is None:
        shape = np.shape(leaf)
    return tuple(shape), getattr(leaf, "dtype", type(leaf))


def _structure_key(obj: tp.Any) -> tp.Any:
    """A hashable key for everything ``materialize``'s output shape can depend on.

    That is the class, the aux data, and the shape/dtype of every child leaf. Plain
    array children are read directly (the common, fast case); other children are
    flattened. Returns ``None`` when the aux data is unhashable.
    """
    layout = field_layout(type(obj))
    d = obj.__dict__
    children = []
    for name in layout.children:
        child = d[name]
        if type(child) in IMPLICIT_TYPES:
            children.append(_structure_key(child))
        elif hasattr(child, "shape") and hasattr(child, "dtype"):
            children.append((tuple(child.shape), child.dtype))
        else:
            leaves, treedef = jax.tree_util.tree_flatten(child)
            children.append((treedef, tuple(leaf_signature(leaf) for leaf in leaves)))
    key = (
        type(obj),
        d.get("_jaxcore_explicit_shape"),
        d.get("_jaxcore_explicit_dtype"),
        tuple(d[name] for name in layout.aux),
        tuple(children),
    )
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _materialize_plainly(x: tp.Any) -> tp.Any:
    """Calls ``materialize`` until the result is dense, with no dispatch on implicit children."""
    while type(x) in IMPLICIT_TYPES:
        x = x.materialize()
    return x


# How materialize_full turns an implicit array into a dense one (see install_materializer).
_materializer: tp.Callable[[tp.Any], tp.Any] = _materialize_plainly


def install_materializer(fn: tp.Callable[[tp.Any], tp.Any]) -> None:
    """Sets the function :func:`materialize_full` uses; the package installs its own.

    ``jaxcore.implicit`` installs ``_materialize.materialize_full``, which runs
    ``materialize`` under the interpreter when the array has implicit children. Kept as
    a seam so that this module, the bottom layer, imports nothing above it.
    """
    global _materializer
    _materializer = fn


def materialize_full(x: tp.Any) -> tp.Any:
    """Materializes ``x`` until it is dense (other values are returned unchanged)."""
    if type(x) not in IMPLICIT_TYPES:
        return x
    return _materializer(x)


def has_implicit_children(x: tp.Any) -> bool:
    """Returns whether any child of ``x`` (at any container depth) is an implicit array.

    Classes that set ``handles_implicit_children = True`` report ``False``: their
    handlers and ``materialize`` deal with implicit children themselves, so the
    interpreter passes them through untouched instead of dispatching on them.
    """
    if type(x).handles_implicit_children:
        return False
    d = x.__dict__
    for name in field_layout(type(x)).children:
        child = d[name]
        if type(child) in IMPLICIT_TYPES:
            return True
        if isinstance(child, (list, tuple, dict)):
            leaves = jax.tree_util.tree_leaves(child, is_leaf=is_implicit)
            if any(type(leaf) in IMPLICIT_TYPES for leaf in leaves):
                return True
    return False


def _discover(obj: tp.Any) -> jax.ShapeDtypeStruct:
    """Finds the shape/dtype of ``materialize(obj)`` with ``jax.eval_shape``, with a cache."""
    key = _structure_key(obj)
    if key is not None:
        found = _discovered_avals.get(key)
        if found is not None:
            return found
    marker = key if key is not None else id(obj)
    active = _discovering.get()
    if marker in active:
        raise UninitializedAval(
            f"{type(obj).__name__}.materialize() read self.shape or self.dtype while they "
            "were being discovered from materialize(); pass shape=/dtype= explicitly or "
            "override compute_shape()/compute_dtype()."
        )
    token = _discovering.set(active | {marker})
    try:
        out = jax.eval_shape(materialize_full, obj)
    except UninitializedAval:
        raise
    except Exception as err:  # noqa: BLE001 - re-raised with the class named.
        raise UninitializedAval(
            f"could not discover the shape/dtype of {type(obj).__name__} by "
            f"jax.eval_shape of its materialize(): {type(err).__name__}: {err}"
        ) from err
    finally:
        _discovering.reset(token)
    if not isinstance(out, jax.ShapeDtypeStruct):
        raise UninitializedAval(
            f"{type(obj).__name__}.materialize() must return one array, got a {type(out).__name__}"
        )
    if key is not None:
        if len(_discovered_avals) >= _MAX_DISCOVERY_CACHE:
            _discovered_avals.clear()
        _discovered_avals[key] = out
    return out


_explicit_avals: dict[tuple[tp.Any, tp.Any], jax.core.ShapedArray] = {}


def _aval_for(shape: tp.Sequence[int], dtype: tp.Any) -> jax.core.ShapedArray:
    """The ``ShapedArray`` of ``shape``/``dtype``, from a cache (building one is slow)."""
    key = (tuple(shape), dtype)
    aval = _explicit_avals.get(key)
    if aval is None:
        aval = jax.core.ShapedArray(tuple(shape), jnp.dtype(dtype))
        if len(_explicit_avals) < _MAX_DISCOVERY_CACHE:
            _explicit_avals[key] = aval
    return aval


def resolve_aval(obj: tp.Any) -> jax.core.ShapedArray:
    """Returns the logical shape/dtype of ``obj``, computing them at most once per instance."""
    d = obj.__dict__
    cached = d.get(_AVAL_ATTR)
    if cached is not None:
        return cached
    shape = d.get("_jaxcore_explicit_shape")
    dtype = d.get("_jaxcore_explicit_dtype")
    cls = type(obj)
    own_aval = cls.own_aval
    if own_aval is not None and (shape is None or dtype is None):
        given = own_aval(obj)  # a quax-style ``aval()`` method of the subclass
        shape = given.shape if shape is None else shape
        dtype = given.dtype if dtype is None else dtype
    computed = cls.computed_attributes
    if shape is None:
        getter = computed.get("shape")
        shape = obj.compute_shape() if getter is None else getter.__get__(obj, cls)
    if dtype is None:
        getter = computed.get("dtype")
        dtype = obj.compute_dtype() if getter is None else getter.__get__(obj, cls)
    if shape is None or dtype is None:
        found = _discover(obj)
        shape = found.shape if shape is None else shape
        dtype = found.dtype if dtype is None else dtype
    aval = d[_AVAL_ATTR] = _aval_for(shape, dtype)
    return aval


def adopt_aval(obj: tp.Any, shape: tp.Sequence[int], dtype: tp.Any) -> None:
    """Records the known logical shape/dtype of ``obj`` so it need not be discovered.

    Used for results of operations whose dense output type is already known (the
    output types of a jaxpr the interpreter ran), never overriding explicit values.
    """
    d = obj.__dict__
    if d.get(_AVAL_ATTR) is not None or d.get("_jaxcore_explicit_shape") is not None:
        return
    d[_AVAL_ATTR] = _aval_for(shape, dtype)


def forget_aval(obj: tp.Any) -> None:
    """Drops the shape/dtype cached on ``obj`` (its fields changed), so they are found again."""
    obj.__dict__.pop(_AVAL_ATTR, None)

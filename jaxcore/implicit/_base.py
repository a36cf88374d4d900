"""The :class:`ImplicitArray` base class: a dataclass pytree that stands in for an array.

An implicit array stores some cheaper representation (quantized codes and scales, two
low-rank factors, nothing at all for a symbolic zero) and knows how to ``materialize``
itself into a dense array. Its dataclass fields are split into pytree *children*
(arrays, traced by JAX) and *aux* fields (static metadata declared with
:func:`aux_field`). The logical ``shape``/``dtype`` are either passed explicitly,
computed by ``compute_shape``/``compute_dtype``, or discovered lazily by
``jax.eval_shape`` of ``materialize`` (cached per structure, so a tree round trip does
not re-trace); a subclass may also compute them itself (properties, or a quax-style
``aval()`` method). Instances behave as values the way equinox modules (and so quax's
values) do: ``==`` compares them, ``dataclasses.replace`` recomputes what was derived,
and the metaclass runs field converters and ``__check_init__`` after ``__init__``.

This is the bottom layer of the package: it imports no other ``jaxcore.implicit``
module. Turning an implicit array with implicit children into a dense one needs the
interpreter (``materialize`` applies primitives to those children), which sits above;
the package installs that materializer here when it is assembled (see
:func:`install_materializer`), and until then :func:`materialize_full` just calls
``materialize`` repeatedly.
"""

from __future__ import annotations

import abc
import contextvars
import dataclasses
import functools
import inspect
import sys
import typing as tp

import jax
import jax.numpy as jnp
import numpy as np

_AUX_METADATA_KEY = "jaxcore_implicit_aux"
# equinox.field's metadata keys, which jaxcore's own field helpers also write.
_STATIC_METADATA_KEY = "static"
_CONVERTER_METADATA_KEY = "converter"
# Every ImplicitArray subclass, filled by __init_subclass__ (see is_implicit).
IMPLICIT_TYPES: set[type] = set()
_LAYOUT_ATTR = "_jaxcore_implicit_layout"
_AVAL_ATTR = "_jaxcore_implicit_aval"


class UninitializedAval(Exception):
    """Raised when an implicit array's ``shape`` or ``dtype`` cannot be determined.

    That happens when neither an explicit value, ``compute_shape``/``compute_dtype`` nor
    ``jax.eval_shape`` of ``materialize`` gives one, e.g. when ``materialize`` itself
    reads ``self.shape`` while the shape is being discovered.
    """


def aux_field(
    metadata: tp.Mapping[str, tp.Any] | None = None,
    *,
    converter: tp.Callable[[tp.Any], tp.Any] | None = None,
    **kwargs: tp.Any,
) -> tp.Any:
    """Declares a dataclass field of an :class:`ImplicitArray` as static metadata.

    Aux fields are not pytree children: they are not traced, batched or
    differentiated, and they are part of the tree structure (so they must be hashable
    and compare by value, like ``int``, ``str``, dtypes or tuples).

    Args:
        metadata: Extra field metadata to keep alongside the aux marker.
        converter: Called on the value after ``__init__`` (see :func:`field`).
        **kwargs: Forwarded to :func:`dataclasses.field` (``default``, ``kw_only``, ...).

    Returns:
        A :class:`dataclasses.Field` marked as auxiliary.
    """
    return field(metadata=metadata, static=True, converter=converter, **kwargs)


def field(
    *,
    static: bool = False,
    converter: tp.Callable[[tp.Any], tp.Any] | None = None,
    metadata: tp.Mapping[str, tp.Any] | None = None,
    **kwargs: tp.Any,
) -> tp.Any:
    """A dataclass field of an :class:`ImplicitArray`, with equinox's ``static``/``converter``.

    ``static=True`` makes it an aux field (as :func:`aux_field`). ``converter`` is
    called on the field's value once the object is built (after ``__init__`` and
    ``__post_init__``, before any ``__check_init__``), as ``equinox.field(converter=)``
    does; it is not called when JAX rebuilds the object from its leaves. Fields made
    by ``equinox.field`` are honoured the same way (their metadata keys are read).

    Args:
        static: Whether the field is static metadata rather than a pytree child.
        converter: A function applied to the value passed to the constructor.
        metadata: Extra field metadata.
        **kwargs: Forwarded to :func:`dataclasses.field` (``default``, ``kw_only``, ...).

    Returns:
        A :class:`dataclasses.Field`.
    """
    merged = dict(metadata) if metadata else {}
    if static:
        merged[_AUX_METADATA_KEY] = True
    if converter is not None:
        merged[_CONVERTER_METADATA_KEY] = converter
    return dataclasses.field(metadata=merged, **kwargs)


class _Layout(tp.NamedTuple):
    children: tuple[str, ...]
    aux: tuple[str, ...]


_layouts: dict[type, _Layout] = {}


def field_layout(cls: type) -> _Layout:
    """Returns (and caches on ``cls``) which dataclass fields are children and which aux."""
    layout = _layouts.get(cls)
    if layout is not None:
        return layout
    layout = cls.__dict__.get(_LAYOUT_ATTR)
    if layout is not None:
        _layouts[cls] = layout
        return layout
    own_fields = cls.__dict__.get("__dataclass_fields__")
    if own_fields is None:
        declared = [
            name
            for name, annotation in cls.__dict__.get("__annotations__", {}).items()
            if "ClassVar" not in str(annotation)
        ]
        if declared:
            raise TypeError(
                f"{cls.__name__} declares fields {declared} but is not decorated with "
                "@dataclasses.dataclass; ImplicitArray subclasses must be dataclasses."
            )
    children: list[str] = []
    aux: list[str] = []
    for f in dataclasses.fields(cls):
        if f.name in ("shape", "dtype"):
            continue
        static = f.metadata.get(_AUX_METADATA_KEY) or f.metadata.get(_STATIC_METADATA_KEY)
        (aux if static else children).append(f.name)
    layout = _Layout(tuple(children), tuple(aux))
    setattr(cls, _LAYOUT_ATTR, layout)
    _layouts[cls] = layout
    return layout


# The code of dataclasses.replace (and of the helper it calls on Python 3.13+): while it
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


class _AvalAttribute:
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


class _ComputedAttribute:
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


def _structure_key(obj: ImplicitArray) -> tp.Any:
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


def has_implicit_children(x: ImplicitArray) -> bool:
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


def _discover(obj: ImplicitArray) -> jax.ShapeDtypeStruct:
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


def resolve_aval(obj: ImplicitArray) -> jax.core.ShapedArray:
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


def adopt_aval(obj: ImplicitArray, shape: tp.Sequence[int], dtype: tp.Any) -> None:
    """Records the known logical shape/dtype of ``obj`` so it need not be discovered.

    Used for results of operations whose dense output type is already known (the
    output types of a jaxpr the interpreter ran), never overriding explicit values.
    """
    d = obj.__dict__
    if d.get(_AVAL_ATTR) is not None or d.get("_jaxcore_explicit_shape") is not None:
        return
    d[_AVAL_ATTR] = _aval_for(shape, dtype)


def _no_finish(obj: tp.Any) -> None:
    del obj


# Per class: what runs once an instance is built (converters, __check_init__), or _no_finish.
_finishers: dict[type, tp.Callable[[tp.Any], None]] = {}


def _make_finisher(cls: type) -> tp.Callable[[tp.Any], None]:
    """The post-construction step of ``cls``: field converters, then every ``__check_init__``."""
    converters = [
        (f.name, f.metadata[_CONVERTER_METADATA_KEY])
        for f in dataclasses.fields(cls)
        if f.metadata.get(_CONVERTER_METADATA_KEY) is not None and f.name not in ("shape", "dtype")
    ]
    checks = [k.__dict__["__check_init__"] for k in cls.__mro__ if "__check_init__" in k.__dict__]
    if not converters and not checks:
        return _no_finish

    def finish(obj: tp.Any) -> None:
        if converters:
            d = obj.__dict__
            for name, convert in converters:
                d[name] = convert(d[name])
            d.pop(_AVAL_ATTR, None)  # the fields changed: shape/dtype are recomputed
        for check in checks:
            check(obj)

    return finish


class ImplicitArrayMeta(abc.ABCMeta):
    """The metaclass of :class:`ImplicitArray`: finishes construction as equinox does.

    After ``__init__`` (and ``__post_init__``) it applies the field converters
    (:func:`field`, ``equinox.field(converter=)``) and then calls every
    ``__check_init__`` defined along the MRO, subclass first. Neither runs when JAX
    rebuilds an instance from its leaves.
    """

    def __call__(cls, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        obj = super().__call__(*args, **kwargs)
        finish = _finishers.get(cls)
        if finish is None:
            finish = _finishers[cls] = _make_finisher(cls)
        if finish is not _no_finish:
            finish(obj)
        return obj

    def __setattr__(cls, name: str, value: tp.Any) -> None:
        if name == "__init__" and "__dataclass_fields__" in cls.__dict__:
            _annotate_converter_inputs(cls, value)
        super().__setattr__(name, value)


def _converter_input_annotation(converter: tp.Callable[[tp.Any], tp.Any]) -> tp.Any:
    """The annotation of a converter's first parameter (what ``__init__`` accepts), else Any."""
    try:
        parameters = list(inspect.signature(converter).parameters.values())
    except (TypeError, ValueError):
        return tp.Any
    if not parameters or parameters[0].annotation is inspect.Parameter.empty:
        return tp.Any
    return parameters[0].annotation


def _annotate_converter_inputs(cls: type, init: tp.Any) -> None:
    """Annotates the dataclass ``__init__`` of ``cls`` with what its converter fields accept.

    A field with a converter takes the converter's input, not the field's type, so (as
    equinox does) its ``__init__`` parameter is annotated with the converter's first
    parameter's annotation, or ``Any``. Runtime type checkers that wrap ``__init__``
    (jaxtyping's import hook, beartype) then check what the caller passes.
    """
    annotations = getattr(init, "__annotations__", None)
    if not isinstance(annotations, dict):
        return
    for f in dataclasses.fields(cls):
        converter = f.metadata.get(_CONVERTER_METADATA_KEY)
        if converter is not None and f.name in annotations:
            annotations[f.name] = _converter_input_annotation(converter)


def _constant(value: tp.Any, obj: tp.Any) -> tp.Any:
    del obj
    return value


def _own_aval_method(attr: tp.Any) -> tp.Callable[[tp.Any], tp.Any] | None:
    """The function behind a subclass's own ``aval`` (method or property), else ``None``."""
    if isinstance(attr, property):
        return attr.fget
    if callable(attr):
        return tp.cast(tp.Callable[[tp.Any], tp.Any], attr)
    return None


@dataclasses.dataclass
class ImplicitArray(metaclass=ImplicitArrayMeta):
    """Base class for array stand-ins that flow through JAX without materializing.

    Subclasses are dataclasses. Plain fields are pytree children (arrays); fields
    declared with :func:`aux_field` (or ``field(static=True)``) are static metadata. A
    subclass implements :meth:`materialize`, and registers primitive handlers with
    :func:`jaxcore.implicit.register`; functions wrapped with
    :func:`jaxcore.implicit.implicit` then route primitives on the array to those
    handlers, and materialize (with one warning per primitive and type) otherwise.

    ``shape`` and ``dtype`` are optional keyword arguments. When omitted they come from
    :meth:`compute_shape`/:meth:`compute_dtype`, or else from ``jax.eval_shape`` of
    :meth:`materialize`. Explicit values are static (part of the tree structure), so
    leave them out for arrays that will be ``vmap``-ed over: discovery then sees the
    per-example children. ``dataclasses.replace`` keeps explicit values and recomputes
    the others from the new fields. A subclass may instead define ``shape``/``dtype``
    as properties (then they are not constructor arguments), declare them as fields
    of its own, or define an ``aval()`` method returning a ``ShapedArray``, as quax's
    ``ArrayValue`` does.

    Subclasses must be plain (non-frozen) dataclasses, and should be treated as
    immutable: the discovered shape/dtype is cached per instance. As with equinox
    modules, field converters (:func:`field`) and ``__check_init__`` methods run after
    ``__init__``, and ``==`` compares two implicit arrays as values: same type, equal
    static metadata, children equal in shape, dtype and every element (a traced
    boolean when the children are traced). Inside an ``implicit`` function, ``==`` is
    the element-wise JAX operation, dispatched like any other.

    Class keyword arguments:
        warn_on_materialize: ``False`` silences the fallback-materialization warning for
            this class (``class Zeros(ImplicitArray, warn_on_materialize=False)``).

    Class attributes:
        handles_implicit_children: ``True`` for wrapper classes whose handlers and
            ``materialize`` dispatch on their implicit children themselves (e.g.
            :class:`jaxcore.implicit.StraightThrough`). By default, a handler or
            ``materialize`` of an array with implicit children runs with those children
            wrapped, so operations on them dispatch like any others.

    Example:
        A low-rank matrix whose shape follows from its factors, so it is never
        discovered by tracing ``materialize`` (handlers: :func:`jaxcore.implicit.register`):

        >>> @dataclasses.dataclass
        ... class LowRank(ImplicitArray):
        ...     left: jax.Array
        ...     right: jax.Array
        ...     def compute_shape(self):
        ...         return (self.left.shape[0], self.right.shape[1])
        ...     def materialize(self):
        ...         return self.left @ self.right
        >>> x = LowRank(jnp.ones((4, 2)), jnp.ones((2, 3)))
        >>> x.shape, x.dtype, x.aval().shape
        ((4, 3), dtype('float32'), (4, 3))
    """

    warn_on_materialize: tp.ClassVar[bool] = True
    handles_implicit_children: tp.ClassVar[bool] = False
    default_shape: tp.ClassVar[tuple[int, ...] | None] = None
    default_dtype: tp.ClassVar[tp.Any] = None
    # Set per subclass by __init_subclass__: a quax-style aval() of its own, and the
    # shape/dtype descriptors it computes itself.
    own_aval: tp.ClassVar[tp.Callable[[tp.Any], tp.Any] | None] = None
    computed_attributes: tp.ClassVar[dict[str, tp.Any]] = {}

    _: dataclasses.KW_ONLY
    shape: tuple[int, ...] = _AvalAttribute()  # type: ignore[assignment]
    dtype: tp.Any = _AvalAttribute()

    def __init_subclass__(cls, warn_on_materialize: bool | None = None, **kwargs: tp.Any):
        super().__init_subclass__(**kwargs)
        if warn_on_materialize is not None:
            cls.warn_on_materialize = bool(warn_on_materialize)
        own = cls.__dict__
        annotations = own.get("__annotations__", {})
        computed = dict(cls.computed_attributes)
        for name in ("shape", "dtype"):
            attr = own.get(name)
            if name in annotations:  # declared as a field again: a constructor argument
                computed.pop(name, None)
            elif attr is not None and not isinstance(attr, (_AvalAttribute, _ComputedAttribute)):
                if not hasattr(type(attr), "__get__"):  # a constant, e.g. shape = (3,)
                    value = tuple(attr) if name == "shape" else jnp.dtype(attr)
                    attr = property(functools.partial(_constant, value))
                computed[name] = attr
                setattr(cls, name, _ComputedAttribute(name, attr))
        cls.computed_attributes = computed
        if "aval" in own:
            cls.own_aval = _own_aval_method(own["aval"])
        if "__eq__" not in own:
            # Keep the inherited value equality: the dataclass decorator would otherwise
            # generate an __eq__ comparing fields as tuples, which fails on arrays.
            inherited = next(
                k.__dict__["__eq__"] for k in cls.__mro__[1:] if "__eq__" in k.__dict__
            )
            cls.__eq__ = inherited  # type: ignore[method-assign]
        IMPLICIT_TYPES.add(cls)
        jax.tree_util.register_pytree_with_keys(
            cls,
            _flatten_with_keys,
            functools.partial(_unflatten, cls),
            _flatten,
        )

    def __eq__(self, other: object) -> tp.Any:
        """Value equality, as equinox modules (and so quax values) define it.

        Returns ``True`` when ``other`` has the same type and static metadata and its
        children are equal in structure, shape, dtype and every element; ``False``
        otherwise; a traced boolean scalar when some of the children are traced.
        """
        if not is_implicit(other):
            return NotImplemented
        return tree_equal(self, tp.cast(ImplicitArray, other))

    @abc.abstractmethod
    def materialize(self) -> jax.Array:
        """Returns the dense array this object stands for."""

    def compute_shape(self) -> tuple[int, ...] | None:
        """Returns the logical shape without materializing, or ``None`` to discover it.

        Override when the shape follows cheaply from the children (it is then correct
        under ``vmap`` too). Defaults to the class attribute ``default_shape``.
        """
        return self.default_shape

    def compute_dtype(self) -> tp.Any:
        """Returns the logical dtype, or ``None`` to discover it (see :meth:`compute_shape`)."""
        return self.default_dtype

    @property
    def aval(self) -> CallableAval:
        """The abstract value (shape and dtype) of the materialized array.

        Reads as the ``ShapedArray`` (``x.aval.shape``, ``x.aval == other``); calling
        it, ``x.aval()``, returns the ``ShapedArray`` itself (quax's spelling).
        """
        return CallableAval(resolve_aval(self))

    @property
    def ndim(self) -> int:
        """Number of dimensions of the materialized array."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements of the materialized array."""
        return int(np.prod(self.shape, dtype=np.int64))

    def scan_slice(self, index: tp.Any) -> ImplicitArray | None:
        """What a ``lax.scan`` body gets for ``self[index]``, or ``None`` (the default).

        ``None`` slices every child along axis 0, as ``vmap`` batches. A view (for kernels
        that read one entry of a stack in place, as `jaxcore.quant`'s) has the scan pass
        ``self`` whole and the body get ``self.scan_slice(i)``; asked once with ``0``."""
        del index
        return None

    def on_return(self) -> tp.Any:
        """What an ``implicit`` function or a scan body returns for this (default: itself).

        A view meant for handlers only returns the array it stands for."""
        return self

    @classmethod
    def default_handler(cls, primitive: tp.Any, *args: tp.Any, params: dict | None = None):
        """Handles ``primitive`` when no registered handler matches: materialize and bind.

        Override in a subclass to change the fallback for that class.

        Args:
            primitive: The JAX primitive being applied.
            *args: Its operands; implicit arrays among them are materialized.
            params: The primitive's parameters.

        Returns:
            The primitive's result on the materialized operands.
        """
        return primitive.bind(*[materialize_full(a) for a in args], **(params or {}))


def _flatten(obj: ImplicitArray):
    layout = field_layout(type(obj))
    d = obj.__dict__
    children = [d[name] for name in layout.children]
    aux = (
        d.get("_jaxcore_explicit_shape"),
        d.get("_jaxcore_explicit_dtype"),
        *(d[name] for name in layout.aux),
    )
    return children, aux


def _flatten_with_keys(obj: ImplicitArray):
    children, aux = _flatten(obj)
    names = field_layout(type(obj)).children
    return [(jax.tree_util.GetAttrKey(n), c) for n, c in zip(names, children)], aux


def _unflatten(cls: type, aux: tuple, children: tp.Iterable[tp.Any]) -> ImplicitArray:
    layout = field_layout(cls)
    obj: ImplicitArray = object.__new__(cls)
    d = obj.__dict__
    d["_jaxcore_explicit_shape"] = aux[0]
    d["_jaxcore_explicit_dtype"] = aux[1]
    for name, value in zip(layout.aux, aux[2:]):
        d[name] = value
    for name, value in zip(layout.children, children):
        d[name] = value
    return obj


def _leaf_equal(a: tp.Any, b: tp.Any) -> tp.Any:
    """Whether two leaves are equal: ``True``, ``False`` or a traced boolean scalar."""
    a_array = hasattr(a, "shape") and hasattr(a, "dtype")
    b_array = hasattr(b, "shape") and hasattr(b, "dtype")
    if a_array != b_array:
        return False
    if not a_array:
        return bool(a == b)
    if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
        return False
    if isinstance(a, jax.core.Tracer) or isinstance(b, jax.core.Tracer):
        return jnp.all(a == b)
    return bool(np.array_equal(np.asarray(a), np.asarray(b)))


def tree_equal(x: ImplicitArray, y: ImplicitArray) -> tp.Any:
    """Value equality of two implicit arrays (see :meth:`ImplicitArray.__eq__`)."""
    if type(x) is not type(y):
        return False
    x_tree: tp.Any
    x_leaves, x_tree = jax.tree_util.tree_flatten(x)
    y_leaves, y_tree = jax.tree_util.tree_flatten(y)
    if x_tree != y_tree:
        return False
    result: tp.Any = True
    for a, b in zip(x_leaves, y_leaves):
        equal = _leaf_equal(a, b)
        if equal is False:
            return False
        if equal is not True:
            result = equal if result is True else result & equal
    return result


def is_implicit(x: tp.Any) -> bool:
    """Returns whether ``x`` is an :class:`ImplicitArray` instance.

    A set lookup of ``type(x)`` rather than ``isinstance``: ``ImplicitArray`` is an ABC,
    whose ``isinstance`` is slow, and this runs several times per intercepted primitive.
    """
    return type(x) in IMPLICIT_TYPES

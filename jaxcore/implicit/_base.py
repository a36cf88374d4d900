"""The :class:`ImplicitArray` base class: a dataclass pytree that stands in for an array.

An implicit array stores some cheaper representation (quantized codes and scales, two
low-rank factors, nothing at all for a symbolic zero) and knows how to ``materialize``
itself into a dense array. Its dataclass fields are split into pytree *children*
(arrays, traced by JAX) and *aux* fields (static metadata declared with
:func:`~._fields.aux_field`; :mod:`._fields`). Its logical ``shape``/``dtype`` are given,
computed or discovered (:mod:`._aval`). Instances behave as values the way equinox
modules (and so quax's values) do: ``==`` compares them, ``dataclasses.replace``
recomputes what was derived, and the metaclass runs field converters and
``__check_init__`` after ``__init__``.

Imports only :mod:`._fields` and :mod:`._aval` from the package.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import inspect
import operator
import typing as tp

import jax
import jax.numpy as jnp
import numpy as np

from jaxcore._getters import tuple_getter
from jaxcore.implicit._aval import (
    AvalAttribute,
    CallableAval,
    ComputedAttribute,
    forget_aval,
    materialize_full,
    resolve_aval,
)
from jaxcore.implicit._fields import (
    CONVERTER_METADATA_KEY,
    IMPLICIT_TYPES,
    field_layout,
    is_implicit,
)


def _no_finish(obj: tp.Any) -> None:
    del obj


# Per class: what runs once an instance is built (converters, __check_init__), or _no_finish.
_finishers: dict[type, tp.Callable[[tp.Any], None]] = {}


def _make_finisher(cls: type) -> tp.Callable[[tp.Any], None]:
    """The post-construction step of ``cls``: field converters, then every ``__check_init__``."""
    converters = [
        (f.name, f.metadata[CONVERTER_METADATA_KEY])
        for f in dataclasses.fields(cls)
        if f.metadata.get(CONVERTER_METADATA_KEY) is not None and f.name not in ("shape", "dtype")
    ]
    checks = [k.__dict__["__check_init__"] for k in cls.__mro__ if "__check_init__" in k.__dict__]
    if not converters and not checks:
        return _no_finish

    def finish(obj: tp.Any) -> None:
        if converters:
            d = obj.__dict__
            for name, convert in converters:
                d[name] = convert(d[name])
            forget_aval(obj)  # the fields changed: shape/dtype are recomputed
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
        converter = f.metadata.get(CONVERTER_METADATA_KEY)
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
    shape: tuple[int, ...] = AvalAttribute()  # type: ignore[assignment]
    dtype: tp.Any = AvalAttribute()

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
            elif attr is not None and not isinstance(attr, (AvalAttribute, ComputedAttribute)):
                if not hasattr(type(attr), "__get__"):  # a constant, e.g. shape = (3,)
                    value = tuple(attr) if name == "shape" else jnp.dtype(attr)
                    attr = property(functools.partial(_constant, value))
                computed[name] = attr
                setattr(cls, name, ComputedAttribute(name, attr))
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


def _make_flattener(cls: type) -> tp.Callable[[tp.Any], tuple]:
    layout = field_layout(cls)
    children = tuple_getter(layout.children, by=operator.itemgetter)
    aux = tuple_getter(layout.aux, by=operator.itemgetter)

    def flatten(obj: tp.Any) -> tuple:
        d = obj.__dict__
        return children(d), (
            d.get("_jaxcore_explicit_shape"),
            d.get("_jaxcore_explicit_dtype"),
            *aux(d),
        )

    _flatteners[cls] = flatten
    return flatten


# One flatten function per class, built on first use (a class's fields are known only once
# the dataclass decorator has run, after registration). JAX calls it for every implicit
# argument of every jitted call: the specialised readers take it from ~0.9 us to ~0.35 us.
_flatteners: dict[type, tp.Callable[[tp.Any], tuple]] = {}


def _flatten(obj: ImplicitArray):
    flatten = _flatteners.get(type(obj))
    if flatten is None:
        flatten = _make_flattener(type(obj))
    return flatten(obj)


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

"""``NamedArray``: a JAX array whose axes are addressed by name.

This module holds the type itself (storage, pytree registration, axis lookup and the
``NamedArray[...]`` axes specs) and imports nothing else from ``jaxcore.named`` but the
axes. Its operators and the methods that forward to the named functions (``x.sum("b")``,
``x[...]``, ``x.at[...]``) are bound by ``_methods`` when the package is assembled, so the
modules that implement them can import the type without importing upward.

The eager hot path is kept thin on purpose: a ``NamedArray`` caches its tuple of axis
names and internal constructors skip validation.
"""

from __future__ import annotations

import builtins
import typing
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxcore.named._axis import (
    Axis,
    AxisSelection,
    AxisSelector,
    AxisSpec,
    selection_items,
    to_axes,
)

Tracer = jax.core.Tracer
_SCALAR_TYPES = (int, float, complex, bool, np.number, np.bool_)


def is_scalar_like(x) -> bool:
    """True for Python/NumPy scalars and 0-d arrays (which broadcast against anything)."""
    if isinstance(x, _SCALAR_TYPES):
        return True
    ndim = getattr(x, "ndim", None)
    return ndim == 0


def describe_axes(axes: Sequence[Axis]) -> str:
    """``(name=size, ...)``: how error messages show a list of axes."""
    return "(" + ", ".join(f"{a.name}={a.size}" for a in axes) + ")"


def _axis_not_found(name: str, axes: Sequence[Axis]) -> ValueError:
    return ValueError(f"Axis {name!r} not found in array with axes {describe_axes(axes)}")


def check_named(array, fname: str) -> None:
    """Raises ``TypeError`` unless ``array`` is a NamedArray (``fname`` names the caller)."""
    if not isinstance(array, NamedArray):
        raise TypeError(f"{fname} needs a NamedArray, got {type(array).__name__}")


class NamedArray:
    """An array whose dimensions are named ``Axis`` objects instead of positions.

    A ``NamedArray`` is a pytree whose only leaf is ``array``; ``axes`` are static
    metadata, so it passes through ``jax.jit``, ``jax.grad`` and ``jax.tree`` helpers.
    Binary operators match axes by name (transposing and broadcasting as needed).

    Args:
        array: The underlying array (any array-like with a ``shape``).
        axes: The axes, one per dimension, as an ``AxisSpec``.

    Raises:
        ValueError: if the number or sizes of ``axes`` do not match ``array.shape``, or
            if an axis name is repeated.
    """

    __slots__ = ("array", "axes", "_names")

    # NumPy operands defer to our reflected operators (as with jax.Array), so
    # ``np.float32(2) * x`` is a NamedArray rather than an object array.
    __array_ufunc__ = None

    def __init__(self, array: Any, axes: AxisSpec):
        axes = to_axes(axes)
        shape = getattr(array, "shape", None)
        if shape is not None:
            if len(shape) != len(axes):
                raise ValueError(
                    f"Array of shape {tuple(shape)} has {len(shape)} dimensions but "
                    f"{len(axes)} axes were given: {describe_axes(axes)}"
                )
            for ax, s in zip(axes, shape):
                if ax.size != s:
                    raise ValueError(
                        f"Axis {ax.name!r} has size {ax.size} but the array's dimension is {s} "
                        f"(array shape {tuple(shape)}, axes {describe_axes(axes)})"
                    )
        self.array = array
        self.axes = axes
        self._names = tuple(a.name for a in axes)

    # -- construction without validation (internal hot path, pytree unflatten) ---------
    @classmethod
    def _new(cls, array, axes: tuple[Axis, ...], names: tuple[str, ...] | None = None):
        obj = object.__new__(cls)
        obj.array = array
        obj.axes = axes
        obj._names = names if names is not None else tuple(a.name for a in axes)
        return obj

    # -- pytree -----------------------------------------------------------------------
    def tree_flatten(self):
        """Returns ``((array,), axes)``: the array is the only leaf."""
        return (self.array,), self.axes

    @classmethod
    def tree_unflatten(cls, aux, tree):
        """Rebuilds from ``tree_flatten`` output without validating (leaves may be anything)."""
        return cls._new(tree[0], aux)

    # -- basic properties -------------------------------------------------------------
    @property
    def shape(self) -> dict[str, int]:
        """Axis name to size, in axis order."""
        return {a.name: a.size for a in self.axes}

    named_shape = shape

    @property
    def dtype(self):
        """The dtype of the underlying array."""
        return self.array.dtype

    @property
    def ndim(self) -> int:
        """The number of axes."""
        return len(self.axes)

    @property
    def size(self) -> int:
        """The number of elements."""
        return int(np.prod([a.size for a in self.axes], dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """The number of bytes of the underlying array."""
        return self.size * np.dtype(self.dtype).itemsize

    @property
    def real(self) -> NamedArray:
        """The real part, with the same axes."""
        return NamedArray._new(jnp.real(self.array), self.axes, self._names)

    @property
    def imag(self) -> NamedArray:
        """The imaginary part, with the same axes."""
        return NamedArray._new(jnp.imag(self.array), self.axes, self._names)

    def item(self):
        """Returns the value of a one-element array as a Python scalar."""
        return self.array.item()

    def scalar(self) -> jax.Array:
        """Returns the 0-d array of a NamedArray with no axes.

        Raises:
            ValueError: if the array still has axes.
        """
        if self.axes:
            raise ValueError(
                f"scalar() needs an array with no axes, got axes {describe_axes(self.axes)}"
            )
        return self.array

    def tolist(self):
        """The nested-list form of the underlying array (positional order)."""
        return self.array.tolist()

    def tobytes(self, order="C"):
        """The raw bytes of the underlying array."""
        return np.asarray(self.array).tobytes(order=order)

    def astype(self, dtype) -> NamedArray:
        """Returns a copy cast to ``dtype``."""
        return NamedArray._new(self.array.astype(dtype), self.axes, self._names)

    def __repr__(self):
        return f"NamedArray(axes={describe_axes(self.axes)}, dtype={getattr(self.array, 'dtype', None)}, array={self.array!r})"

    def __bool__(self):
        return bool(self.array)

    def __float__(self):
        return float(self.array)

    def __int__(self):
        return int(self.array)

    def __complex__(self):
        return complex(self.array)

    # -- axis lookup ------------------------------------------------------------------
    def _index_of(self, ax: AxisSelector) -> int:
        """Position of ``ax`` (name or ``Axis``, size-checked) or a ``ValueError`` naming it."""
        if type(ax) is str:
            try:
                return self._names.index(ax)
            except ValueError:
                raise _axis_not_found(ax, self.axes) from None
        if isinstance(ax, Axis):
            try:
                i = self._names.index(ax.name)
            except ValueError:
                raise _axis_not_found(ax.name, self.axes) from None
            if self.axes[i].size != ax.size:
                raise ValueError(
                    f"Axis {ax.name!r} has size {self.axes[i].size} in the array but {ax.size} "
                    f"was requested (array axes {describe_axes(self.axes)})"
                )
            return i
        raise TypeError(f"Expected an Axis or an axis name (str), got {ax!r} ({type(ax).__name__})")

    def has_axis(self, axis: AxisSelection) -> bool:
        """True if every selected axis is present (with the same size, where one is given)."""
        for name, size in selection_items(axis):
            if name not in self._names:
                return False
            if size is not None and self.axes[self._names.index(name)].size != size:
                return False
        return True

    def axis_size(self, axis: AxisSelection) -> int | tuple[int, ...]:
        """Size of one axis, or a tuple of sizes for several."""
        if isinstance(axis, (str, Axis)):
            return self.axes[self._index_of(axis)].size
        return tuple(a.size for a in self.resolve_axis(tuple(axis)))

    def resolve_axis(self, axes: AxisSelection):
        """Returns the ``Axis`` objects for a selection.

        Args:
            axes: A name/``Axis`` (gives an ``Axis``), a sequence (gives a tuple) or a
                partial shape dict (gives a shape dict with every size filled in).

        Raises:
            ValueError: if an axis is missing or a given size does not match.
        """
        if isinstance(axes, (str, Axis)):
            return self.axes[self._index_of(axes)]
        if isinstance(axes, Mapping):
            out = {}
            for name, size in selection_items(axes):
                ax = self.axes[self._index_of(name)]
                if size is not None and size != ax.size:
                    raise ValueError(
                        f"Axis {name!r} has size {ax.size} in the array but {size} was requested"
                    )
                out[name] = ax.size
            return out
        return tuple(self.axes[self._index_of(a)] for a in axes)

    def axis_indices(self, axis: AxisSelection):
        """Position of one axis (``None`` if absent), or a tuple of positions for several."""
        if isinstance(axis, (str, Axis)):
            name = axis if isinstance(axis, str) else axis.name
            return self._names.index(name) if name in self._names else None
        return tuple(
            self.axis_indices(a) for a in (axis.keys() if isinstance(axis, Mapping) else axis)
        )

    def matches_axes(self, spec) -> bool:
        """True if this array conforms to an axes spec (see ``NamedArray[...]``).

        Args:
            spec: A ``NamedArray[...]`` or ``hax.haxtyping`` annotation (whose dtype rule
                is checked too), an ``AxesSpec``, a space-separated
                string (``"batch ... embed"``), a sequence of names (``...`` allowed) or a
                set of names (order-free).
        """
        axes_spec = as_axes_spec(spec)
        return axes_spec.matches(self._names) and axes_spec.accepts_dtype(self.dtype)

    def __class_getitem__(cls, item):
        """``NamedArray["batch", "embed"]``: an annotation that records the expected axes.

        Returns ``typing.Annotated[NamedArray, AxesSpec(...)]``; pass it to
        ``matches_axes`` to check an array against it.
        """
        return typing.Annotated[cls, as_axes_spec(item)]

    # -- indexing ---------------------------------------------------------------------
    def __setitem__(self, idx, value):
        raise TypeError("NamedArray is immutable; use x = x.at[...].set(value) instead")

    def __iter__(self):
        raise TypeError(
            f"Iterating over a NamedArray with axes {describe_axes(self.axes)} is ambiguous; "
            "use hax.unbind(x, axis) to split along a named axis"
        )

    # Elementwise ``==`` (bound in ``_methods``) makes instances unhashable, as jax.Array.
    if TYPE_CHECKING:
        # The operators and methods `_methods` binds when the package is assembled, declared
        # for type checkers (binding them there keeps the imports pointing down). mypy checks
        # `_methods._Methods` against these declarations, so the two cannot drift apart.
        @property
        def at(self) -> Any: ...
        def __getitem__(self, idx) -> NamedArray: ...
        def rename(self, renames: Mapping[AxisSelector, AxisSelector]) -> NamedArray: ...
        def rearrange(self, *args, **kwargs) -> NamedArray: ...
        def broadcast_to(
            self, axes: AxisSpec, ensure_order: bool = True, enforce_no_extra_axes: bool = True
        ) -> NamedArray: ...
        def broadcast_axis(self, axis: AxisSpec) -> NamedArray: ...
        def split(self, axis: AxisSelector, new_axes: Sequence[Axis]) -> list[NamedArray]: ...
        def flatten_axes(self, old_axes: AxisSelection, new_axis: AxisSelector) -> NamedArray: ...
        def unflatten_axis(self, axis: AxisSelector, new_axes: AxisSpec) -> NamedArray: ...
        def ravel(self, new_axis_name: AxisSelector) -> NamedArray: ...
        def flatten(self, new_axis_name: AxisSelector) -> NamedArray: ...
        def unbind(self, axis: AxisSelector) -> list[NamedArray]: ...
        def slice(self, *args, **kwargs) -> NamedArray: ...
        def updated_slice(self, start, update) -> NamedArray: ...
        def take(self, axis: AxisSelector, index, *, mode=None, fill_value=None) -> NamedArray: ...
        def dot(self, *args, **kwargs) -> NamedArray: ...
        def all(self, axis=None, *, where=None) -> NamedArray: ...
        def any(self, axis=None, *, where=None) -> NamedArray: ...
        def max(self, axis=None, *, where=None) -> NamedArray: ...
        def min(self, axis=None, *, where=None) -> NamedArray: ...
        def sum(self, axis=None, *, dtype=None, where=None) -> NamedArray: ...
        def prod(self, axis=None, *, dtype=None, where=None) -> NamedArray: ...

        product = prod

        def mean(self, axis=None, *, dtype=None, where=None) -> NamedArray: ...
        def std(self, axis=None, *, dtype=None, ddof=0, where=None) -> NamedArray: ...
        def var(self, axis=None, dtype=None, ddof=0, *, where=None) -> NamedArray: ...
        def ptp(self, axis=None, *, where=None) -> NamedArray: ...
        def argmax(self, axis=None) -> NamedArray: ...
        def argmin(self, axis=None) -> NamedArray: ...
        def argsort(self, axis, *, stable: bool = False) -> NamedArray: ...
        def sort(self, axis) -> NamedArray: ...
        def cumsum(self, axis, *, dtype=None) -> NamedArray: ...
        def cumprod(self, axis, *, dtype=None) -> NamedArray: ...
        def clip(self, a_min=None, a_max=None) -> NamedArray: ...
        def conj(self) -> NamedArray: ...
        def conjugate(self) -> NamedArray: ...
        def copy(self) -> NamedArray: ...
        def round(self, decimals=0) -> NamedArray: ...
        def trace(self, axis1, axis2, offset=0, dtype=None) -> NamedArray: ...
        def __add__(self, other) -> NamedArray: ...
        def __radd__(self, other) -> NamedArray: ...
        def __sub__(self, other) -> NamedArray: ...
        def __rsub__(self, other) -> NamedArray: ...
        def __mul__(self, other) -> NamedArray: ...
        def __rmul__(self, other) -> NamedArray: ...
        def __truediv__(self, other) -> NamedArray: ...
        def __rtruediv__(self, other) -> NamedArray: ...
        def __floordiv__(self, other) -> NamedArray: ...
        def __rfloordiv__(self, other) -> NamedArray: ...
        def __mod__(self, other) -> NamedArray: ...
        def __rmod__(self, other) -> NamedArray: ...
        def __divmod__(self, other) -> tuple[NamedArray, NamedArray]: ...
        def __rdivmod__(self, other) -> tuple[NamedArray, NamedArray]: ...
        def __pow__(self, other) -> NamedArray: ...
        def __rpow__(self, other) -> NamedArray: ...
        def __and__(self, other) -> NamedArray: ...
        def __rand__(self, other) -> NamedArray: ...
        def __or__(self, other) -> NamedArray: ...
        def __ror__(self, other) -> NamedArray: ...
        def __xor__(self, other) -> NamedArray: ...
        def __rxor__(self, other) -> NamedArray: ...
        def __lshift__(self, other) -> NamedArray: ...
        def __rlshift__(self, other) -> NamedArray: ...
        def __rshift__(self, other) -> NamedArray: ...
        def __rrshift__(self, other) -> NamedArray: ...
        def __lt__(self, other) -> NamedArray: ...
        def __le__(self, other) -> NamedArray: ...
        def __gt__(self, other) -> NamedArray: ...
        def __ge__(self, other) -> NamedArray: ...
        def __eq__(self, other) -> NamedArray: ...  # type: ignore[override]  # element-wise, like jax.Array
        def __ne__(self, other) -> NamedArray: ...  # type: ignore[override]  # element-wise, like jax.Array
        def __neg__(self) -> NamedArray: ...
        def __pos__(self) -> NamedArray: ...
        def __abs__(self) -> NamedArray: ...
        def __invert__(self) -> NamedArray: ...

    __hash__ = None  # type: ignore[assignment]  # unhashable, like jax.Array (it has __eq__)


jax.tree_util.register_pytree_with_keys(
    NamedArray,
    lambda x: (((jax.tree_util.GetAttrKey("array"), x.array),), x.axes),
    NamedArray.tree_unflatten,
    NamedArray.tree_flatten,
)


NamedOrNumeric = NamedArray | int | float | complex | bool | jax.Array
"""A ``NamedArray`` or something that broadcasts against anything (a scalar)."""

# ----------------------------------------------------------------------------- specs


class AxesSpec:
    """The expected axes of a ``NamedArray[...]`` annotation (and, from ``hax.haxtyping``, dtype).

    Attributes:
        names: Expected names; ``...`` stands for any run of other axes.
        ordered: Whether the names must appear in this order.
        rule: The dtype rule of a ``hax.haxtyping`` annotation (``f32[...]``, ``Float[...]``),
            or ``None`` for any dtype.
    """

    __slots__ = ("names", "ordered", "rule")

    def __init__(self, names: tuple, ordered: bool, rule: Any = None):
        self.names = names
        self.ordered = ordered
        self.rule = rule

    @property
    def before(self) -> tuple[str, ...]:
        """The names before the first ``...`` (all names when there is none), as in Haliax."""
        i = self.names.index(Ellipsis) if Ellipsis in self.names else len(self.names)
        return tuple(self.names[:i])

    @property
    def after(self) -> tuple[str, ...]:
        """The names after the last ``...`` (``()`` when there is none)."""
        if Ellipsis not in self.names:
            return ()
        i = len(self.names) - 1 - self.names[::-1].index(Ellipsis)
        return tuple(self.names[i + 1 :])

    @property
    def subset(self) -> bool:
        """Whether other axes may be present (the spec has a ``...``)."""
        return Ellipsis in self.names

    @property
    def dtype(self) -> Any:
        """The dtype (``f32``: ``float32``) or dtype category (``Float``: ``"float"``), or None."""
        return None if self.rule is None else self.rule.dtype

    def accepts_dtype(self, dtype: Any) -> bool:
        """True if ``dtype`` satisfies the spec's dtype rule (always, without one)."""
        return self.rule is None or self.rule.test(np.dtype(dtype))

    def matches(self, actual: tuple[str, ...]) -> bool:
        """True if axis names ``actual`` conform to this spec."""
        fixed = [n for n in self.names if n is not Ellipsis]
        has_ellipsis = len(fixed) != len(self.names)
        if not self.ordered:
            if not set(fixed) <= set(actual):
                return False
            return has_ellipsis or len(actual) == len(fixed)
        return _match_ordered(tuple(self.names), tuple(actual))

    def _key(self) -> tuple:
        rule = self.rule if self.rule is not None and self.rule.dtype is not None else None
        return (self.names, self.ordered, rule)

    def __eq__(self, other):
        return isinstance(other, AxesSpec) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        body = " ".join("..." if n is Ellipsis else n for n in self.names)
        return f"AxesSpec({body!r}, ordered={self.ordered})"


def _match_ordered(pattern: tuple, actual: tuple) -> bool:
    if not pattern:
        return not actual
    head = pattern[0]
    if head is Ellipsis:
        return builtins.any(_match_ordered(pattern[1:], actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and actual[0] == head and _match_ordered(pattern[1:], actual[1:])


def _spec_entry(x):
    if x is Ellipsis or x == "...":
        return Ellipsis
    if isinstance(x, Axis):
        return x.name
    if isinstance(x, str):
        return x
    raise TypeError(f"Axes spec entries must be names, Axis objects or ..., got {x!r}")


def as_axes_spec(spec) -> AxesSpec:
    """The ``AxesSpec`` of a ``NamedArray[...]`` annotation, a string, a sequence or a set."""
    if isinstance(spec, AxesSpec):
        return spec
    if typing.get_origin(spec) is typing.Annotated:
        for meta in spec.__metadata__:
            if isinstance(meta, AxesSpec):
                return meta
        raise TypeError(f"{spec!r} carries no NamedArray axes spec")
    if isinstance(spec, str):
        return AxesSpec(tuple(_spec_entry(t) for t in spec.split()), ordered=True)
    if isinstance(spec, (set, frozenset)):
        return AxesSpec(
            tuple(sorted((_spec_entry(t) for t in spec), key=lambda n: (n is Ellipsis, str(n)))),
            ordered=False,
        )
    if isinstance(spec, Mapping):
        return AxesSpec(tuple(_spec_entry(t) for t in spec), ordered=False)
    if isinstance(spec, Sequence):
        entries: list[Any] = []
        for t in spec:
            if isinstance(t, str) and " " in t.strip():
                entries.extend(_spec_entry(s) for s in t.split())
            else:
                entries.append(_spec_entry(t))
        return AxesSpec(tuple(entries), ordered=True)
    return AxesSpec((_spec_entry(spec),), ordered=True)

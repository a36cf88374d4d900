"""``NamedArray``: a JAX array whose axes are addressed by name.

This module holds the array type itself, name-based broadcasting (the alignment every
elementwise op goes through), and indexing: ``index`` / ``arr[...]``, ``.at[...]``,
``slice``, ``take``, ``updated_slice`` and dynamic slices (``dslice``/``ds``/``dblock``).

The eager hot path is kept thin on purpose: a ``NamedArray`` caches its tuple of axis
names, internal constructors skip validation, and alignment plans for pairs of axis
tuples are computed once and cached.
"""

from __future__ import annotations

import builtins
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxcore.named._axis import (
    Axis,
    AxisSelection,
    AxisSelector,
    AxisSpec,
    check_unique,
    selection_items,
    to_axes,
)

_Tracer = jax.core.Tracer
_SCALAR_TYPES = (int, float, complex, bool, np.number, np.bool_)


def _is_scalar_like(x) -> bool:
    """True for Python/NumPy scalars and 0-d arrays (which broadcast against anything)."""
    if isinstance(x, _SCALAR_TYPES):
        return True
    ndim = getattr(x, "ndim", None)
    return ndim == 0


def _describe(axes: Sequence[Axis]) -> str:
    return "(" + ", ".join(f"{a.name}={a.size}" for a in axes) + ")"


def _axis_not_found(name: str, axes: Sequence[Axis]) -> ValueError:
    return ValueError(f"Axis {name!r} not found in array with axes {_describe(axes)}")


def _check_named(array, fname: str) -> None:
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
                    f"{len(axes)} axes were given: {_describe(axes)}"
                )
            for ax, s in zip(axes, shape):
                if ax.size != s:
                    raise ValueError(
                        f"Axis {ax.name!r} has size {ax.size} but the array's dimension is {s} "
                        f"(array shape {tuple(shape)}, axes {_describe(axes)})"
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

    @property
    def at(self) -> _NamedIndexUpdateHelper:
        """Named analogue of ``jax.Array.at``: ``x.at[{"batch": 0}].set(y)`` and friends.

        The index uses the same forms as ``x[...]`` (a dict or ``"name", idx`` pairs).
        Updates are functional: a new array is returned. Writes through a ``dslice`` that
        reach past the end of an axis are dropped.
        """
        return _NamedIndexUpdateHelper(self)

    def item(self):
        """Returns the value of a one-element array as a Python scalar."""
        return self.array.item()

    def scalar(self) -> jax.Array:
        """Returns the 0-d array of a NamedArray with no axes.

        Raises:
            ValueError: if the array still has axes.
        """
        if self.axes:
            raise ValueError(f"scalar() needs an array with no axes, got axes {_describe(self.axes)}")
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
        return f"NamedArray(axes={_describe(self.axes)}, dtype={getattr(self.array, 'dtype', None)}, array={self.array!r})"

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
                    f"was requested (array axes {_describe(self.axes)})"
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
        return tuple(self.axis_indices(a) for a in (axis.keys() if isinstance(axis, Mapping) else axis))

    def matches_axes(self, spec) -> bool:
        """True if this array conforms to an axes spec (see ``NamedArray[...]``).

        Args:
            spec: A ``NamedArray[...]`` annotation, an ``AxesSpec``, a space-separated
                string (``"batch ... embed"``), a sequence of names (``...`` allowed) or a
                set of names (order-free).
        """
        return _as_axes_spec(spec).matches(self._names)

    def __class_getitem__(cls, item):
        """``NamedArray["batch", "embed"]``: an annotation that records the expected axes.

        Returns ``typing.Annotated[NamedArray, AxesSpec(...)]``; pass it to
        ``matches_axes`` to check an array against it.
        """
        return typing.Annotated[cls, _as_axes_spec(item)]

    # -- indexing ---------------------------------------------------------------------
    def __getitem__(self, idx):
        return index(self, _normalize_index_arg(idx))

    def __setitem__(self, idx, value):
        raise TypeError("NamedArray is immutable; use x = x.at[...].set(value) instead")

    def __iter__(self):
        raise TypeError(
            f"Iterating over a NamedArray with axes {_describe(self.axes)} is ambiguous; "
            "use hax.unbind(x, axis) to split along a named axis"
        )

    # -- methods that forward to the named functions ----------------------------------
    def rename(self, renames: Mapping[AxisSelector, AxisSelector]) -> NamedArray:
        return _shape.rename(self, renames)

    def rearrange(self, *args, **kwargs) -> NamedArray:
        return _shape.rearrange(self, *args, **kwargs)

    def broadcast_to(self, axes: AxisSpec, ensure_order: bool = True, enforce_no_extra_axes: bool = True) -> NamedArray:
        return broadcast_to(self, axes, ensure_order=ensure_order, enforce_no_extra_axes=enforce_no_extra_axes)

    def broadcast_axis(self, axis: AxisSpec) -> NamedArray:
        return broadcast_axis(self, axis)

    def split(self, axis: AxisSelector, new_axes: Sequence[Axis]) -> list[NamedArray]:
        return _shape.split(self, axis, new_axes)

    def flatten_axes(self, old_axes: AxisSelection, new_axis: AxisSelector) -> NamedArray:
        return _shape.flatten_axes(self, old_axes, new_axis)

    def unflatten_axis(self, axis: AxisSelector, new_axes: AxisSpec) -> NamedArray:
        return _shape.unflatten_axis(self, axis, new_axes)

    def ravel(self, new_axis_name: AxisSelector) -> NamedArray:
        return _shape.ravel(self, new_axis_name)

    def flatten(self, new_axis_name: AxisSelector) -> NamedArray:
        return _shape.ravel(self, new_axis_name)

    def unbind(self, axis: AxisSelector) -> list[NamedArray]:
        return _shape.unbind(self, axis)

    def slice(self, *args, **kwargs) -> NamedArray:
        return slice(self, *args, **kwargs)

    def updated_slice(self, start, update) -> NamedArray:
        return updated_slice(self, start, update)

    def take(self, axis: AxisSelector, index) -> NamedArray:
        return take(self, axis, index)

    def dot(self, *args, **kwargs) -> NamedArray:
        from jaxcore.named import _dot

        return _dot.dot(self, *args, **kwargs)

    def all(self, axis=None, *, where=None):
        return _ops.all(self, axis, where=where)

    def any(self, axis=None, *, where=None):
        return _ops.any(self, axis, where=where)

    def max(self, axis=None, *, where=None):
        return _ops.max(self, axis, where=where)

    def min(self, axis=None, *, where=None):
        return _ops.min(self, axis, where=where)

    def sum(self, axis=None, *, dtype=None, where=None):
        return _ops.sum(self, axis, where=where, dtype=dtype)

    def prod(self, axis=None, *, dtype=None, where=None):
        return _ops.prod(self, axis, where=where, dtype=dtype)

    product = prod

    def mean(self, axis=None, *, dtype=None, where=None):
        return _ops.mean(self, axis, where=where, dtype=dtype)

    def std(self, axis=None, *, dtype=None, ddof=0, where=None):
        return _ops.std(self, axis, where=where, ddof=ddof, dtype=dtype)

    def var(self, axis=None, dtype=None, ddof=0, *, where=None):
        return _ops.var(self, axis, where=where, ddof=ddof, dtype=dtype)

    def ptp(self, axis=None, *, where=None):
        return _ops.ptp(self, axis, where=where)

    def argmax(self, axis=None):
        return _ops.argmax(self, axis)

    def argmin(self, axis=None):
        return _ops.argmin(self, axis)

    def argsort(self, axis, *, stable: bool = False):
        return _ops.argsort(self, axis, stable=stable)

    def sort(self, axis):
        return _ops.sort(self, axis)

    def cumsum(self, axis, *, dtype=None):
        return _ops.cumsum(self, axis, dtype=dtype)

    def cumprod(self, axis, *, dtype=None):
        return _ops.cumprod(self, axis, dtype=dtype)

    def clip(self, a_min=None, a_max=None):
        return _ops.clip(self, a_min, a_max)

    def conj(self):
        return _ops.conj(self)

    def conjugate(self):
        return _ops.conjugate(self)

    def copy(self):
        return _ops.copy(self)

    def round(self, decimals=0):
        return _ops.round(self, decimals)

    def trace(self, axis1, axis2, offset=0, dtype=None):
        return _ops.trace(self, axis1, axis2, offset=offset, dtype=dtype)

    # -- operators: names are matched, not positions ----------------------------------
    def __add__(self, other):
        return elementwise_binary(jnp.add, self, other)

    def __radd__(self, other):
        return elementwise_binary(jnp.add, other, self)

    def __sub__(self, other):
        return elementwise_binary(jnp.subtract, self, other)

    def __rsub__(self, other):
        return elementwise_binary(jnp.subtract, other, self)

    def __mul__(self, other):
        return elementwise_binary(jnp.multiply, self, other)

    def __rmul__(self, other):
        return elementwise_binary(jnp.multiply, other, self)

    def __truediv__(self, other):
        return elementwise_binary(jnp.true_divide, self, other)

    def __rtruediv__(self, other):
        return elementwise_binary(jnp.true_divide, other, self)

    def __floordiv__(self, other):
        return elementwise_binary(jnp.floor_divide, self, other)

    def __rfloordiv__(self, other):
        return elementwise_binary(jnp.floor_divide, other, self)

    def __mod__(self, other):
        return elementwise_binary(jnp.mod, self, other)

    def __rmod__(self, other):
        return elementwise_binary(jnp.mod, other, self)

    def __divmod__(self, other):
        return elementwise_binary(jnp.divmod, self, other)

    def __rdivmod__(self, other):
        return elementwise_binary(jnp.divmod, other, self)

    def __pow__(self, other):
        return elementwise_binary(jnp.power, self, other)

    def __rpow__(self, other):
        return elementwise_binary(jnp.power, other, self)

    def __and__(self, other):
        return elementwise_binary(jnp.bitwise_and, self, other)

    def __rand__(self, other):
        return elementwise_binary(jnp.bitwise_and, other, self)

    def __or__(self, other):
        return elementwise_binary(jnp.bitwise_or, self, other)

    def __ror__(self, other):
        return elementwise_binary(jnp.bitwise_or, other, self)

    def __xor__(self, other):
        return elementwise_binary(jnp.bitwise_xor, self, other)

    def __rxor__(self, other):
        return elementwise_binary(jnp.bitwise_xor, other, self)

    def __lshift__(self, other):
        return elementwise_binary(jnp.left_shift, self, other)

    def __rlshift__(self, other):
        return elementwise_binary(jnp.left_shift, other, self)

    def __rshift__(self, other):
        return elementwise_binary(jnp.right_shift, self, other)

    def __rrshift__(self, other):
        return elementwise_binary(jnp.right_shift, other, self)

    def __lt__(self, other):
        return elementwise_binary(jnp.less, self, other)

    def __le__(self, other):
        return elementwise_binary(jnp.less_equal, self, other)

    def __gt__(self, other):
        return elementwise_binary(jnp.greater, self, other)

    def __ge__(self, other):
        return elementwise_binary(jnp.greater_equal, self, other)

    def __eq__(self, other):  # elementwise, like jax.Array
        return elementwise_binary(jnp.equal, self, other)

    def __ne__(self, other):
        return elementwise_binary(jnp.not_equal, self, other)

    __hash__ = None

    def __neg__(self):
        return NamedArray._new(jnp.negative(self.array), self.axes, self._names)

    def __pos__(self):
        return NamedArray._new(jnp.positive(self.array), self.axes, self._names)

    def __abs__(self):
        return NamedArray._new(jnp.abs(self.array), self.axes, self._names)

    def __invert__(self):
        return NamedArray._new(jnp.invert(self.array), self.axes, self._names)


_FORWARDING_METHODS = (
    "rename", "rearrange", "broadcast_to", "broadcast_axis", "split", "flatten_axes", "unflatten_axis",
    "ravel", "flatten", "unbind", "slice", "updated_slice", "take", "dot", "all", "any", "max", "min",
    "sum", "prod", "product", "mean", "std", "var", "ptp", "argmax", "argmin", "argsort", "sort",
    "cumsum", "cumprod", "clip", "conj", "conjugate", "copy", "round", "trace",
)  # fmt: skip
for _m in _FORWARDING_METHODS:
    _target = {"flatten": "ravel", "product": "prod"}.get(_m, _m)
    getattr(NamedArray, _m).__doc__ = (
        f"Method form of ``jaxcore.named.{_target}`` with this array as the first argument."
    )
del _m, _target


jax.tree_util.register_pytree_with_keys(
    NamedArray,
    lambda x: (((jax.tree_util.GetAttrKey("array"), x.array),), x.axes),
    NamedArray.tree_unflatten,
    NamedArray.tree_flatten,
)


NamedOrNumeric = typing.Union[NamedArray, int, float, complex, bool, jax.Array]
"""A ``NamedArray`` or something that broadcasts against anything (a scalar)."""


# ----------------------------------------------------------------------------- specs


class AxesSpec:
    """The expected axes of a ``NamedArray[...]`` annotation.

    Attributes:
        names: Expected names; ``...`` stands for any run of other axes.
        ordered: Whether the names must appear in this order.
    """

    __slots__ = ("names", "ordered")

    def __init__(self, names: tuple, ordered: bool):
        self.names = names
        self.ordered = ordered

    def matches(self, actual: tuple[str, ...]) -> bool:
        """True if axis names ``actual`` conform to this spec."""
        fixed = [n for n in self.names if n is not Ellipsis]
        has_ellipsis = len(fixed) != len(self.names)
        if not self.ordered:
            if not set(fixed) <= set(actual):
                return False
            return has_ellipsis or len(actual) == len(fixed)
        return _match_ordered(tuple(self.names), tuple(actual))

    def __eq__(self, other):
        return isinstance(other, AxesSpec) and (self.names, self.ordered) == (other.names, other.ordered)

    def __hash__(self):
        return hash((self.names, self.ordered))

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


def _as_axes_spec(spec) -> AxesSpec:
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
        return AxesSpec(tuple(sorted((_spec_entry(t) for t in spec), key=lambda n: (n is Ellipsis, str(n)))), ordered=False)
    if isinstance(spec, Mapping):
        return AxesSpec(tuple(_spec_entry(t) for t in spec), ordered=False)
    if isinstance(spec, Sequence):
        entries = []
        for t in spec:
            if isinstance(t, str) and " " in t.strip():
                entries.extend(_spec_entry(s) for s in t.split())
            else:
                entries.append(_spec_entry(t))
        return AxesSpec(tuple(entries), ordered=True)
    return AxesSpec((_spec_entry(spec),), ordered=True)


# ----------------------------------------------------------------------------- constructor


def named(a, axis: AxisSelection) -> NamedArray:
    """Wraps an array with named axes.

    Args:
        a: Anything ``jnp.asarray`` accepts.
        axis: One name/``Axis`` per dimension (a single one for a 1-d array), or a shape
            dict. Names given as strings take their size from ``a``.

    Returns:
        The ``NamedArray``.

    Raises:
        ValueError: if the number of axes or a given size does not match ``a``'s shape.
    """
    a = a if isinstance(a, (jax.Array, _Tracer)) else jnp.asarray(a)
    items = selection_items(axis)
    shape = a.shape
    if len(items) != len(shape):
        raise ValueError(
            f"Array of shape {tuple(shape)} has {len(shape)} dimensions but {len(items)} axes were "
            f"given: {tuple(n for n, _ in items)}"
        )
    axes = []
    for (name, size), s in zip(items, shape):
        if size is not None and size != s:
            raise ValueError(
                f"Axis {name!r} was given size {size} but the array's dimension is {s} "
                f"(array shape {tuple(shape)})"
            )
        axes.append(Axis(name, s))
    axes = tuple(axes)
    return NamedArray._new(a, axes)


# ----------------------------------------------------------------------------- broadcasting


def _merge_axes(axes_list: Sequence[tuple[Axis, ...]]) -> tuple[Axis, ...]:
    """Union of axis tuples in first-appearance order; ``ValueError`` on a size clash."""
    out: list[Axis] = []
    sizes: dict[str, int] = {}
    for axes in axes_list:
        for ax in axes:
            s = sizes.get(ax.name)
            if s is None:
                sizes[ax.name] = ax.size
                out.append(ax)
            elif s != ax.size:
                raise ValueError(
                    f"Axis {ax.name!r} has mismatched sizes {s} and {ax.size} between operands "
                    f"(axes {[_describe(a) for a in axes_list]})"
                )
    return tuple(out)


class _AlignPlan:
    """How to lay out one operand for positional broadcasting against ``out_axes``."""

    __slots__ = ("perm", "shape")

    def __init__(self, perm, shape):
        self.perm = perm  # transpose permutation, or None
        self.shape = shape  # reshape target (with 1s for missing axes), or None

    def apply(self, x):
        if self.perm is not None:
            x = jnp.transpose(x, self.perm)
        if self.shape is not None:
            x = jnp.reshape(x, self.shape)
        return x


def _align_to(axes: tuple[Axis, ...], out_axes: tuple[Axis, ...]) -> _AlignPlan:
    """Plan that makes an operand with ``axes`` broadcast positionally against ``out_axes``."""
    names = [a.name for a in axes]
    out_names = [a.name for a in out_axes]
    order = sorted(range(len(names)), key=lambda i: out_names.index(names[i]))
    perm = tuple(order) if order != list(range(len(names))) else None
    present = set(names)
    # Drop leading missing axes (numpy broadcasting adds them), keep interior/trailing 1s.
    first = next((k for k, n in enumerate(out_names) if n in present), len(out_names))
    shape = tuple(a.size if a.name in present else 1 for a in out_axes[first:])
    if len(shape) == len(names):
        shape = None
    return _AlignPlan(perm, shape)


_PLAN_CACHE_LIMIT = 4096  # plans are tiny; the bound only guards pathological shape churn


def _cache_put(cache: dict, key, value):
    """Stores ``value`` in a plan/kernel cache (emptied when full) and returns it."""
    if len(cache) >= _PLAN_CACHE_LIMIT:
        cache.clear()
    cache[key] = value
    return value


_BINARY_PLANS: dict = {}


def _binary_plan(a1: tuple[Axis, ...], a2: tuple[Axis, ...]):
    key = (a1, a2)
    plan = _BINARY_PLANS.get(key)
    if plan is None:
        out = _merge_axes((a1, a2))
        plan = _cache_put(
            _BINARY_PLANS, key, (out, tuple(a.name for a in out), _align_to(a1, out), _align_to(a2, out), {})
        )
    return plan


EAGER_KERNEL_FNS: set = set()
"""Positional functions whose aligned eager calls may be cached as one jitted kernel.

Only long-lived functions belong here (the op table registers its entries): the cache
is keyed on the function object, so a fresh lambda per call would never hit.
"""


def _aligned_call(fn, plan, x1, x2):
    """``fn`` on two operands laid out by ``plan``.

    Eagerly, the transpose/reshape/op sequence of a registered ``fn`` runs as one cached
    jitted executable (one dispatch instead of three); while tracing it is emitted inline
    so the jaxpr holds exactly the positional ops.
    """
    _, _, p1, p2, kernels = plan
    if fn in EAGER_KERNEL_FNS and not isinstance(x1, _Tracer) and not isinstance(x2, _Tracer):
        kernel = kernels.get(fn)
        if kernel is None:
            kernel = kernels[fn] = jax.jit(lambda a, b: fn(p1.apply(a), p2.apply(b)))
        return kernel(x1, x2)
    return fn(p1.apply(x1), p2.apply(x2))


def _wrap_result(result, axes, names):
    if isinstance(result, tuple):
        return tuple(NamedArray._new(r, axes, names) for r in result)
    return NamedArray._new(result, axes, names)


def _check_scalar_operand(x, other: NamedArray):
    if not _is_scalar_like(x):
        shape = getattr(x, "shape", None)
        raise ValueError(
            f"Cannot combine a NamedArray with axes {_describe(other.axes)} and a positional "
            f"array of shape {shape}: wrap it with hax.named(x, axes) so its axes can be matched by name"
            if shape is not None
            else f"Cannot combine a NamedArray with {x!r} ({type(x).__name__})"
        )


def elementwise_binary(fn, x1, x2):
    """Applies positional ``fn(x1, x2)`` after matching the operands' axes by name.

    The result's axes are ``x1``'s followed by ``x2``'s axes that ``x1`` lacks. Scalars
    (Python numbers, 0-d arrays) broadcast against anything.

    Raises:
        ValueError: if same-named axes differ in size, or if a non-scalar positional
            array is mixed with a ``NamedArray``.
    """
    if type(x1) is NamedArray:
        if type(x2) is NamedArray:
            a1, a2 = x1.axes, x2.axes
            if a1 is a2 or a1 == a2:
                return _wrap_result(fn(x1.array, x2.array), a1, x1._names)
            plan = _binary_plan(a1, a2)
            return _wrap_result(_aligned_call(fn, plan, x1.array, x2.array), plan[0], plan[1])
        _check_scalar_operand(x2, x1)
        return _wrap_result(fn(x1.array, x2), x1.axes, x1._names)
    if type(x2) is NamedArray:
        _check_scalar_operand(x1, x2)
        return _wrap_result(fn(x1, x2.array), x2.axes, x2._names)
    if isinstance(x1, NamedArray) or isinstance(x2, NamedArray):  # subclasses: slow path
        return elementwise_nary(fn, x1, x2)
    return fn(x1, x2)


_NARY_KERNELS: dict = {}


def elementwise_nary(fn, *args, **kwargs):
    """Applies positional ``fn(*args, **kwargs)`` after aligning every NamedArray by name.

    Result axes are the union of the operands' axes in first-appearance order.
    Non-named operands must be scalars (or ``None``, passed through). Eagerly, a
    registered ``fn`` (see ``EAGER_KERNEL_FNS``) runs as one cached jitted kernel.
    """
    named_args = [a for a in args if isinstance(a, NamedArray)]
    if not named_args:
        return fn(*args, **kwargs)
    out = _merge_axes([a.axes for a in named_args])
    for a in args:
        if not isinstance(a, NamedArray) and a is not None:
            _check_scalar_operand(a, named_args[0])
    layout = tuple(a.axes if isinstance(a, NamedArray) else (None if a is None else "scalar") for a in args)
    operands = [a.array if isinstance(a, NamedArray) else a for a in args if a is not None]
    if not kwargs and fn in EAGER_KERNEL_FNS and not builtins.any(isinstance(x, _Tracer) for x in operands):
        key = (fn, layout)
        kernel = _NARY_KERNELS.get(key)
        if kernel is None:
            kernel = _cache_put(_NARY_KERNELS, key, jax.jit(_nary_kernel(fn, layout, out, {})))
        return _wrap_result(kernel(*operands), out, None)
    return _wrap_result(_nary_kernel(fn, layout, out, kwargs)(*operands), out, None)


def _nary_kernel(fn, layout, out, kwargs):
    """Positional ``fn`` over operands laid out for ``out``.

    ``layout`` has one entry per argument: a NamedArray's axes, ``"scalar"``, or ``None``
    for an argument that is ``None`` (passed to ``fn`` as is and not to the kernel). The
    result is broadcast to the full shape of ``out``.
    """
    plans = [_align_to(ax, out) if isinstance(ax, tuple) else ax for ax in layout]
    shape = tuple(ax.size for ax in out)

    def kernel(*xs):
        it = iter(xs)
        operands = [
            None if p is None else (next(it) if p == "scalar" else p.apply(next(it))) for p in plans
        ]
        return jax.tree.map(lambda r: jnp.broadcast_to(r, shape), fn(*operands, **kwargs))

    return kernel


def broadcast_arrays(*arrays) -> tuple:
    """Broadcasts NamedArrays to the union of their axes (first-appearance order).

    Scalars and ``None`` pass through unchanged.

    Raises:
        ValueError: if same-named axes differ in size.
    """
    named_args = [a for a in arrays if isinstance(a, NamedArray)]
    if not named_args:
        return tuple(arrays)
    out = _merge_axes([a.axes for a in named_args])
    return tuple(
        broadcast_to(a, out) if isinstance(a, NamedArray) else a for a in arrays
    )


def _resolve_target_axes(axes, a) -> tuple[Axis, ...]:
    """Target axes for broadcasting; names without sizes are looked up in ``a``."""
    if isinstance(axes, (Axis, str)):
        axes = (axes,)
    if isinstance(axes, Mapping):
        return to_axes(axes)
    out = []
    for ax in axes:
        if isinstance(ax, str):
            if not isinstance(a, NamedArray) or ax not in a._names:
                raise ValueError(
                    f"Axis {ax!r} is given by name only and the array has no such axis to take its size from"
                )
            out.append(a.axes[a._names.index(ax)])
        elif isinstance(ax, Axis):
            out.append(ax)
        else:
            raise TypeError(f"Expected an Axis or an axis name (str), got {ax!r}")
    out = tuple(out)
    check_unique(out)
    return out


def broadcast_to(
    a, axes: AxisSpec, ensure_order: bool = True, enforce_no_extra_axes: bool = True
) -> NamedArray:
    """Broadcasts ``a`` so that it has the given axes.

    Args:
        a: A NamedArray or a scalar.
        axes: The target axes.
        ensure_order: Lay the result out as ``axes`` followed by any extra axes of ``a``.
            Otherwise the new axes go in front and ``a``'s axes keep their order.
        enforce_no_extra_axes: Raise if ``a`` has axes that are not in ``axes``.

    Raises:
        ValueError: on a size mismatch between same-named axes, or on extra axes when
            ``enforce_no_extra_axes`` is true.
    """
    target = _resolve_target_axes(axes, a)
    if not isinstance(a, NamedArray):
        if not _is_scalar_like(a):
            raise ValueError(
                f"broadcast_to needs a NamedArray or a scalar, got a positional array of shape {getattr(a, 'shape', None)}"
            )
        return NamedArray._new(jnp.broadcast_to(jnp.asarray(a), tuple(x.size for x in target)), target)
    target_sizes = {ax.name: ax.size for ax in target}
    for ax in a.axes:
        s = target_sizes.get(ax.name)
        if s is not None and s != ax.size:
            raise ValueError(
                f"Cannot broadcast axis {ax.name!r} of size {ax.size} to size {s} "
                f"(array axes {_describe(a.axes)}, target {_describe(target)})"
            )
    extra = tuple(ax for ax in a.axes if ax.name not in target_sizes)
    if extra and enforce_no_extra_axes:
        raise ValueError(
            f"Array has axes {[ax.name for ax in extra]} that are not in the target axes {_describe(target)}"
        )
    if ensure_order:
        out = target + extra
    else:
        own = set(a._names)
        out = tuple(ax for ax in target if ax.name not in own) + a.axes
    if out == a.axes:
        return a
    x = _align_to(a.axes, out).apply(a.array)
    return NamedArray._new(jnp.broadcast_to(x, tuple(ax.size for ax in out)), out)


def broadcast_axis(a, axis: AxisSpec) -> NamedArray:
    """Ensures ``a`` has every axis in ``axis`` (new axes go first; extra axes are kept)."""
    return broadcast_to(a, axis, ensure_order=True, enforce_no_extra_axes=False)


# ----------------------------------------------------------------------------- dslice


class dslice:  # noqa: N801 - the name mirrors jax.experimental.pallas.dslice
    """A dynamic slice: ``size`` elements starting at a (possibly traced) ``start``.

    Python slices need static bounds under ``jax.jit``; ``dslice`` separates the dynamic
    start from the static size. Reads past the end of the axis (or before its start, for a
    negative ``start``) are filled with 0 and such writes are dropped (JAX's gather/scatter
    ``fill``/``drop`` modes); negative positions are not wrapped around.

    Args:
        start: First index (an int or an integer scalar array/tracer).
        length: The static number of elements, or an ``Axis``: its size is the length
            and it becomes the result axis (a new name for the sliced axis).
    """

    __slots__ = ("start", "size", "axis")

    def __init__(self, start, length: int | Axis):
        self.start = start
        if isinstance(length, Axis):
            self.size = length.size
            self.axis = length
        else:
            if isinstance(length, bool) or not hasattr(length, "__index__"):
                raise TypeError(f"dslice length must be a static int or an Axis, got {length!r}")
            self.size = int(length.__index__())
            self.axis = None
        if self.size < 0:
            raise ValueError(f"dslice length must be non-negative, got {self.size}")

    def to_slice(self) -> builtins.slice:
        """The equivalent Python slice (needs a static ``start``)."""
        if isinstance(self.start, _Tracer):
            raise TypeError("dslice.to_slice() needs a static start, got a traced value")
        start = int(self.start)
        return builtins.slice(start, start + self.size)

    @staticmethod
    def block(idx, size: int) -> dslice:
        """The ``idx``-th block of ``size`` elements: ``dslice(idx * size, size)``."""
        return dslice(idx * size, size)

    def __repr__(self):
        return f"dslice({self.start!r}, {self.axis if self.axis is not None else self.size!r})"


jax.tree_util.register_pytree_node(
    dslice,
    lambda d: ((d.start,), d.axis if d.axis is not None else d.size),
    lambda aux, ch: dslice(ch[0], aux),
)

ds = dslice


def dblock(idx, size: int) -> dslice:
    """Selects block ``idx`` of ``size`` elements: ``dslice(idx * size, size)``."""
    return dslice.block(idx, size)


# ----------------------------------------------------------------------------- indexing


def _normalize_index_arg(idx) -> Mapping:
    if isinstance(idx, Mapping):
        return idx
    if isinstance(idx, tuple):
        if len(idx) % 2 != 0:
            raise TypeError(
                f"Named indexing takes alternating axis/index pairs like x['batch', 0, 'embed', 1:3]; got {idx!r}"
            )
        out = {}
        for k in range(0, len(idx), 2):
            key, val = idx[k], idx[k + 1]
            if not isinstance(key, (str, Axis)):
                raise TypeError(f"Expected an axis name or Axis at position {k} of the index, got {key!r}")
            name = key if isinstance(key, str) else key.name
            if name in out:
                raise ValueError(f"Axis {name!r} is indexed twice in {idx!r}")
            out[key] = val
        return out
    raise TypeError(
        f"NamedArray indices are dicts ({{'batch': 0}}) or axis/index pairs (x['batch', 0]), got {idx!r}"
    )


class _IndexPlan:
    """A named index compiled to one positional indexing expression."""

    __slots__ = ("perm", "pos", "axes", "final_perm", "final_axes", "dynamic")

    def __init__(self, perm, pos, axes, final_perm, final_axes, dynamic):
        self.perm = perm  # transpose applied before indexing, or None
        self.pos = pos  # positional index tuple
        self.axes = axes  # axes of array.transpose(perm)[pos]
        self.final_perm = final_perm  # transpose to user-facing order, or None
        self.final_axes = final_axes
        self.dynamic = dynamic  # a dslice is involved: fill reads / drop writes


def _is_int_array(x) -> bool:
    dt = getattr(x, "dtype", None)
    return dt is not None and (jnp.issubdtype(dt, jnp.integer))


def _plan_index(array: NamedArray, slices: Mapping) -> _IndexPlan:
    axes = array.axes
    n = len(axes)
    kinds: list = [None] * n  # None | "int" | "slice" | "adv"
    basic: list = [builtins.slice(None)] * n
    new_sizes = [ax.size for ax in axes]
    adv: dict[int, NamedArray] = {}
    dynamic = False
    for key, idx in slices.items():
        pos = array._index_of(key)
        name = axes[pos].name
        if kinds[pos] is not None:
            raise ValueError(f"Axis {name!r} is indexed twice")
        size = axes[pos].size
        if isinstance(idx, NamedArray):
            if not _is_int_array(idx.array):
                raise TypeError(
                    f"Index for axis {name!r} must be an integer NamedArray, got dtype {idx.dtype}"
                )
            kinds[pos] = "adv"
            adv[pos] = idx
        elif isinstance(idx, dslice):
            out_axis = idx.axis if idx.axis is not None else Axis(name, idx.size)
            kinds[pos] = "adv"
            ix = idx.start + jnp.arange(idx.size)
            st = idx.start
            if not (isinstance(st, (int, np.integer)) and not isinstance(st, bool) and st >= 0):
                # Positions before the start of the axis are out of bounds like those past
                # the end (filled on read, dropped on write), not wrapped to the end.
                ix = jnp.where(ix < 0, size, ix)
            adv[pos] = NamedArray._new(ix, (out_axis,))
            dynamic = True
        elif isinstance(idx, builtins.slice):
            for b in (idx.start, idx.stop, idx.step):
                if b is not None and not isinstance(b, (int, np.integer)):
                    raise TypeError(
                        f"Slice bounds for axis {name!r} must be static ints, got {idx!r}; "
                        "use hax.ds(start, size) for a dynamic start"
                    )
            kinds[pos] = "slice"
            basic[pos] = idx
            new_sizes[pos] = len(range(*idx.indices(size)))
        elif isinstance(idx, (int, np.integer)) and not isinstance(idx, bool):
            if not -size <= idx < size:
                raise IndexError(f"Index {idx} is out of bounds for axis {name!r} of size {size}")
            kinds[pos] = "int"
            basic[pos] = int(idx) % size if size else int(idx)
        elif getattr(idx, "ndim", None) == 0 and _is_int_array(idx):
            kinds[pos] = "int"
            basic[pos] = idx
        elif getattr(idx, "ndim", None) is not None and getattr(idx, "ndim") > 0:
            raise TypeError(
                f"Index for axis {name!r} is a positional array of shape {idx.shape}; wrap it "
                "with hax.named(idx, axes) so its axes have names"
            )
        else:
            raise TypeError(
                f"Unsupported index for axis {name!r}: {idx!r} ({type(idx).__name__}); use an int, "
                "a slice, hax.ds(start, size) or an integer NamedArray"
            )

    if not adv:
        out_axes = tuple(
            ax if kinds[i] is None else Axis(ax.name, new_sizes[i])
            for i, ax in enumerate(axes)
            if kinds[i] != "int"
        )
        return _IndexPlan(None, tuple(basic), out_axes, None, out_axes, False)

    # Axes the index arrays share with un-indexed array axes are matched elementwise
    # (a batched gather): index them with an iota along that axis.
    idx_names = {ax.name: ax for ix in adv.values() for ax in ix.axes}
    for i, ax in enumerate(axes):
        if ax.name in idx_names:
            if kinds[i] is None:
                if idx_names[ax.name].size != ax.size:
                    raise ValueError(
                        f"Index arrays have axis {ax.name!r} of size {idx_names[ax.name].size} but the "
                        f"array's axis {ax.name!r} has size {ax.size}"
                    )
                kinds[i] = "adv"
                adv[i] = NamedArray._new(jnp.arange(ax.size), (ax,))
            elif kinds[i] == "slice":
                raise ValueError(
                    f"Axis {ax.name!r} is sliced and also appears in an index array; rename one of them"
                )
    adv_pos = sorted(adv)
    u_axes = _merge_axes([adv[p].axes for p in adv_pos])
    int_pos = [i for i in range(n) if kinds[i] == "int"]
    rest_pos = [i for i in range(n) if kinds[i] in (None, "slice")]
    perm = tuple(int_pos + adv_pos + rest_pos)
    index_arrays = tuple(broadcast_to(adv[p], u_axes).array for p in adv_pos)
    pos = tuple(basic[i] for i in int_pos) + index_arrays + tuple(basic[i] for i in rest_pos)
    rest_axes = tuple(
        axes[i] if kinds[i] is None else Axis(axes[i].name, new_sizes[i]) for i in rest_pos
    )
    canon = u_axes + rest_axes
    # User-facing order: the gathered axes sit where the first indexed axis was.
    first = adv_pos[0] if not int_pos else min(adv_pos[0], int_pos[0])
    before = [k for k, i in enumerate(rest_pos) if i < first]
    after = [k for k, i in enumerate(rest_pos) if i > first]
    nu = len(u_axes)
    final = [nu + k for k in before] + list(range(nu)) + [nu + k for k in after]
    final_perm = tuple(final) if final != list(range(len(canon))) else None
    final_axes = tuple(canon[k] for k in final)
    return _IndexPlan(
        perm if perm != tuple(range(n)) else None, pos, canon, final_perm, final_axes, dynamic
    )


_STATIC_INDEXERS: dict = {}


def _static_key(pos: tuple):
    """A hashable key for an index made only of Python ints and slices, else ``None``."""
    key = []
    for p in pos:
        if type(p) is int:
            key.append(p)
        elif type(p) is builtins.slice:
            key.append((p.start, p.stop, p.step))
        else:
            return None
    return tuple(key)


def _static_indexer(method: str, pos: tuple):
    """A cached jitted ``x[pos]`` (``method="get"``) or ``x.at[pos].<method>(v)``, else ``None``.

    Only for an index of Python ints and slices. Eager ``jax.Array`` indexing re-derives
    its gather/scatter every call; compiling the (static) index once makes repeated eager
    reads and writes a single dispatch.
    """
    key = _static_key(pos)
    if key is None:
        return None
    key = (method, key)
    fn = _STATIC_INDEXERS.get(key)
    if fn is None:
        if method == "get":
            fn = jax.jit(lambda x: x[pos])
        else:
            fn = jax.jit(lambda x, v: getattr(x.at[pos], method)(v))
        _cache_put(_STATIC_INDEXERS, key, fn)
    return fn


def _gather(array: NamedArray, plan: _IndexPlan, **kwargs):
    """Reads ``array`` through ``plan``; ``kwargs`` (``mode``, ...) go to ``jax.Array.at``.

    Without ``kwargs``, reads through a ``dslice`` past the end of an axis give 0.
    """
    x = array.array
    if plan.perm is not None:
        x = jnp.transpose(x, plan.perm)
    if kwargs:
        x = x.at[plan.pos].get(**kwargs)
    elif plan.dynamic:
        x = x.at[plan.pos].get(mode="fill", fill_value=0)
    else:
        x = x[plan.pos]
    if plan.final_perm is not None:
        x = jnp.transpose(x, plan.final_perm)
    return NamedArray._new(x, plan.final_axes) if plan.final_axes else x


def index(array: NamedArray, slices: Mapping[AxisSelector, Any]):
    """Selects from ``array`` by axis name; usually written ``array[...]``.

    Each entry maps an axis to an int (removes the axis), a slice with static bounds, a
    ``dslice`` (a dynamic-start window; reads past the end give 0), or an integer
    ``NamedArray`` (a gather: the axis is replaced by the index's axes; axes the index
    shares with the array are matched elementwise).

    Returns:
        A NamedArray, or a 0-d ``jax.Array`` when every axis is indexed away.

    Raises:
        ValueError: if an axis is missing or indexed twice, or sizes clash.
        IndexError: for a static int out of range.
        TypeError: for an unsupported index kind.
    """
    _check_named(array, "index()")
    plan = _plan_index(array, slices)
    x = array.array
    if plan.perm is None and plan.final_perm is None and not isinstance(x, _Tracer):
        getter = _static_indexer("get", plan.pos)
        if getter is not None:  # eager, static ints/slices: one compiled dispatch
            x = getter(x)
            return NamedArray._new(x, plan.final_axes) if plan.final_axes else x
    return _gather(array, plan)


_index_fn = index


class _NamedIndexUpdateHelper:
    __slots__ = ("_array",)

    def __init__(self, array: NamedArray):
        self._array = array

    def __getitem__(self, idx) -> _NamedIndexUpdateRef:
        return _NamedIndexUpdateRef(self._array, _normalize_index_arg(idx))


class _NamedIndexUpdateRef:
    """``x.at[idx]``: functional updates of the selected region."""

    __slots__ = ("_array", "_slices")

    def __init__(self, array: NamedArray, slices: Mapping):
        self._array = array
        self._slices = slices

    def get(self, **kwargs):
        """Same as ``x[idx]``; ``kwargs`` (``mode``, ``fill_value``) go to ``jax.Array.at``."""
        if not kwargs:
            return index(self._array, self._slices)
        return _gather(self._array, _plan_index(self._array, self._slices), **kwargs)

    def _update(self, method: str, value, **kwargs) -> NamedArray:
        arr = self._array
        plan = _plan_index(arr, self._slices)
        if isinstance(value, NamedArray):
            value = broadcast_to(value, plan.axes, ensure_order=True, enforce_no_extra_axes=True).array
        elif not _is_scalar_like(value):
            raise ValueError(
                f"Update value must be a NamedArray or a scalar, got a positional array of shape "
                f"{getattr(value, 'shape', None)}; the selected region has axes {_describe(plan.axes)}"
            )
        x = arr.array
        if plan.perm is None and not kwargs and not isinstance(x, _Tracer) and not isinstance(value, _Tracer):
            updater = _static_indexer(method, plan.pos)
            if updater is not None:  # eager, static ints/slices: one compiled dispatch
                return NamedArray._new(updater(x, value), arr.axes, arr._names)
        return self._scatter(plan, method, value, kwargs)

    def _scatter(self, plan: _IndexPlan, method: str, operand, kwargs: dict) -> NamedArray:
        """``x.at[region].<method>(operand, **kwargs)`` in the array's own axis order."""
        arr = self._array
        x = arr.array
        if plan.perm is not None:
            x = jnp.transpose(x, plan.perm)
        if plan.dynamic and "mode" not in kwargs:
            kwargs["mode"] = "drop"
        x = getattr(x.at[plan.pos], method)(operand, **kwargs)
        if plan.perm is not None:
            x = jnp.transpose(x, np.argsort(plan.perm))
        return NamedArray._new(x, arr.axes, arr._names)

    def set(self, value, **kwargs) -> NamedArray:
        """Returns a copy with the region set to ``value`` (matched by axis name)."""
        return self._update("set", value, **kwargs)

    def add(self, value, **kwargs) -> NamedArray:
        """Returns a copy with ``value`` added to the region."""
        return self._update("add", value, **kwargs)

    def multiply(self, value, **kwargs) -> NamedArray:
        """Returns a copy with the region multiplied by ``value``."""
        return self._update("multiply", value, **kwargs)

    mul = multiply

    def divide(self, value, **kwargs) -> NamedArray:
        """Returns a copy with the region divided by ``value``."""
        return self._update("divide", value, **kwargs)

    def power(self, value, **kwargs) -> NamedArray:
        """Returns a copy with the region raised to ``value``."""
        return self._update("power", value, **kwargs)

    def min(self, value, **kwargs) -> NamedArray:
        """Returns a copy with the region replaced by ``minimum(region, value)``."""
        return self._update("min", value, **kwargs)

    def max(self, value, **kwargs) -> NamedArray:
        """Returns a copy with the region replaced by ``maximum(region, value)``."""
        return self._update("max", value, **kwargs)

    def apply(self, func, **kwargs) -> NamedArray:
        """Returns a copy with the unary ``func`` applied to the region."""
        return self._scatter(_plan_index(self._array, self._slices), "apply", func, kwargs)


def _static_int(x):
    """``int(x)`` for static integers, ``None`` for traced values."""
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return int(x)
    if isinstance(x, _Tracer):
        return None
    if getattr(x, "ndim", None) == 0 and _is_int_array(x):
        return int(x)
    return None


def _unwrap_start(name, start):
    if isinstance(start, NamedArray):
        if start.axes:
            raise ValueError(f"Start for axis {name!r} must be a scalar, got axes {_describe(start.axes)}")
        return start.array
    if isinstance(start, bool) or not (isinstance(start, (int, np.integer)) or getattr(start, "ndim", None) == 0):
        raise TypeError(f"Start for axis {name!r} must be an integer scalar, got {start!r}")
    return start


def _window_length(old: Axis, start, s: int | None, length: int | None) -> int:
    """Checks a window of ``old`` from ``start`` (``s`` when static); defaults the length to the rest."""
    if length is None:
        if s is None:
            raise ValueError(f"slice of axis {old.name!r}: a traced start needs an explicit length")
        length = old.size - s
    if length > old.size or (s is not None and (s < 0 or s + length > old.size)):
        raise ValueError(
            f"slice of axis {old.name!r} (size {old.size}) from {start} with length {length} is out of bounds"
        )
    return length


def slice(array: NamedArray, *args, **kwargs) -> NamedArray:  # noqa: A001 - part of the API
    """Slices along one axis or several, replacing them with new (shorter) axes.

    Two forms:

    * ``slice(array, axis, new_axis=None, start=0, length=None)``: ``length`` elements of
      ``axis`` from ``start`` (which may be traced). ``new_axis`` (a name or an ``Axis``)
      names the result axis; ``length`` defaults to ``new_axis.size`` or to the rest of
      the axis.
    * ``slice(array, start={axis: start, ...}, length={axis: int | Axis, ...})``.

    A traced start is clamped so the window stays inside the axis (``lax.dynamic_slice``).

    Raises:
        ValueError: if an axis is missing or a static window runs past the end.
    """
    if (args and isinstance(args[0], Mapping)) or "start" in kwargs and isinstance(kwargs["start"], Mapping):
        return _slice_many(array, *args, **kwargs)
    return _slice_one(array, *args, **kwargs)


def _slice_one(array, axis, new_axis=None, start=0, length=None) -> NamedArray:
    pos = array._index_of(axis)
    old = array.axes[pos]
    if isinstance(new_axis, Axis):
        if length is not None and length != new_axis.size:
            raise ValueError(f"slice: new_axis {new_axis} disagrees with length {length}")
        length = new_axis.size
    start = _unwrap_start(old.name, start)
    s = _static_int(start)
    length = _window_length(old, start, s, length)
    out_axis = new_axis if isinstance(new_axis, Axis) else Axis(new_axis if new_axis is not None else old.name, length)
    if s is not None:
        x = lax.slice_in_dim(array.array, s, s + length, axis=pos)
    else:
        x = lax.dynamic_slice_in_dim(array.array, start, length, axis=pos)
    axes = array.axes[:pos] + (out_axis,) + array.axes[pos + 1 :]
    check_unique(axes)
    return NamedArray._new(x, axes)


def _slice_many(array, start: Mapping, length: Mapping | None = None) -> NamedArray:
    length = dict(length or {})
    length_by_name = {(k if isinstance(k, str) else k.name): v for k, v in length.items()}
    starts = [0] * array.ndim
    sizes = [ax.size for ax in array.axes]
    axes = list(array.axes)
    for key, st in start.items():
        pos = array._index_of(key)
        old = array.axes[pos]
        st = _unwrap_start(old.name, st)
        s = _static_int(st)
        ln = length_by_name.pop(old.name, None)
        new_ax = ln if isinstance(ln, Axis) else None
        ln = _window_length(old, st, s, ln.size if new_ax is not None else ln)
        starts[pos] = st
        sizes[pos] = ln
        axes[pos] = new_ax if new_ax is not None else Axis(old.name, ln)
    if length_by_name:
        raise ValueError(f"slice: lengths given for axes {sorted(length_by_name)} that have no start")
    axes = tuple(axes)
    check_unique(axes)
    x = lax.dynamic_slice(array.array, [jnp.asarray(s) if isinstance(s, _Tracer) else s for s in starts], sizes)
    return NamedArray._new(x, axes)


def take(array: NamedArray, axis: AxisSelector, index: int | NamedArray) -> NamedArray:  # noqa: F811
    """Selects along ``axis`` by an int (removes it) or an integer NamedArray (gathers).

    With a NamedArray index the axis is replaced by the index's axes; index axes that the
    array also has are matched elementwise. Unlike ``index``, the result is always a
    NamedArray (with no axes when the last axis is taken).
    """
    out = _index_fn(array, {axis: index})
    return out if isinstance(out, NamedArray) else NamedArray._new(out, ())


def updated_slice(array: NamedArray, start: Mapping[AxisSelector, Any], update: NamedArray) -> NamedArray:
    """Writes ``update`` into ``array`` at the given per-axis start offsets.

    Axes of ``array`` not in ``start`` start at 0. ``update``'s axes are matched by name;
    array axes the update lacks are broadcast (size 1 along axes in ``start``, full size
    otherwise). Traced starts are clamped so the window fits (``lax.dynamic_update_slice``).

    Raises:
        ValueError: if ``update`` has an axis the array lacks, an update axis is longer
            than the array's, or a static window runs past the end.
    """
    starts = [0] * array.ndim
    started = set()
    for key, st in start.items():
        pos = array._index_of(key)
        started.add(array.axes[pos].name)
        starts[pos] = _unwrap_start(array.axes[pos].name, st)
    if not isinstance(update, NamedArray):
        if not _is_scalar_like(update):
            raise ValueError(
                f"updated_slice needs a NamedArray update (or a scalar), got shape {getattr(update, 'shape', None)}"
            )
        update = NamedArray._new(jnp.asarray(update, dtype=array.dtype), ())
    for ax in update.axes:
        if ax.name not in array._names:
            raise ValueError(
                f"Update has axis {ax.name!r} which the array (axes {_describe(array.axes)}) does not have"
            )
    up_sizes = {ax.name: ax.size for ax in update.axes}
    target = []
    for i, ax in enumerate(array.axes):
        size = up_sizes.get(ax.name, 1 if ax.name in started else ax.size)
        if size > ax.size:
            raise ValueError(f"Update axis {ax.name!r} has size {size} > array size {ax.size}")
        s = _static_int(starts[i])
        if s is not None and (s < 0 or s + size > ax.size):
            raise ValueError(
                f"updated_slice: window [{s}, {s + size}) is out of bounds for axis {ax.name!r} of size {ax.size}"
            )
        target.append(Axis(ax.name, size))
    upd = broadcast_to(update, tuple(target)).array.astype(array.dtype)
    x = lax.dynamic_update_slice(array.array, upd, [jnp.asarray(s) for s in starts])
    return NamedArray._new(x, array.axes, array._names)


# Late imports: these modules build on NamedArray and the methods above forward to them.
from jaxcore.named import _ops, _shape  # noqa: E402

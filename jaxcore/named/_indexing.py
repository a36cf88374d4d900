"""Indexing ``NamedArray`` by axis name: ``index`` / ``x[...]``, ``x.at[...]``, ``take`` and
dynamic slices (``dslice`` / ``ds`` / ``dblock``); ``slice``/``updated_slice`` are in
`_slicing`.

A named index is compiled once per (axes, index structure) into one positional indexing
expression (`_IndexPlan`), so eager indexing costs about what positional indexing does.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxcore.named._array import (
    NamedArray,
    Tracer,
    check_named,
    describe_axes,
    is_scalar_like,
)
from jaxcore.named._axis import (
    Axis,
    AxisSelector,
)
from jaxcore.named._broadcast import broadcast_all, broadcast_to, cache_put

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
        self.axis: Axis | None
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
        if isinstance(self.start, Tracer):
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


def normalize_index_arg(idx) -> Mapping:
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
                raise TypeError(
                    f"Expected an axis name or Axis at position {k} of the index, got {key!r}"
                )
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


def is_int_array(x) -> bool:
    """True for an integer-typed array (a positional index array)."""
    dt = getattr(x, "dtype", None)
    return dt is not None and (jnp.issubdtype(dt, jnp.integer))


def _unnamed_index_axis(axes, kinds, pos: int, key, idx) -> Axis:
    """The axis a 1-d positional index array for ``axes[pos]`` is given, as Haliax names it.

    It takes the name of the first other axis that is still kept whole or sliced (not yet
    indexed by an int or an array, in the order the index lists them) and has the index's
    length, so the two are matched elementwise; failing that, the name the index was keyed
    by, with the index's length.
    """
    n = idx.shape[0]
    for i, ax in enumerate(axes):
        if i != pos and kinds[i] in (None, "slice") and ax.size == n:
            return Axis(ax.name, n)
    return Axis(key if isinstance(key, str) else key.name, n)


def _plan_index(array: NamedArray, slices: Mapping) -> _IndexPlan:
    axes = array.axes
    n = len(axes)
    kinds: list = [None] * n  # None | "int" | "slice" | "adv"
    basic: list = [builtins.slice(None)] * n
    new_sizes = [ax.size for ax in axes]
    adv: dict[int, NamedArray] = {}
    adv_order: list[int] = []  # positions of the index arrays, in the order they were given
    dynamic = False
    for key, idx in slices.items():
        pos = array._index_of(key)
        name = axes[pos].name
        if kinds[pos] is not None:
            raise ValueError(f"Axis {name!r} is indexed twice")
        size = axes[pos].size
        if isinstance(idx, NamedArray):
            if not is_int_array(idx.array):
                raise TypeError(
                    f"Index for axis {name!r} must be an integer NamedArray, got dtype {idx.dtype}"
                )
            kinds[pos] = "adv"
            adv[pos] = idx
            adv_order.append(pos)
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
            adv_order.append(pos)
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
        elif getattr(idx, "ndim", None) == 0 and is_int_array(idx):
            kinds[pos] = "int"
            basic[pos] = idx
        elif isinstance(idx, list):
            # A list of ints picks those positions; the axis keeps its name and place.
            ix = jnp.asarray(idx, dtype=jnp.int32) if idx else jnp.zeros((0,), jnp.int32)
            if ix.ndim != 1 or not is_int_array(ix):
                raise TypeError(
                    f"A list index for axis {name!r} must be a flat list of ints, got {idx!r}"
                )
            kinds[pos] = "adv"
            adv[pos] = NamedArray._new(ix, (Axis(name, ix.shape[0]),))
            adv_order.append(pos)
        elif getattr(idx, "ndim", None) is not None and getattr(idx, "shape", None) is not None:
            # An un-named positional index array (Haliax's rule): 1-d only, see
            # _unnamed_index_axis for the name its axis gets.
            if not is_int_array(idx):
                raise TypeError(
                    f"Index array for axis {name!r} must have an integer dtype, got {idx.dtype}"
                )
            if idx.ndim != 1:
                raise ValueError(
                    f"Only 0-d or 1-d un-named arrays can index an axis; axis {name!r} got one of shape "
                    f"{tuple(idx.shape)} (wrap it with hax.named(idx, axes) to give its axes names)"
                )
            kinds[pos] = "adv"
            adv[pos] = NamedArray._new(
                idx if isinstance(idx, (jax.Array, Tracer)) else jnp.asarray(idx),
                (_unnamed_index_axis(axes, kinds, pos, key, idx),),
            )
            adv_order.append(pos)
        else:
            raise TypeError(
                f"Unsupported index for axis {name!r}: {idx!r} ({type(idx).__name__}); use an int, "
                "a slice, hax.ds(start, size), an integer NamedArray or a 1-d integer array"
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
    idx_names = {ax.name: ax for p in adv_order for ax in adv[p].axes}
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
                adv_order.append(i)
            elif kinds[i] == "slice":
                raise ValueError(
                    f"Axis {ax.name!r} is sliced and also appears in an index array; rename one of them"
                )
    # The index arrays broadcast together as Haliax's broadcast_arrays(require_subset=False)
    # does; their axes then replace the indexed axes.
    u_axes = broadcast_all([adv[p].axes for p in adv_order], require_subset=False)
    adv_pos = sorted(adv)
    int_pos = [i for i in range(n) if kinds[i] == "int"]
    rest_pos = [i for i in range(n) if kinds[i] in (None, "slice")]
    perm = tuple(int_pos + adv_pos + rest_pos)
    index_arrays = tuple(broadcast_to(adv[p], u_axes).array for p in adv_pos)
    index = tuple(basic[i] for i in int_pos) + index_arrays + tuple(basic[i] for i in rest_pos)
    rest_axes = tuple(
        axes[i] if kinds[i] is None else Axis(axes[i].name, new_sizes[i]) for i in rest_pos
    )
    canon = u_axes + rest_axes
    # User-facing order (NumPy's rule, which Haliax follows; ints count as array indices):
    # when the indexed axes are contiguous the gathered axes take their place, otherwise
    # they go first.
    indexed = [i for i in range(n) if kinds[i] in ("int", "adv")]
    nu = len(u_axes)
    if indexed[-1] - indexed[0] + 1 == len(indexed):
        first = indexed[0]
        before = [k for k, i in enumerate(rest_pos) if i < first]
        after = [k for k, i in enumerate(rest_pos) if i > first]
        final = [nu + k for k in before] + list(range(nu)) + [nu + k for k in after]
    else:
        final = list(range(len(canon)))
    final_perm = tuple(final) if final != list(range(len(canon))) else None
    final_axes = tuple(canon[k] for k in final)
    return _IndexPlan(
        perm if perm != tuple(range(n)) else None, index, canon, final_perm, final_axes, dynamic
    )


_STATIC_INDEXERS: dict = {}


def _static_key(pos: tuple):
    """A hashable key for an index made only of Python ints and slices, else ``None``."""
    key: list[Any] = []
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
        cache_put(_STATIC_INDEXERS, key, fn)
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
    return NamedArray._new(x, plan.final_axes)


def index(array: NamedArray, slices: Mapping[AxisSelector, Any]):
    """Selects from ``array`` by axis name; usually written ``array[...]``.

    Each entry maps an axis to an int (removes the axis), a slice with static bounds, a
    ``dslice`` (a dynamic-start window; reads past the end give 0), an integer
    ``NamedArray`` (a gather: the axis is replaced by the index's axes; axes the index
    shares with the array are matched elementwise), a list of ints, or an un-named 1-d
    integer array. As in Haliax, the axis of an un-named array is named after the first
    other whole or sliced axis of the same length (the two are then matched elementwise),
    else after the indexed axis. Gathered axes take the place of the indexed axes when
    those are contiguous (ints count as indexed), else they go first (NumPy's rule).

    Returns:
        A NamedArray; when every axis is indexed away it has no axes (``x.scalar()``
        gives the 0-d array, ``x.item()`` the Python value).

    Raises:
        ValueError: if an axis is missing or indexed twice, or sizes clash.
        IndexError: for a static int out of range.
        TypeError: for an unsupported index kind.
    """
    check_named(array, "index()")
    plan = _plan_index(array, slices)
    x = array.array
    if plan.perm is None and plan.final_perm is None and not isinstance(x, Tracer):
        getter = _static_indexer("get", plan.pos)
        if getter is not None:  # eager, static ints/slices: one compiled dispatch
            return NamedArray._new(getter(x), plan.final_axes)
    return _gather(array, plan)


_index_fn = index


class NamedIndexUpdateHelper:
    __slots__ = ("_array",)

    def __init__(self, array: NamedArray):
        self._array = array

    def __getitem__(self, idx) -> _NamedIndexUpdateRef:
        return _NamedIndexUpdateRef(self._array, normalize_index_arg(idx))


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
            value = broadcast_to(
                value, plan.axes, ensure_order=True, enforce_no_extra_axes=True
            ).array
        elif not is_scalar_like(value):
            raise ValueError(
                f"Update value must be a NamedArray or a scalar, got a positional array of shape "
                f"{getattr(value, 'shape', None)}; the selected region has axes {describe_axes(plan.axes)}"
            )
        x = arr.array
        if (
            plan.perm is None
            and not kwargs
            and not isinstance(x, Tracer)
            and not isinstance(value, Tracer)
        ):
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
            x = jnp.transpose(x, tuple(int(i) for i in np.argsort(plan.perm)))
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


_TAKE_MODES = (None, "clip", "wrap", "fill", "promise_in_bounds")


def take(
    array: NamedArray,
    axis: AxisSelector,
    index: int | NamedArray,
    *,
    mode: str | None = None,
    fill_value=None,
) -> NamedArray:
    """Selects along ``axis`` by an int (removes it) or an integer NamedArray (gathers).

    With a NamedArray index the axis is replaced by the index's axes; index axes that the
    array also has are matched elementwise. Taking the last axis gives a NamedArray with
    no axes. Negative indices count from the end, as in NumPy.

    Args:
        array: The array to select from.
        axis: The axis to select along.
        index: A Python/NumPy int, a 0-d integer array, or an integer NamedArray.
        mode: What an index outside ``[-size, size)`` does, as in ``jnp.take``:
            ``None`` (the default) raises ``IndexError`` for a concrete index (an int or a
            concrete array); a traced one, whose value is unknown until run time, counts
            negative values from the end and is then clamped to the nearest end.
            ``"clip"`` clamps into ``[0, size)`` (NumPy's rule: a negative index becomes
            0); ``"wrap"`` takes the index modulo the size; ``"fill"`` gives ``fill_value``;
            ``"promise_in_bounds"`` promises there are none (out-of-range results are
            undefined).
        fill_value: The value ``mode="fill"`` gives; by default NaN for inexact dtypes,
            the most negative value for signed integers, the largest for unsigned ones and
            True for booleans (``jnp.take``'s defaults).

    Raises:
        IndexError: for a concrete out-of-range index with ``mode=None``.
        ValueError: for an unknown ``mode``.
    """
    if mode not in _TAKE_MODES:
        raise ValueError(f"take: unknown mode {mode!r}; expected one of {_TAKE_MODES}")
    check_named(array, "take")
    pos = array._index_of(axis)
    name, size = array.axes[pos].name, array.axes[pos].size
    raw = index.array if isinstance(index, NamedArray) else index
    concrete = not isinstance(raw, Tracer)
    if mode is None and concrete:
        values = np.asarray(raw)
        bad = (values < -size) | (values >= size)
        if bad.any():
            shown = values[bad].ravel()[:5].tolist()
            raise IndexError(
                f"take: index {shown if values.ndim else int(values)} is out of bounds for axis "
                f"{name!r} of size {size} (pass mode='clip', 'wrap' or 'fill' to allow it)"
            )
    if mode in (None, "promise_in_bounds") or (
        concrete and mode == "fill" and _in_range(raw, size)
    ):
        return _take_order(_index_fn(array, {axis: index}), array, pos, index)
    raw = jnp.asarray(raw)
    if mode == "wrap":
        fixed = jnp.mod(raw, size)
    elif mode == "clip":  # NumPy's clip: a negative index is clipped to 0, not counted from the end
        fixed = jnp.clip(raw, 0, size - 1)
    else:
        fixed = jnp.clip(jnp.where(raw < 0, raw + size, raw), 0, size - 1)
    fixed_index = (
        NamedArray._new(fixed, index.axes, index._names) if isinstance(index, NamedArray) else fixed
    )
    out = _take_order(_index_fn(array, {axis: fixed_index}), array, pos, index)
    if mode != "fill":
        return out
    valid = (raw >= -size) & (raw < size)
    if isinstance(index, NamedArray):
        valid = broadcast_to(NamedArray._new(valid, index.axes, index._names), out.axes).array
    fill = _default_fill(out.dtype) if fill_value is None else fill_value
    return NamedArray._new(
        jnp.where(valid, out.array, jnp.asarray(fill, out.dtype)), out.axes, out._names
    )


def _take_order(out: NamedArray, array: NamedArray, pos: int, index: Any) -> NamedArray:
    """Haliax's axis order for ``take`` with an index that shares axes with the array.

    Without shared axes the index's axes replace the taken one in place. With shared axes
    (matched elementwise, e.g. per-token labels ``(batch, seq)`` taken from logits
    ``(batch, seq, vocab)``), the index's own new axes come first, then the array's
    remaining axes in the array's order, whatever order the index has them in.
    """
    if not isinstance(index, NamedArray):
        return out
    remaining = array._names[:pos] + array._names[pos + 1 :]
    if not set(index._names) & set(remaining):
        return out
    new = [n for n in index._names if n not in remaining]
    order = new + list(remaining)
    if list(out._names) == order:
        return out
    return out.rearrange(tuple(order))


def _in_range(raw, size: int) -> bool:
    values = np.asarray(raw)
    return bool(((values >= -size) & (values < size)).all())


def _default_fill(dtype):
    """``jnp.take``'s fill value for ``mode="fill"``."""
    dtype = np.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.inexact):
        return np.nan
    if jnp.issubdtype(dtype, jnp.bool_):
        return True
    info = jnp.iinfo(dtype)
    return info.min if jnp.issubdtype(dtype, jnp.signedinteger) else info.max

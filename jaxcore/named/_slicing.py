"""Slicing ``NamedArray`` by axis name: ``slice`` (static or dynamic windows) and
``updated_slice`` (write a smaller array into a window).

Starts may be Python ints or traced integer scalars (``dslice``/``ds`` carry a start and a
static length); a start that is a NamedArray with a batch axis slices each row at its own
offset in ``updated_slice``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxcore.named._array import (
    NamedArray,
    Tracer,
    describe_axes,
    is_scalar_like,
)
from jaxcore.named._axis import (
    Axis,
    AxisSelector,
    check_unique,
)
from jaxcore.named._broadcast import broadcast_to
from jaxcore.named._indexing import is_int_array


def _static_int(x):
    """``int(x)`` for static integers, ``None`` for traced values."""
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return int(x)
    if isinstance(x, Tracer):
        return None
    if getattr(x, "ndim", None) == 0 and is_int_array(x):
        return int(x)
    return None


def _unwrap_start(name, start):
    if isinstance(start, NamedArray):
        if start.axes:
            raise ValueError(
                f"Start for axis {name!r} must be a scalar, got axes {describe_axes(start.axes)}"
            )
        return start.array
    if isinstance(start, bool) or not (
        isinstance(start, (int, np.integer)) or getattr(start, "ndim", None) == 0
    ):
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
    if (
        (args and isinstance(args[0], Mapping))
        or "start" in kwargs
        and isinstance(kwargs["start"], Mapping)
    ):
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
    out_axis = (
        new_axis
        if isinstance(new_axis, Axis)
        else Axis(new_axis if new_axis is not None else old.name, length)
    )
    if s is not None:
        x = lax.slice_in_dim(array.array, s, s + length, axis=pos)
    else:
        x = lax.dynamic_slice_in_dim(array.array, start, length, axis=pos)
    axes = array.axes[:pos] + (out_axis,) + array.axes[pos + 1 :]
    check_unique(axes)
    return NamedArray._new(x, tuple(axes))


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
        raise ValueError(
            f"slice: lengths given for axes {sorted(length_by_name)} that have no start"
        )
    check_unique(axes)
    x = lax.dynamic_slice(
        array.array, [jnp.asarray(s) if isinstance(s, Tracer) else s for s in starts], sizes
    )
    return NamedArray._new(x, tuple(axes))


def updated_slice(
    array: NamedArray, start: Mapping[AxisSelector, Any], update: NamedArray
) -> NamedArray:
    """Writes ``update`` into ``array`` at the given per-axis start offsets.

    Axes of ``array`` not in ``start`` start at 0. ``update``'s axes are matched by name;
    array axes the update lacks are broadcast (size 1 along axes in ``start``, full size
    otherwise). Traced starts are clamped so the window fits (``lax.dynamic_update_slice``).

    A start may be a NamedArray with axes (a per-row start, as in Haliax): the write is
    then mapped over those axes, which the array must have; each row of ``array`` gets
    the matching row of ``update`` (or all of ``update`` if it lacks that axis) at its own
    start.

    Raises:
        ValueError: if ``update`` has an axis the array lacks, an update axis is longer
            than the array's, a static window runs past the end, or a per-row start has an
            axis the array lacks.
    """
    map_axes: list[Axis] = []
    for st in start.values():
        if isinstance(st, NamedArray):
            for ax in st.axes:
                if ax not in map_axes:
                    map_axes.append(ax)
    if map_axes:
        return _updated_slice_rows(array, start, update, tuple(map_axes))
    starts = [0] * array.ndim
    started = set()
    for key, st in start.items():
        pos = array._index_of(key)
        started.add(array.axes[pos].name)
        starts[pos] = _unwrap_start(array.axes[pos].name, st)
    if not isinstance(update, NamedArray):
        if not is_scalar_like(update):
            raise ValueError(
                f"updated_slice needs a NamedArray update (or a scalar), got shape {getattr(update, 'shape', None)}"
            )
        update = NamedArray._new(jnp.asarray(update, dtype=array.dtype), ())
    extra = [ax.name for ax in update.axes if ax.name not in array._names]
    if extra:
        raise ValueError(
            f"Update has axes {extra} that are not in the original array with shape "
            f"{describe_axes(array.axes)}"
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


def _updated_slice_rows(
    array: NamedArray, start: Mapping, update, map_axes: tuple[Axis, ...]
) -> NamedArray:
    """``updated_slice`` with per-row starts: one ``jax.vmap`` level per axis of the starts."""
    for ax in map_axes:
        if ax.name not in array._names:
            raise ValueError(
                f"updated_slice: a start has axis {ax.name!r}, which the array (axes "
                f"{describe_axes(array.axes)}) does not have; per-row starts map over the array's axes"
            )
        array._index_of(ax)  # size check
    if not isinstance(update, NamedArray):
        if not is_scalar_like(update):
            raise ValueError(
                f"updated_slice needs a NamedArray update (or a scalar), got shape {getattr(update, 'shape', None)}"
            )
        update = NamedArray._new(jnp.asarray(update, dtype=array.dtype), ())
    names = [ax.name for ax in map_axes]
    rows = tuple(ax for ax in array.axes if ax.name not in names)
    arr = broadcast_to(array, map_axes + rows).array  # mapped axes first
    upd_mapped = tuple(ax for ax in map_axes if ax.name in update._names)
    upd_rows = tuple(ax for ax in update.axes if ax.name not in names)
    for ax in upd_mapped:
        update._index_of(ax)  # the update's row axis must match the array's
    upd = broadcast_to(update, upd_mapped + upd_rows).array
    keys = list(start)
    raw_starts = []
    start_mapped = []
    for k in keys:
        st = start[k]
        if isinstance(st, NamedArray) and st.axes:
            present = tuple(ax for ax in map_axes if ax.name in st._names)
            raw_starts.append(broadcast_to(st, present).array)
            start_mapped.append({ax.name for ax in present})
        else:
            raw_starts.append(st.array if isinstance(st, NamedArray) else st)
            start_mapped.append(set())

    def row(a, u, *sts):
        out = updated_slice(
            NamedArray._new(a, rows), dict(zip(keys, sts)), NamedArray._new(u, upd_rows)
        )
        return out.array

    fn = row
    for ax in reversed(map_axes):
        in_axes = (0, 0 if ax.name in update._names else None) + tuple(
            0 if ax.name in m else None for m in start_mapped
        )
        fn = jax.vmap(fn, in_axes=in_axes)
    out = fn(arr, upd, *raw_starts)
    result = NamedArray._new(out, map_axes + rows)
    return broadcast_to(result, array.axes)

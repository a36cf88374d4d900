"""Shape manipulation by axis name: renaming, flattening, splitting, combining, permuting.

Every function here reduces to one ``transpose``/``reshape``/``concatenate`` on the
underlying array; the work is in computing the named result axes and checking them.
The string form of ``rearrange`` lives in ``_rearrange`` (``rearrange_str``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import jax.numpy as jnp
from jax import lax

from jaxcore.named._array import NamedArray, check_named, describe_axes
from jaxcore.named._axis import Axis, AxisSelection, AxisSelector, AxisSpec, check_unique, to_axes


def _named_axis(new_axis: AxisSelector, size: int, what: str) -> Axis:
    """An ``Axis`` of ``size`` for a name, or the given ``Axis`` after checking its size."""
    if isinstance(new_axis, str):
        return Axis(new_axis, size)
    if isinstance(new_axis, Axis):
        if new_axis.size != size:
            raise ValueError(
                f"{what}: axis {new_axis.name!r} has size {new_axis.size}, expected {size}"
            )
        return new_axis
    raise TypeError(f"{what}: expected an axis name or Axis, got {new_axis!r}")


def rename(array: NamedArray, renames: Mapping[AxisSelector, AxisSelector]) -> NamedArray:
    """Renames axes; the data is untouched.

    Args:
        array: The NamedArray.
        renames: Old axis (name or ``Axis``) to new name or ``Axis`` (same size).

    Raises:
        ValueError: if an old axis is missing, a new ``Axis`` has another size, or the
            result would repeat a name.
    """
    check_named(array, "rename")
    axes = list(array.axes)
    for old, new in renames.items():
        pos = array._index_of(old)
        axes[pos] = _named_axis(new, axes[pos].size, f"rename of {axes[pos].name!r}")
    check_unique(axes)
    return NamedArray._new(array.array, tuple(axes))


def ravel(array: NamedArray, new_axis_name: AxisSelector) -> NamedArray:
    """Flattens all axes (in their current order) into one axis ``new_axis_name``."""
    check_named(array, "ravel")
    ax = _named_axis(new_axis_name, array.size, "ravel")
    return NamedArray._new(jnp.reshape(array.array, (ax.size,)), (ax,))


def flatten(x, new_axis_name: AxisSelector | None = None, *, is_leaf=None):
    """``flatten(array, new_axis_name)`` ravels an array; ``flatten(tree)`` flattens a pytree.

    The spec uses the name for both: with an axis name it is ``ravel``; without one it
    is the NamedArray-aware pytree flatten (``jaxcore.named._tree.flatten``), returning
    ``(leaves, treedef)``.
    """
    if new_axis_name is not None:
        if is_leaf is not None:
            raise TypeError("flatten(array, new_axis_name) takes no is_leaf")
        return ravel(x, new_axis_name)
    from jaxcore.named import _tree

    return _tree.flatten(x, is_leaf=is_leaf)


_MISSING = object()


def flatten_axes(target, old_axes=_MISSING, new_axis=_MISSING):
    """Merges several axes into one, whose size is the product of theirs.

    Forms:

    * ``flatten_axes(array, old_axes, new_axis)``: merges ``old_axes`` of ``array`` (in
      the given order) into ``new_axis``, placed where the first of them was.
    * ``flatten_axes(axes, old_axes, new_axis)``: the same on an axis spec; returns axes.
    * ``flatten_axes(axes, new_axis)``: merges all of ``axes``; returns the new ``Axis``.

    Raises:
        ValueError: if an old axis is missing or ``new_axis`` has the wrong size.
        TypeError: if the arguments fit none of the forms.
    """
    if new_axis is _MISSING:
        if isinstance(target, NamedArray) or old_axes is _MISSING:
            raise TypeError(
                "flatten_axes takes (array, old_axes, new_axis), (axes, old_axes, new_axis) or (axes, new_axis)"
            )
        spec = to_axes(target)
        return _named_axis(old_axes, math.prod(a.size for a in spec), "flatten_axes")
    if isinstance(target, NamedArray):
        return _flatten_array(target, old_axes, new_axis)
    probe = NamedArray._new(None, to_axes(target))
    _, out_axes = _flatten_plan(probe, old_axes, new_axis)
    return out_axes


def _flatten_plan(array: NamedArray, old_axes: AxisSelection, new_axis: AxisSelector):
    if isinstance(old_axes, (str, Axis)):
        old_axes = (old_axes,)
    positions = [array._index_of(a) for a in old_axes]
    if not positions:
        raise ValueError("flatten_axes needs at least one axis to merge")
    if len(set(positions)) != len(positions):
        raise ValueError(f"flatten_axes: {old_axes!r} names an axis twice")
    first = min(positions)
    merged = set(positions)
    before = [i for i in range(array.ndim) if i not in merged and i < first]
    after = [i for i in range(array.ndim) if i not in merged and i > first]
    perm = before + positions + after
    new_ax = _named_axis(new_axis, math.prod(array.axes[i].size for i in positions), "flatten_axes")
    out_axes = (
        tuple(array.axes[i] for i in before) + (new_ax,) + tuple(array.axes[i] for i in after)
    )
    check_unique(out_axes)
    return perm, out_axes


def _flatten_array(array: NamedArray, old_axes, new_axis) -> NamedArray:
    perm, out_axes = _flatten_plan(array, old_axes, new_axis)
    x = array.array
    if perm != list(range(array.ndim)):
        x = jnp.transpose(x, perm)
    return NamedArray._new(jnp.reshape(x, tuple(a.size for a in out_axes)), out_axes)


def unflatten_axis(array: NamedArray, axis: AxisSelector, new_axes: AxisSpec) -> NamedArray:
    """Splits one axis into several whose sizes multiply to its size (row-major order).

    Raises:
        ValueError: if the sizes do not multiply to the axis size or names would repeat.
    """
    check_named(array, "unflatten_axis")
    pos = array._index_of(axis)
    new = to_axes(new_axes)
    old = array.axes[pos]
    if math.prod(a.size for a in new) != old.size:
        raise ValueError(
            f"unflatten_axis: axis {old.name!r} has size {old.size} but the new axes {describe_axes(new)} "
            f"have {math.prod(a.size for a in new)} elements"
        )
    out_axes = array.axes[:pos] + new + array.axes[pos + 1 :]
    check_unique(out_axes)
    return NamedArray._new(jnp.reshape(array.array, tuple(a.size for a in out_axes)), out_axes)


def split(a: NamedArray, axis: AxisSelector, new_axes: Sequence[Axis]) -> list[NamedArray]:
    """Splits along ``axis`` into consecutive pieces, one per axis in ``new_axes``.

    Raises:
        ValueError: if the sizes of ``new_axes`` do not add up to the size of ``axis``.
    """
    check_named(a, "split")
    pos = a._index_of(axis)
    old = a.axes[pos]
    new_axes = [x if isinstance(x, Axis) else _bad_split_axis(x) for x in new_axes]
    total = sum(x.size for x in new_axes)
    if total != old.size:
        raise ValueError(
            f"split: axis {old.name!r} has size {old.size} but the new axes add up to {total} "
            f"({[str(x) for x in new_axes]})"
        )
    out, start = [], 0
    for ax in new_axes:
        piece = lax.slice_in_dim(a.array, start, start + ax.size, axis=pos)
        axes = a.axes[:pos] + (ax,) + a.axes[pos + 1 :]
        check_unique(axes)
        out.append(NamedArray._new(piece, axes))
        start += ax.size
    return out


def _bad_split_axis(x):
    raise TypeError(f"split needs Axis objects (with sizes) for new_axes, got {x!r}")


def unbind(array: NamedArray, axis: AxisSelector) -> list[NamedArray]:
    """One NamedArray per position along ``axis`` (which is removed from each)."""
    check_named(array, "unbind")
    pos = array._index_of(axis)
    axes = array.axes[:pos] + array.axes[pos + 1 :]
    names = array._names[:pos] + array._names[pos + 1 :]
    return [
        NamedArray._new(lax.index_in_dim(array.array, i, axis=pos, keepdims=False), axes, names)
        for i in range(array.axes[pos].size)
    ]


def _align_all(arrays: Sequence[NamedArray], skip: str | None, fname: str) -> list:
    """Transposes every array to the first one's axis order (``skip`` may differ in size)."""
    first = arrays[0]
    ref = {a.name: a.size for a in first.axes}
    out = []
    for k, arr in enumerate(arrays):
        check_named(arr, fname)
        if set(arr._names) != set(first._names):
            raise ValueError(
                f"{fname}: array {k} has axes {describe_axes(arr.axes)} but array 0 has {describe_axes(first.axes)}"
            )
        for ax in arr.axes:
            if ax.name != skip and ax.size != ref[ax.name]:
                raise ValueError(
                    f"{fname}: axis {ax.name!r} has size {ax.size} in array {k} but {ref[ax.name]} in array 0"
                )
        if arr._names == first._names:
            out.append(arr.array)
        else:
            out.append(jnp.transpose(arr.array, [arr._names.index(n) for n in first._names]))
    return out


def concatenate(axis: AxisSelector, arrays: Sequence[NamedArray]) -> NamedArray:
    """Concatenates along ``axis``; other axes are matched by name (first array's order).

    Args:
        axis: The axis to join along; every array must have it. An ``Axis`` must have the
            total size.
        arrays: The arrays.

    Raises:
        ValueError: on no arrays, differing axis names, or size mismatches.
    """
    arrays = list(arrays)
    if not arrays:
        raise ValueError("concatenate needs at least one array")
    name = axis if isinstance(axis, str) else axis.name
    for k, arr in enumerate(arrays):
        check_named(arr, "concatenate")
        if name not in arr._names:
            raise ValueError(
                f"concatenate: array {k} (axes {describe_axes(arr.axes)}) has no axis {name!r}"
            )
    raw = _align_all(arrays, name, "concatenate")
    pos = arrays[0]._names.index(name)
    total = sum(arr.axes[arr._names.index(name)].size for arr in arrays)
    new_ax = _named_axis(axis, total, "concatenate")
    axes = arrays[0].axes[:pos] + (new_ax,) + arrays[0].axes[pos + 1 :]
    return NamedArray._new(jnp.concatenate(raw, axis=pos), axes)


def stack(axis: AxisSelector, arrays: Sequence[NamedArray]) -> NamedArray:
    """Stacks arrays along a new leading axis (other axes matched by name).

    Args:
        axis: Name or ``Axis`` (of size ``len(arrays)``) of the new axis.
        arrays: Arrays with the same axes (any order).

    Raises:
        ValueError: on no arrays, differing axes, or if ``axis`` already exists.
    """
    arrays = list(arrays)
    if not arrays:
        raise ValueError("stack needs at least one array")
    new_ax = _named_axis(axis, len(arrays), "stack")
    raw = _align_all(arrays, None, "stack")
    if new_ax.name in arrays[0]._names:
        raise ValueError(f"stack: the arrays already have an axis {new_ax.name!r}")
    return NamedArray._new(jnp.stack(raw, axis=0), (new_ax,) + arrays[0].axes)


def rearrange(array: NamedArray, *args, **kwargs) -> NamedArray:
    """Permutes axes (sequence form) or applies an einops-style expression (string form).

    Sequence form: ``rearrange(x, ("c", ..., "b"))`` puts the named axes in that order;
    one ``...`` stands for every unnamed axis in its current order (several ``...`` share
    them out as Haliax does: each goes to the first ``...`` after the last named axis seen). String form:
    ``rearrange(x, "b h w c -> b (e: h w c)", **bindings)`` (see ``_rearrange``).

    Raises:
        ValueError: if an axis is missing or repeated, or (without ``...``) not every
            axis is named.
    """
    check_named(array, "rearrange")
    if len(args) == 1 and isinstance(args[0], str):
        from jaxcore.named._rearrange import rearrange_str

        return rearrange_str(array, args[0], **kwargs)
    if kwargs:
        raise TypeError(
            f"rearrange with a sequence of axes takes no keyword arguments, got {sorted(kwargs)}"
        )
    spec = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args
    named_pos = [array._index_of(a) for a in spec if a is not Ellipsis]
    named_set = set(named_pos)
    if len(named_set) != len(named_pos):
        raise ValueError(f"rearrange: {spec!r} names an axis twice")
    rest = [i for i in range(array.ndim) if i not in named_set]
    if Ellipsis not in spec and rest:
        raise ValueError(
            f"rearrange: axes {[array.axes[i].name for i in rest]} are not mentioned in {spec!r} "
            "(add ... to keep them in their current order)"
        )
    if sum(1 for a in spec if a is Ellipsis) > 1:
        from jaxcore.named._rearrange import fill_ellipses

        it = iter(named_pos)
        slots = fill_ellipses(
            [a if a is Ellipsis else (next(it),) for a in spec], range(array.ndim)
        )
        perm = [i for slot in slots for i in slot]
    else:
        perm, it = [], iter(named_pos)
        for a in spec:
            perm.extend(rest if a is Ellipsis else [next(it)])
    if perm == list(range(array.ndim)):
        return array
    axes = tuple(array.axes[i] for i in perm)
    return NamedArray._new(jnp.transpose(array.array, perm), axes)


__all__ = [
    "rename", "ravel", "flatten", "flatten_axes", "unflatten_axis", "split", "unbind",
    "concatenate", "stack", "rearrange",
]  # fmt: skip

"""Named ``roll``, ``repeat`` and ``tile``: the axes are addressed by name, sizes follow.

Each one translates names to positions once and calls the ``jax.numpy`` function, so the
values are exactly the positional function's; only the result's axes are computed here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from jaxcore.named._array import NamedArray, check_named
from jaxcore.named._axis import Axis, AxisSelection, AxisSelector

__all__ = ["repeat", "roll", "tile"]


def _axis_list(axis: AxisSelection) -> list[AxisSelector]:
    if isinstance(axis, (str, Axis)):
        return [axis]
    if isinstance(axis, Mapping):
        return list(axis)
    return list(axis)


def roll(array: NamedArray, shift: int | Sequence[int], axis: AxisSelection) -> NamedArray:
    """Named ``jnp.roll``: shifts elements along the named axes, wrapping around.

    Args:
        array: The NamedArray.
        shift: One shift for every axis, or one per axis (in ``axis`` order).
        axis: The axis or axes to roll along.

    Returns:
        The rolled array, with ``array``'s axes.

    Raises:
        ValueError: if an axis is missing, or ``shift`` and ``axis`` differ in length.
    """
    check_named(array, "roll")
    axes = _axis_list(axis)
    positions = tuple(array._index_of(a) for a in axes)
    if isinstance(shift, Sequence) and not isinstance(shift, str):
        if len(shift) != len(positions):
            raise ValueError(f"roll: {len(shift)} shifts for {len(positions)} axes {tuple(axes)!r}")
        shift = tuple(shift)
    out = jnp.roll(array.array, shift, axis=positions if len(positions) != 1 else positions[0])
    return NamedArray._new(out, array.axes, array._names)


def repeat(
    array: NamedArray,
    repeats: Any,
    axis: AxisSelector,
    total_repeat_length: int | None = None,
) -> NamedArray:
    """Named ``jnp.repeat``: repeats each element along ``axis``, which grows to match.

    Args:
        array: The NamedArray.
        repeats: How many times to repeat each element: an int, or an integer array with
            one count per element of ``axis`` (a NamedArray along ``axis`` or positional).
        axis: The axis to repeat along; it keeps its name and gets the new size.
        total_repeat_length: The static size of the result axis; needed under ``jit``
            when ``repeats`` is an array (extra slots repeat the last element, missing
            ones are cut, as in ``jnp.repeat``).

    Returns:
        The repeated array.

    Raises:
        ValueError: if ``axis`` is missing, a NamedArray ``repeats`` is not along ``axis``,
            or an int ``repeats`` is negative.
    """
    check_named(array, "repeat")
    pos = array._index_of(axis)
    old = array.axes[pos]
    if isinstance(repeats, NamedArray):
        if repeats.axes != (old,):
            raise ValueError(
                f"repeat: repeats along {repeats.axes!r} must lie along the repeated axis {old}"
            )
        repeats = repeats.array
    if isinstance(repeats, (int, np.integer)) and repeats < 0:
        raise ValueError(f"repeat: repeats must be non-negative, got {repeats}")
    out = jnp.repeat(array.array, repeats, axis=pos, total_repeat_length=total_repeat_length)
    axes = array.axes[:pos] + (Axis(old.name, out.shape[pos]),) + array.axes[pos + 1 :]
    return NamedArray._new(out, axes)


def tile(array: NamedArray, reps: Mapping[AxisSelector, int]) -> NamedArray:
    """Named ``jnp.tile``: repeats the whole array ``reps[axis]`` times along each axis.

    As in Haliax (and as ``jnp.tile`` prepends dimensions), an axis in ``reps`` that the
    array lacks becomes a new leading axis of size ``reps[axis]`` (new axes in ``reps``
    order, before the array's own).

    Args:
        array: The NamedArray.
        reps: How many copies to lay end to end along each named axis; axes not named are
            left as they are, new names add axes.

    Returns:
        The tiled array; each existing axis in ``reps`` is ``reps[axis]`` times longer.

    Raises:
        ValueError: if a count is negative.
    """
    check_named(array, "tile")
    counts = [1] * array.ndim
    new_axes: list[Axis] = []
    for key, n in reps.items():
        name = key.name if isinstance(key, Axis) else key
        if int(n) < 0:
            raise ValueError(f"tile: the count for axis {name!r} is negative: {n}")
        if name in array._names:
            counts[array._names.index(name)] = int(n)
        else:
            new_axes.append(Axis(name, int(n)))
    out = jnp.tile(array.array, [a.size for a in new_axes] + counts)
    axes = tuple(new_axes) + tuple(Axis(a.name, a.size * c) for a, c in zip(array.axes, counts))
    return NamedArray._new(out, axes)

"""Named ``unique`` and the Array API's ``unique_values``/``_counts``/``_inverse``/``_all``.

JAX needs a static result size, so every function takes the result axis ``Unique``: its
size is the number of unique values kept (padded with ``fill_value``, by default the
smallest value, when there are fewer). Values and counts lie along ``Unique``; inverse
indices keep the input's axes, so ``values[inverse]`` rebuilds the input.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from jaxcore.named._array import NamedArray, check_named
from jaxcore.named._axis import Axis, AxisSelector

__all__ = ["unique", "unique_all", "unique_counts", "unique_inverse", "unique_values"]


def _check_unique_axis(fname: str, array: Any, Unique: Any) -> None:  # noqa: N803 - Haliax's name
    check_named(array, fname)
    if not isinstance(Unique, Axis):
        raise TypeError(f"{fname} needs an Axis for Unique (its size is static), got {Unique!r}")
    if Unique.name in array._names:
        raise ValueError(
            f"{fname}: the result axis {Unique.name!r} is already an axis of the input"
        )


def unique(
    array: NamedArray,
    Unique: Axis,  # noqa: N803 - Haliax's name
    *,
    return_index: bool = False,
    return_inverse: bool = False,
    return_counts: bool = False,
    axis: AxisSelector | None = None,
    fill_value: Any = None,
) -> NamedArray | tuple[NamedArray, ...]:
    """Named ``jnp.unique``: the sorted unique values of ``array`` along ``Unique``.

    Args:
        array: The NamedArray.
        Unique: The result axis; its size is how many unique values (or slices) to keep.
        return_index: Also return the flat index (or the index along ``axis``) of each
            unique value's first occurrence.
        return_inverse: Also return, for each input element (or slice), the index of its
            unique value; it has the input's axes (without ``axis``'s other axes when
            ``axis`` is given: then it lies along ``axis``).
        return_counts: Also return how often each unique value occurs.
        axis: If given, unique slices along this axis instead of unique elements; the
            values then have ``axis`` replaced by ``Unique``.
        fill_value: Pads the values when there are fewer than ``Unique.size``.

    Returns:
        The values, or a tuple ``(values, [index], [inverse], [counts])`` as requested.

    Raises:
        TypeError: if ``Unique`` is not an ``Axis``.
        ValueError: if ``Unique`` is already an axis of ``array`` or ``axis`` is missing.
    """
    _check_unique_axis("unique", array, Unique)
    pos = None if axis is None else array._index_of(axis)
    outs = jnp.unique(
        array.array,
        return_index=True,
        return_inverse=True,
        return_counts=True,
        axis=pos,
        size=Unique.size,
        fill_value=fill_value,
    )
    values, index, inverse, counts = outs
    if pos is None:
        named_values = NamedArray._new(values, (Unique,))
        named_inverse = NamedArray._new(inverse.reshape(array.array.shape), array.axes)
    else:
        named_values = NamedArray._new(values, array.axes[:pos] + (Unique,) + array.axes[pos + 1 :])
        named_inverse = NamedArray._new(inverse.reshape(-1), (array.axes[pos],))
    result = [named_values]
    if return_index:
        result.append(NamedArray._new(index, (Unique,)))
    if return_inverse:
        result.append(named_inverse)
    if return_counts:
        result.append(NamedArray._new(counts, (Unique,)))
    return result[0] if len(result) == 1 else tuple(result)


def unique_values(
    array: NamedArray,
    Unique: Axis,  # noqa: N803 - Haliax's name
    *,
    axis: AxisSelector | None = None,
    fill_value: Any = None,
) -> NamedArray:
    """The sorted unique values of ``array`` along ``Unique`` (see ``unique``; ``axis``
    takes unique slices along that axis instead of unique elements)."""
    out = unique(array, Unique, axis=axis, fill_value=fill_value)
    assert isinstance(out, NamedArray)
    return out


def unique_counts(
    array: NamedArray,
    Unique: Axis,  # noqa: N803 - Haliax's name
    *,
    axis: AxisSelector | None = None,
    fill_value: Any = None,
) -> tuple[NamedArray, NamedArray]:
    """``(values, counts)`` along ``Unique`` (see ``unique``); padded slots count 0."""
    values, counts = unique(array, Unique, return_counts=True, axis=axis, fill_value=fill_value)
    return values, counts


def unique_inverse(
    array: NamedArray,
    Unique: Axis,  # noqa: N803 - Haliax's name
    *,
    axis: AxisSelector | None = None,
    fill_value: Any = None,
) -> tuple[NamedArray, NamedArray]:
    """``(values, inverse)``: ``values`` along ``Unique``, ``inverse`` with ``array``'s axes."""
    values, inverse = unique(array, Unique, return_inverse=True, axis=axis, fill_value=fill_value)
    return values, inverse


def unique_all(
    array: NamedArray,
    Unique: Axis,  # noqa: N803 - Haliax's name
    *,
    axis: AxisSelector | None = None,
    fill_value: Any = None,
) -> tuple[NamedArray, NamedArray, NamedArray, NamedArray]:
    """``(values, indices, inverse, counts)`` (see ``unique``), as the Array API orders them."""
    values, index, inverse, counts = unique(
        array,
        Unique,
        return_index=True,
        return_inverse=True,
        return_counts=True,
        axis=axis,
        fill_value=fill_value,
    )
    return values, index, inverse, counts

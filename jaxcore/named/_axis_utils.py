"""Helpers over axis specs: shape dicts, replacing one axis, partial orders, sizes.

They work on specs only (``Axis``, names, sequences and shape dicts), never on arrays, and
keep the caller's container kind where Haliax does (a dict in gives a dict out).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import EllipsisType

from jaxcore.named._axis import (
    Axis,
    AxisSelection,
    AxisSelector,
    AxisSpec,
    axis_name,
    concat_axes,
    selection_items,
    to_axes,
)
from jaxcore.named._dot import order_for_partial_spec

__all__ = [
    "axis_size",
    "axis_spec_to_shape_dict",
    "concat_axis_specs",
    "rearrange_for_partial_order",
    "replace_axis",
]


def axis_spec_to_shape_dict(axis_spec: AxisSelection) -> dict[str, int | None]:
    """The ``{name: size}`` dict of an axis spec (``None`` for an axis given by name only).

    Args:
        axis_spec: An ``Axis``, a name, a sequence of them or a shape dict.

    Returns:
        The shape dict, in the spec's order.

    Raises:
        ValueError: if an axis name occurs twice or is given two sizes.
        TypeError: if an entry is not an ``Axis`` or a name.
    """
    return dict(selection_items(axis_spec))


def axis_size(axis_spec: AxisSpec) -> int:
    """The number of elements an array over ``axis_spec`` has: the product of its sizes.

    Args:
        axis_spec: An ``Axis``, a sequence of axes or a shape dict (sizes required).

    Returns:
        The product of the sizes (1 for an empty spec).

    Raises:
        TypeError: if an entry has no size (a bare name).
    """
    return math.prod(a.size for a in to_axes(axis_spec))


def concat_axis_specs(a1: AxisSelection, a2: AxisSelection) -> AxisSelection:
    """``a1`` followed by ``a2``; a dict ``a1`` gives a dict (Haliax's name for ``concat_axes``).

    Raises:
        ValueError: if an axis name occurs in both.
    """
    return concat_axes(a1, a2)


def replace_axis(axis_spec: AxisSelection, old: AxisSelector, new: AxisSelection) -> AxisSelection:
    """``axis_spec`` with the axis ``old`` replaced by ``new`` (one axis or several), in place.

    Args:
        axis_spec: The spec to edit (a dict gives a dict, anything else a tuple).
        old: The axis (or its name) to replace.
        new: What goes in its slot: an axis, a name or a sequence/dict of them.

    Returns:
        The edited spec.

    Raises:
        ValueError: if ``old`` is not in ``axis_spec``, ``old`` is an ``Axis`` whose size
            differs from the spec's, or the result has an axis name twice.
    """
    items = selection_items(axis_spec)
    old_name = old.name if isinstance(old, Axis) else old
    names = [n for n, _ in items]
    if old_name not in names:
        raise ValueError(f"replace_axis: axis {old_name!r} is not in {axis_spec!r}")
    pos = names.index(old_name)
    size = items[pos][1]
    if isinstance(old, Axis) and size is not None and size != old.size:
        raise ValueError(f"replace_axis: {old} has size {size} in {axis_spec!r}")
    new_items = selection_items(new)
    out = items[:pos] + new_items + items[pos + 1 :]
    seen: set[str] = set()
    for name, _ in out:
        if name in seen:
            raise ValueError(
                f"replace_axis: replacing {old_name!r} with {new!r} gives axis {name!r} twice"
            )
        seen.add(name)
    if isinstance(axis_spec, Mapping):
        return dict(out)
    originals: dict[str, AxisSelector] = {}  # hand back the caller's own Axis objects
    for sel in (axis_spec, new):
        if isinstance(sel, Mapping):
            continue
        for a in (sel,) if isinstance(sel, (str, Axis)) else sel:
            originals.setdefault(a.name if isinstance(a, Axis) else a, a)
    return tuple(originals.get(n, n if s is None else Axis(n, s)) for n, s in out)


def rearrange_for_partial_order(
    partial_order: Sequence[AxisSelector | EllipsisType], axes: AxisSelection
) -> tuple[AxisSelector, ...]:
    """``axes`` reordered to follow ``partial_order``, e.g. ``("batch", ..., "embed")``.

    Axes the order names appear in its order; the rest fill the ``...`` slots in their
    current order (several ``...`` share them out as ``rearrange`` does).

    As in Haliax, ``axes`` may be names only (``("batch", "embed")``): the result then
    holds the same entries (names stay names, ``Axis`` objects stay ``Axis``).

    Args:
        partial_order: Axes or names, with any number of ``...``.
        axes: The axes (or axis names) to reorder.

    Returns:
        The entries of ``axes``, reordered.

    Raises:
        ValueError: if the order names an axis not in ``axes`` or names one twice, if
            ``axes`` names one twice, or if the order has no ``...`` and leaves some out.
    """
    if isinstance(axes, Mapping):
        entries: tuple[AxisSelector, ...] = tuple(
            Axis(n, s) if s is not None else n for n, s in axes.items()
        )
    elif isinstance(axes, (str, Axis)):
        entries = (axes,)
    else:
        entries = tuple(axes)
    originals = {axis_name(a): a for a in entries}
    if len(originals) != len(entries):
        raise ValueError(f"rearrange_for_partial_order: {entries!r} names an axis twice")
    sizes = {axis_name(a): a.size for a in partial_order if isinstance(a, Axis)}
    # names stand in as axes of the size the order gives them (or a dummy): only names matter
    stand_ins = [a if isinstance(a, Axis) else Axis(a, sizes.get(a, 0)) for a in entries]
    ordered = order_for_partial_spec(partial_order, stand_ins)
    return tuple(originals[a.name] for a in ordered)

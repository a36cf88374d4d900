"""Named axes: the ``Axis`` dataclass, the selector/spec type aliases and set-like helpers.

An axis is identified by its *name*; its *size* is carried along so that arrays can be
created and sizes can be checked when axes with the same name meet. The helpers here work
on the three ways users name axes:

* ``AxisSelector`` -- one axis, as an ``Axis`` or its name;
* ``AxisSpec`` -- fully sized axes: an ``Axis``, a sequence of ``Axis`` or a shape dict;
* ``AxisSelection`` -- one or more axes that may or may not carry sizes: a selector, a
  sequence of selectors or a partial shape dict (``{"batch": None, "embed": 128}``).

Set helpers keep the container kind of their first argument: a shape dict in, a shape
dict out; anything else in, a tuple out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any


@dataclasses.dataclass(frozen=True, slots=True)
class Axis:
    """A named dimension of a ``NamedArray``.

    Two axes are equal when both name and size agree, so an ``Axis`` doubles as a guard
    when wiring tensors together.

    Attributes:
        name: The axis name; this is what operations match on.
        size: The number of elements along the axis.
    """

    name: str
    size: int

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise TypeError(
                f"Axis name must be a str, got {self.name!r} ({type(self.name).__name__})"
            )
        size = self.size
        if isinstance(size, bool) or not hasattr(size, "__index__"):
            raise TypeError(f"Axis {self.name!r}: size must be an int, got {size!r}")
        size = int(size.__index__())
        if size < 0:
            raise ValueError(f"Axis {self.name!r}: size must be non-negative, got {size}")
        object.__setattr__(self, "size", size)

    def alias(self, new_name: str) -> Axis:
        """Returns an axis with the same size under ``new_name``."""
        return Axis(new_name, self.size)

    def resize(self, size: int) -> Axis:
        """Returns an axis with the same name and the given ``size``."""
        return Axis(self.name, size)

    def __repr__(self):
        return f"Axis({self.name!r}, {self.size})"


AxisSelector = Axis | str
"""One axis: an ``Axis`` or just its name (the size is read from an array)."""

ShapeDict = Mapping[str, int]
"""Axis names mapped to sizes, in axis order."""

PartialShapeDict = Mapping[str, int | None]
"""Axis names mapped to sizes, or ``None`` for "any size"."""

AxisSpec = Axis | Sequence[Axis] | ShapeDict
"""Fully sized axes, used when creating or reshaping arrays."""

AxisSelection = AxisSelector | Sequence[AxisSelector] | PartialShapeDict
"""One or more axes, sizes optional; used for reductions, indexing and the like."""


# --------------------------------------------------------------------------- basics


def axis_name(ax: AxisSelection) -> str | tuple[str, ...]:
    """Returns the name of an axis selector, or a tuple of names for several.

    Args:
        ax: An ``Axis``, a name, a sequence of those or a (partial) shape dict.

    Returns:
        ``ax`` itself for a string, ``ax.name`` for an ``Axis``, and a tuple of names for
        a sequence or a mapping (its keys).

    Raises:
        TypeError: if an element is neither an ``Axis`` nor a ``str``.
    """
    if isinstance(ax, str):
        return ax
    if isinstance(ax, Axis):
        return ax.name
    if isinstance(ax, Mapping):
        return tuple(_name_of(k) for k in ax)
    if isinstance(ax, Sequence):
        return tuple(_name_of(a) for a in ax)
    raise TypeError(f"Expected an Axis, an axis name or a sequence of them, got {ax!r}")


def _name_of(ax) -> str:
    if isinstance(ax, str):
        return ax
    if isinstance(ax, Axis):
        return ax.name
    raise TypeError(f"Expected an Axis or an axis name (str), got {ax!r} ({type(ax).__name__})")


def make_axes(**sizes: int) -> tuple[Axis, ...]:
    """Creates several axes at once, in keyword order.

    Example: ``Batch, Embed = make_axes(batch=8, embed=128)``.

    Args:
        **sizes: axis name to size.

    Returns:
        A tuple of ``Axis``, one per keyword.
    """
    return tuple(Axis(name, size) for name, size in sizes.items())


def selection_items(sel: AxisSelection) -> list[tuple[str, int | None]]:
    """``(name, size or None)`` pairs of a selection, in order; rejects duplicate names."""
    if isinstance(sel, (str, Axis)):
        items: list[tuple[str, int | None]] = [
            (sel, None) if isinstance(sel, str) else (sel.name, sel.size)
        ]
    elif isinstance(sel, Mapping):
        items = []
        for k, v in sel.items():
            if isinstance(k, Axis):
                if v is not None and v != k.size:
                    raise ValueError(f"Axis {k.name!r} given with size {k.size} and {v}")
                items.append((k.name, k.size))
            else:
                items.append((_name_of(k), None if v is None else _as_size(k, v)))
    elif isinstance(sel, Sequence):
        items = [(a, None) if isinstance(a, str) else (_axis_of(a).name, a.size) for a in sel]
    else:
        raise TypeError(
            f"Expected an axis selection (Axis, name, sequence or shape dict), got {sel!r}"
        )
    seen = set()
    for name, _ in items:
        if name in seen:
            raise ValueError(f"Duplicate axis name {name!r} in {sel!r}")
        seen.add(name)
    return items


def _as_size(name, v) -> int:
    if isinstance(v, Axis):
        return v.size
    if isinstance(v, bool) or not hasattr(v, "__index__"):
        raise TypeError(f"Axis {name!r}: size must be an int, got {v!r}")
    return int(v.__index__())


def _axis_of(a) -> Axis:
    if isinstance(a, Axis):
        return a
    raise TypeError(f"Expected an Axis or an axis name (str), got {a!r} ({type(a).__name__})")


def to_axes(spec: AxisSpec) -> tuple[Axis, ...]:
    """Converts a fully sized ``AxisSpec`` to a tuple of ``Axis``.

    Args:
        spec: An ``Axis``, a sequence of ``Axis`` or a shape dict.

    Returns:
        The axes, in order.

    Raises:
        TypeError: if an axis is given by name only (its size is then unknown).
        ValueError: on duplicate axis names.
    """
    if isinstance(spec, Axis):
        return (spec,)
    if isinstance(spec, tuple) and all(type(a) is Axis for a in spec):
        axes = spec
    elif isinstance(spec, str):
        raise TypeError(
            f"Axis {spec!r} is given by name only; its size is needed here (pass an Axis)"
        )
    elif isinstance(spec, Mapping):
        axes = tuple(
            k if isinstance(k, Axis) else Axis(_name_of(k), _as_size(k, v)) for k, v in spec.items()
        )
    elif isinstance(spec, Sequence):
        out = []
        for a in spec:
            if isinstance(a, str):
                raise TypeError(
                    f"Axis {a!r} is given by name only; its size is needed here (pass an Axis)"
                )
            out.append(_axis_of(a))
        axes = tuple(out)
    else:
        raise TypeError(
            f"Expected an AxisSpec (Axis, sequence of Axis or shape dict), got {spec!r}"
        )
    check_unique(axes)
    return axes


def check_unique(axes: Sequence[Axis]) -> None:
    """Raises ``ValueError`` naming the first duplicated axis name in ``axes``."""
    names = [a.name for a in axes]
    if len(set(names)) != len(names):
        seen = set()
        for n in names:
            if n in seen:
                raise ValueError(f"Duplicate axis name {n!r} in {tuple(axes)!r}")
            seen.add(n)


def _rebuild(template: AxisSelection, items: list[tuple[str, int | None]], originals: dict):
    """Builds the result container: a dict for dict templates, else a tuple of selectors."""
    if isinstance(template, Mapping):
        return {name: size for name, size in items}
    return tuple(
        originals.get(name, name if size is None else Axis(name, size)) for name, size in items
    )


def _originals(*sels) -> dict:
    """Maps names to the selector objects the user passed (to hand back the same objects)."""
    out: dict[str, Any] = {}
    for sel in sels:
        if isinstance(sel, (str, Axis)):
            sel = (sel,)
        if isinstance(sel, Mapping):
            continue
        for a in sel:
            out.setdefault(_name_of(a), a)
    return out


def _check_sizes(name: str, s1: int | None, s2: int | None) -> None:
    if s1 is not None and s2 is not None and s1 != s2:
        raise ValueError(f"Axis {name!r} has size {s1} in one axis selection and {s2} in the other")


# --------------------------------------------------------------------------- set helpers


def concat_axes(a1: AxisSelection, a2: AxisSelection) -> AxisSelection:
    """Concatenates two axis selections.

    Args:
        a1: The leading axes (its container kind is kept: dict in, dict out).
        a2: The trailing axes.

    Returns:
        ``a1`` followed by ``a2``.

    Raises:
        ValueError: if an axis name occurs in both.
    """
    i1, i2 = selection_items(a1), selection_items(a2)
    names1 = {n for n, _ in i1}
    for n, _ in i2:
        if n in names1:
            raise ValueError(
                f"Axis {n!r} occurs in both {a1!r} and {a2!r}; concat_axes needs disjoint axes"
            )
    return _rebuild(a1, i1 + i2, _originals(a1, a2))


def union_axes(a1: AxisSelection, a2: AxisSelection) -> AxisSelection:
    """Like ``concat_axes`` but axes present in both are kept once (first position wins).

    A dict in either argument makes the result a dict.

    Raises:
        ValueError: if a shared axis has different sizes in ``a1`` and ``a2``.
    """
    i1, i2 = selection_items(a1), selection_items(a2)
    pos = {n: k for k, (n, _) in enumerate(i1)}
    out = list(i1)
    for n, s in i2:
        if n in pos:
            s1 = out[pos[n]][1]
            _check_sizes(n, s1, s)
            if s1 is None and s is not None:
                out[pos[n]] = (n, s)
        else:
            pos[n] = len(out)
            out.append((n, s))
    template = a2 if isinstance(a2, Mapping) and not isinstance(a1, Mapping) else a1
    originals = _originals(a1, a2)
    for n, s in out:  # prefer the sized Axis when one side only named it
        if s is not None and isinstance(originals.get(n), str):
            originals[n] = Axis(n, s)
    return _rebuild(template, out, originals)


def intersect_axes(ax1: AxisSelection, ax2: AxisSelection) -> AxisSelection:
    """Returns the axes of ``ax1`` that also occur (by name) in ``ax2``, in ``ax1``'s order.

    Raises:
        ValueError: if a shared axis has different sizes in the two selections.
    """
    i1, i2 = selection_items(ax1), dict(selection_items(ax2))
    out = []
    for n, s in i1:
        if n in i2:
            _check_sizes(n, s, i2[n])
            out.append((n, s if s is not None else i2[n]))
    originals = _originals(ax1)
    for n, s in out:  # a name in ax1 becomes the sized Axis when ax2 gives the size
        if s is not None and isinstance(originals.get(n), str):
            originals[n] = Axis(n, s)
    return _rebuild(ax1, out, originals)


def eliminate_axes(axis_spec: AxisSelection, to_remove: AxisSelection) -> AxisSelection:
    """Removes ``to_remove`` from ``axis_spec``.

    Raises:
        ValueError: if an axis of ``to_remove`` is not in ``axis_spec`` or has another size.
    """
    items = selection_items(axis_spec)
    present = dict(items)
    for n, s in selection_items(to_remove):
        if n not in present:
            raise ValueError(f"Axis {n!r} not present in {axis_spec!r}")
        _check_sizes(n, present[n], s)
    return without_axes(axis_spec, to_remove)


def without_axes(
    axis_spec: AxisSelection, to_remove: AxisSelection, allow_mismatched_sizes: bool = False
) -> AxisSelection:
    """Removes ``to_remove`` from ``axis_spec``, ignoring axes that are not present.

    Args:
        axis_spec: The axes to filter (container kind is kept).
        to_remove: The axes to drop, matched by name.
        allow_mismatched_sizes: Drop same-named axes even when their sizes differ.

    Raises:
        ValueError: if an axis is present in both with different sizes and
            ``allow_mismatched_sizes`` is false.
    """
    items = selection_items(axis_spec)
    remove = dict(selection_items(to_remove))
    out = []
    for n, s in items:
        if n in remove:
            if not allow_mismatched_sizes:
                _check_sizes(n, s, remove[n])
            continue
        out.append((n, s))
    return _rebuild(axis_spec, out, _originals(axis_spec))


def selects_axis(selector: AxisSelection, selected: AxisSelection) -> bool:
    """True when ``selector`` has every axis of ``selected`` (and sizes agree where both are known)."""
    have = dict(selection_items(selector))
    for n, s in selection_items(selected):
        if n not in have:
            return False
        if s is not None and have[n] is not None and s != have[n]:
            return False
    return True


def is_axis_compatible(ax1: AxisSelector, ax2: AxisSelector) -> bool:
    """True when both name the same axis and, if both are ``Axis``, have the same size."""
    if isinstance(ax1, Axis) and isinstance(ax2, Axis):
        return ax1 == ax2
    return _name_of(ax1) == _name_of(ax2)

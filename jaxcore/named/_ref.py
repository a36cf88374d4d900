"""Named mutable references over ``jax.Ref`` (``jax.new_ref`` / ``jax.ref.*`` in jax 0.10.2).

A ``NamedRef`` pairs a ``jax.Ref`` with the axes of its buffer, and optionally a *view*:
per-axis selectors staged with ``NamedRef.slice``. Reads and writes through a view take
indices relative to the view and are translated into indices on the whole buffer, so
``cache.slice({"layer": slice(4, 8)})[{"layer": 0}]`` touches layer 4 of ``cache``.

Selectors are ints (Python or traced integer scalars), slices with static bounds and
``dslice`` windows (``hax.ds(start, size)``; a traced start is clamped so the window fits
the axis, as ``lax.dynamic_slice`` does). Values
written are aligned by axis name (and broadcast over missing axes) before they reach the
buffer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from jaxcore.named._array import NamedArray
from jaxcore.named._axis import Axis, AxisSelector
from jaxcore.named._indexing import dslice

__all__ = ["NamedRef", "freeze", "new_ref", "swap"]

# A staged per-axis selector: None (whole axis), a `range` (static slice, in buffer
# coordinates) or an integer (axis removed from the view; may be a traced scalar).


def _is_int_like(x: Any) -> bool:
    if isinstance(x, bool):
        return False
    if isinstance(x, int):
        return True
    return (
        hasattr(x, "dtype")
        and getattr(x, "shape", None) == ()
        and jnp.issubdtype(x.dtype, jnp.integer)
    )


class _Window:
    """A staged window with a traced start: buffer positions ``start + k * step``, k < ``size``."""

    __slots__ = ("start", "size", "step")

    def __init__(self, start, size: int, step: int):
        self.start, self.size, self.step = start, size, step

    def __len__(self):
        return self.size


def _is_static_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _compose_dslice(name: str, base, sel: dslice):
    """A ``dslice`` (view coordinates) on top of ``base`` (a range or a ``_Window``)."""
    start, n = sel.start, sel.size
    if not _is_int_like(start):
        raise TypeError(f"Axis {name!r}: a dslice start must be an integer scalar, got {start!r}")
    if _is_static_int(start) or (
        hasattr(start, "shape") and not isinstance(start, jax.core.Tracer)
    ):
        s = int(start)
        if s < 0 or s + n > len(base):
            raise IndexError(
                f"dslice({s}, {n}) is out of bounds for axis {name!r} of size {len(base)}"
            )
        if isinstance(base, range):
            return base[s : s + n]
        return _Window(base.start + s * base.step, n, base.step)
    # A traced start: the window is clamped into the axis when read or written.
    return _Window(base.start + start * base.step, n, base.step)


def _compose(name: str, size: int, staged, sel):
    """Applies ``sel`` (view coordinates) on top of ``staged`` (buffer coordinates)."""
    base = range(size) if staged is None else staged
    if isinstance(sel, dslice):
        return _compose_dslice(name, base, sel)
    if isinstance(base, _Window):
        if isinstance(sel, slice):
            r = range(base.size)[sel]
            return _Window(base.start + r.start * base.step, len(r), base.step * r.step)
        if _is_int_like(sel):
            if _is_static_int(sel):
                if not -base.size <= sel < base.size:
                    raise IndexError(
                        f"Index {sel} is out of bounds for axis {name!r} of size {base.size}"
                    )
                sel = sel % base.size
            else:
                sel = jnp.where(sel < 0, sel + base.size, sel)
            return base.start + sel * base.step
        raise TypeError(
            f"Axis {name!r}: NamedRef selectors must be ints, slices or dslices, got {type(sel).__name__} {sel!r}"
        )
    if isinstance(sel, slice):
        for part in (sel.start, sel.stop, sel.step):
            if part is not None and not isinstance(part, int):
                raise TypeError(f"Axis {name!r}: slice bounds must be static ints, got {sel!r}")
        return base[sel]
    if _is_int_like(sel):
        if isinstance(sel, int):
            if not -len(base) <= sel < len(base):
                raise IndexError(
                    f"Index {sel} is out of bounds for axis {name!r} of size {len(base)}"
                )
            return base[sel]
        sel = jnp.where(sel < 0, sel + len(base), sel)
        return base.start + sel * base.step
    raise TypeError(
        f"Axis {name!r}: NamedRef selectors must be ints, slices or dslices, got {type(sel).__name__} {sel!r}"
    )


def _ds(w: _Window):
    """The ref indexer for a window with a traced start (Pallas' public ``ds``)."""
    from jax.experimental.pallas import ds  # noqa: PLC0415 - only views with a traced start need it

    return ds(w.start, w.size, None if w.step == 1 else w.step)


def _indexer(s):
    """The ref indexer for one staged selector."""
    if s is None:
        return slice(None)
    if isinstance(s, range):
        return _as_slice(s)
    return _ds(s) if isinstance(s, _Window) else s


def _as_slice(r: range) -> slice:
    stop = r.stop if r.stop >= 0 else None
    return slice(r.start, stop, r.step)


class NamedRef:
    """A ``jax.Ref`` with named axes, optionally viewed through staged selectors.

    Index with a mapping from axis (or name) to an int or a slice, exactly like a
    ``NamedArray``: ``ref[{"head": 3}]`` reads, ``ref[{"head": 3}] = value`` writes in place.
    ``ref[...]`` means the whole view.
    """

    __slots__ = ("_ref", "_axes", "_prefix")

    def __init__(self, ref: Any, axes: tuple[Axis, ...], prefix: tuple | None = None):
        if len(axes) != len(ref.shape) or any(a.size != s for a, s in zip(axes, ref.shape)):
            raise ValueError(
                f"NamedRef axes {axes} do not match the buffer shape {tuple(ref.shape)}"
            )
        self._ref = ref
        self._axes = tuple(axes)
        self._prefix = (None,) * len(axes) if prefix is None else tuple(prefix)

    # -- metadata -------------------------------------------------------------------------

    @property
    def dtype(self):
        """The dtype of the buffer."""
        return self._ref.dtype

    @property
    def axes(self) -> tuple[Axis, ...]:
        """The axes seen through this view (staged ints remove axes, slices resize them)."""
        return self._axes_for(self._axes, self._prefix)

    @property
    def shape(self) -> dict[str, int]:
        """Axis name -> size for this view."""
        return {a.name: a.size for a in self.axes}

    named_shape = shape

    @property
    def ndim(self) -> int:
        """Number of axes in this view."""
        return len(self.axes)

    def resolve_axis(self, axis: AxisSelector) -> Axis:
        """Returns this view's ``Axis`` for ``axis`` (an ``Axis`` or a name).

        Raises:
          ValueError: if the view has no such axis or its size differs from ``axis.size``.
        """
        name = axis.name if isinstance(axis, Axis) else axis
        for a in self.axes:
            if a.name == name:
                if isinstance(axis, Axis) and axis.size != a.size:
                    raise ValueError(
                        f"Axis {name!r} has size {a.size} in this NamedRef, not {axis.size}"
                    )
                return a
        raise ValueError(f"Axis {name!r} is not in this NamedRef (axes: {self.axes})")

    def unsafe_buffer_pointer(self):
        """The device buffer address of the underlying reference (eager only)."""
        return self._ref.unsafe_buffer_pointer()

    # -- views ----------------------------------------------------------------------------

    def _staged(self, selector) -> tuple:
        if selector is Ellipsis or selector is None:
            return self._prefix
        if not isinstance(selector, Mapping):
            raise TypeError(
                f"NamedRef indices are mappings from axis to int/slice, or ..., got {type(selector).__name__}"
            )
        visible = {a.name for a in self.axes}
        prefix = list(self._prefix)
        index = {a.name: i for i, a in enumerate(self._axes)}
        for key, sel in selector.items():
            name = key.name if isinstance(key, Axis) else key
            if not isinstance(name, str):
                raise TypeError(f"NamedRef index keys must be axes or names, got {key!r}")
            if name not in visible:
                raise ValueError(f"Axis {name!r} is not in this NamedRef view (axes: {self.axes})")
            i = index[name]
            prefix[i] = _compose(name, self._axes[i].size, prefix[i], sel)
        return tuple(prefix)

    def slice(self, selector: Mapping[AxisSelector, Any]) -> NamedRef:
        """Returns a view with ``selector`` staged; later indices are relative to it."""
        return NamedRef(self._ref, self._axes, self._staged(selector))

    def unsliced(self) -> NamedRef:
        """The whole reference, without staged selectors."""
        return NamedRef(self._ref, self._axes)

    def _index(self, prefix: tuple) -> tuple:
        return tuple(_indexer(s) for s in prefix)

    @staticmethod
    def _axes_for(axes: tuple[Axis, ...], prefix: tuple) -> tuple[Axis, ...]:
        return tuple(
            a if s is None else Axis(a.name, len(s))
            for a, s in zip(axes, prefix)
            if s is None or isinstance(s, (range, _Window))
        )

    # -- reads and writes -----------------------------------------------------------------

    def value(self) -> NamedArray:
        """Reads this view as a ``NamedArray``."""
        return self[...]

    def __getitem__(self, selector) -> NamedArray:
        prefix = self._staged(selector)
        raw = jax.ref.get(self._ref, self._index(prefix))
        return NamedArray(raw, self._axes_for(self._axes, prefix))

    def __setitem__(self, selector, value) -> None:
        prefix = self._staged(selector)
        target = self._axes_for(self._axes, prefix)
        jax.ref.set(self._ref, self._index(prefix), _aligned(value, target, self.dtype))

    def _swap(self, selector, value) -> NamedArray:
        prefix = self._staged(selector)
        target = self._axes_for(self._axes, prefix)
        old = jax.ref.swap(self._ref, self._index(prefix), _aligned(value, target, self.dtype))
        return NamedArray(old, target)

    def __repr__(self):
        return f"NamedRef(axes={self.axes}, dtype={self.dtype})"


def _aligned(value, target: tuple[Axis, ...], dtype) -> jax.Array:
    """Transposes/broadcasts ``value`` by axis name to exactly ``target``."""
    shape = tuple(a.size for a in target)
    if not isinstance(value, NamedArray):
        raw = jnp.asarray(value, dtype=dtype)
        if raw.ndim != 0:
            raise TypeError(
                f"Values written to a NamedRef must be NamedArrays or scalars, got an array of shape {raw.shape}"
            )
        return jnp.broadcast_to(raw, shape)
    names = [a.name for a in target]
    for a in value.axes:
        if a.name not in names:
            raise ValueError(f"Value axis {a.name!r} is not in the target axes {target}")
        t = target[names.index(a.name)]
        if t.size != a.size:
            raise ValueError(
                f"Axis {a.name!r} has size {a.size} in the value but {t.size} in the target"
            )
    order = sorted(range(len(value.axes)), key=lambda i: names.index(value.axes[i].name))
    raw = value.array.astype(dtype)
    if order != list(range(len(order))):
        raw = jnp.transpose(raw, order)
    present = {a.name for a in value.axes}
    raw = raw.reshape(tuple(a.size if a.name in present else 1 for a in target))
    return jnp.broadcast_to(raw, shape)


def _is_dynamic(s) -> bool:
    return s is not None and not isinstance(s, (range, int))


jax.tree_util.register_pytree_node(
    NamedRef,
    lambda r: (
        (
            r._ref,
            tuple(s.start if isinstance(s, _Window) else s for s in r._prefix if _is_dynamic(s)),
        ),
        (
            r._axes,
            tuple(
                ("w", s.size, s.step) if isinstance(s, _Window) else ("d",) if _is_dynamic(s) else s
                for s in r._prefix
            ),
        ),
    ),
    lambda aux, children: _unflatten_ref(aux, children),
)


def _unflatten_ref(aux, children) -> NamedRef:
    axes, layout = aux
    ref, dynamic = children
    it = iter(dynamic)
    prefix = tuple(
        next(it) if s == ("d",) else _Window(next(it), s[1], s[2]) if isinstance(s, tuple) else s
        for s in layout
    )
    obj = object.__new__(NamedRef)
    obj._ref, obj._axes, obj._prefix = ref, axes, prefix
    return obj


def new_ref(value: NamedArray) -> NamedRef:
    """Creates a mutable ``NamedRef`` holding a copy of ``value``.

    Raises:
      TypeError: if ``value`` is not a ``NamedArray``.
    """
    if not isinstance(value, NamedArray):
        raise TypeError(f"new_ref expects a NamedArray, got {type(value).__name__}")
    return NamedRef(jax.new_ref(value.array), value.axes)


def freeze(ref: NamedRef) -> NamedArray:
    """Invalidates the reference and returns its final contents (the view of ``ref``)."""
    if not isinstance(ref, NamedRef):
        raise TypeError(f"freeze expects a NamedRef, got {type(ref).__name__}")
    raw = jax.ref.freeze(ref._ref)
    return NamedArray(raw[ref._index(ref._prefix)], ref._axes_for(ref._axes, ref._prefix))


def swap(ref: NamedRef, idx, value) -> NamedArray:
    """Writes ``value`` at ``idx`` (a named index mapping or ``...``) and returns what was there."""
    if not isinstance(ref, NamedRef):
        raise TypeError(f"swap expects a NamedRef, got {type(ref).__name__}")
    return ref._swap(idx, value)

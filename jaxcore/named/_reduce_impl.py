"""The machinery behind the named reductions of `_reductions` (which is generated).

Translating axis names to positions is planned once per ``(axes, selection)`` and cached,
and a reduction over one axis named by a string takes a shorter path still: together they
keep ``x.sum("batch")`` close to ``jnp.sum(x, axis=0)`` in eager mode.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax.numpy as jnp

from jaxcore.named._array import NamedArray, check_named, is_scalar_like
from jaxcore.named._axis import Axis, AxisSelection, AxisSelector
from jaxcore.named._broadcast import broadcast_to

_REDUCE_CACHE: dict = {}
_REDUCE_CACHE_LIMIT = 4096  # bounds growth under pathological shape churn


def fast_axis(array: Any, axis: str) -> bool:
    """True when ``array`` is exactly a NamedArray that has the axis named ``axis``."""
    return type(array) is NamedArray and axis in array._names


def reduce_one_axis(fn: Callable, array: NamedArray, axis: str) -> NamedArray:
    """The reductions' hot path: ``fn`` over one axis named by a string present in ``array``."""
    names = array._names
    pos = names.index(axis)
    axes = array.axes
    return NamedArray._new(
        fn(array.array, axis=pos), axes[:pos] + axes[pos + 1 :], names[:pos] + names[pos + 1 :]
    )


def _selection_list(axis: Any) -> list:
    if isinstance(axis, Mapping):
        return [
            k if isinstance(k, Axis) else (k if v is None else Axis(k, v)) for k, v in axis.items()
        ]
    return list(axis)


def reduce_plan(
    array: NamedArray, axis: AxisSelection | None
) -> tuple[int | tuple[int, ...] | None, tuple[Axis, ...]]:
    """``(positions, remaining axes)`` for reducing ``axis`` (cached per axes and selector).

    Raises:
        ValueError: if a selected axis is missing or selected twice.
    """
    try:
        key: Any = (array.axes, axis)
        hit = _REDUCE_CACHE.get(key)
    except TypeError:  # unhashable selector (a list or dict)
        key, hit = None, None
    if hit is not None:
        return hit
    plan: tuple[int | tuple[int, ...] | None, tuple[Axis, ...]]
    if axis is None:
        plan = (None, ())
    elif isinstance(axis, (str, Axis)):
        pos = array._index_of(axis)  # a plain int keeps jnp's fast path
        plan = (pos, array.axes[:pos] + array.axes[pos + 1 :])
    else:
        positions = tuple(array._index_of(a) for a in _selection_list(axis))
        if len(set(positions)) != len(positions):
            raise ValueError(f"Axis selection {axis!r} names an axis twice")
        drop = set(positions)
        plan = (positions, tuple(ax for i, ax in enumerate(array.axes) if i not in drop))
    if key is not None:
        if len(_REDUCE_CACHE) >= _REDUCE_CACHE_LIMIT:
            _REDUCE_CACHE.clear()
        _REDUCE_CACHE[key] = plan
    return plan


def _where_array(array: NamedArray, where: Any) -> Any:
    if where is None:
        return None
    if isinstance(where, NamedArray):
        return broadcast_to(where, array.axes, ensure_order=True, enforce_no_extra_axes=True).array
    if is_scalar_like(where):
        return where
    raise ValueError(
        f"`where` must be a NamedArray or a scalar, got a positional array of shape {getattr(where, 'shape', None)}"
    )


def general_reduce(
    fn: Callable, name: str, array: Any, axis: AxisSelection | None, where: Any, kwargs: dict
) -> NamedArray:
    """The general reduction path: any selection, an optional ``where`` mask, extra kwargs.

    Raises:
        TypeError: if ``array`` is not a NamedArray.
        ValueError: if a selected axis is missing.
    """
    check_named(array, name)
    positions, out_axes = reduce_plan(array, axis)
    if where is not None:
        kwargs["where"] = _where_array(array, where)
    return NamedArray._new(fn(array.array, axis=positions, **kwargs), out_axes)


def _extreme_initial(fn: Callable, lowest: bool) -> Callable:
    """Wraps max/min so a ``where`` mask needs no ``initial``: masked-out slots count as
    the dtype's lowest (for max) or highest (for min) value."""

    def reduce(x, axis=None, where=None):
        if where is None:
            return fn(x, axis=axis)
        dt = jnp.result_type(x)
        init: Any
        if jnp.issubdtype(dt, jnp.inexact):
            init = -jnp.inf if lowest else jnp.inf
        elif dt == jnp.bool_:
            init = not lowest
        else:
            info = jnp.iinfo(dt)
            init = info.min if lowest else info.max
        return fn(x, axis=axis, where=where, initial=init)

    return reduce


masked_max = _extreme_initial(jnp.max, True)
masked_min = _extreme_initial(jnp.min, False)
masked_nanmax = _extreme_initial(jnp.nanmax, True)
masked_nanmin = _extreme_initial(jnp.nanmin, False)


def masked_ptp(x: Any, axis: Any = None, where: Any = None) -> Any:
    """``max - min`` along ``axis``; masked-out elements are ignored."""
    if where is None:
        return jnp.ptp(x, axis=axis)
    return jnp.max(x, axis=axis, where=where, initial=-jnp.inf) - jnp.min(
        x, axis=axis, where=where, initial=jnp.inf
    )


def arg_reduce(fn: Callable, name: str, array: Any, axis: AxisSelector | None) -> NamedArray:
    """``argmax``-style: the index along one axis (or into the flattened array for ``None``).

    Raises:
        TypeError: if ``array`` is not a NamedArray or ``axis`` is not a single axis.
        ValueError: if the axis is missing.
    """
    check_named(array, name)
    if axis is None:
        return NamedArray._new(fn(array.array, axis=None), ())
    if not isinstance(axis, (str, Axis)):
        raise TypeError(f"{name} takes a single axis (name or Axis) or None, got {axis!r}")
    pos = array._index_of(axis)
    return NamedArray._new(fn(array.array, axis=pos), array.axes[:pos] + array.axes[pos + 1 :])


def along_axis(fn: Callable, name: str, a: Any, axis: AxisSelector, **kwargs: Any) -> NamedArray:
    """``cumsum``/``sort``-style: ``fn`` along one axis; the axes are unchanged.

    Raises:
        TypeError: if ``a`` is not a NamedArray.
        ValueError: if the axis is missing.
    """
    check_named(a, name)
    return NamedArray._new(fn(a.array, axis=a._index_of(axis), **kwargs), a.axes, a._names)

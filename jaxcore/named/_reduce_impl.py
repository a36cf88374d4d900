"""The machinery behind the named reductions of `_reductions` (which is generated).

Translating axis names to positions is planned once per ``(axes, selection)`` and cached,
and a reduction over one axis named by a string takes a shorter path still: together they
keep ``x.sum("batch")`` close to ``jnp.sum(x, axis=0)`` in eager mode.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from jaxcore.named._array import NamedArray, is_scalar_like
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


def _is_named(x: Any) -> bool:
    return isinstance(x, NamedArray)


def _unnamed(
    fn: Callable, name: str, array: Any, axis: Any, kwargs: dict, named: Callable[[Any], Any]
) -> Any:
    """Haliax's rule for a reduction given something other than a NamedArray.

    A pytree holding NamedArrays (a list, dict or module) is reduced leaf by leaf (``named``
    reduces one NamedArray leaf); a plain array or scalar goes to the ``jax.numpy`` function
    unchanged (``axis`` is then positional), so ``hax.all(x.array == y)`` works as in Haliax.

    Raises:
        TypeError: if ``array`` is not array-like, or a plain array is given a named axis.
    """
    if not hasattr(array, "shape") and not isinstance(array, (bool, int, float, complex)):
        leaves = jax.tree_util.tree_leaves(array, is_leaf=_is_named)
        if not leaves or not all(_is_named(x) or hasattr(x, "shape") for x in leaves):
            raise TypeError(f"{name} needs a NamedArray or an array, got {type(array).__name__}")
        return jax.tree_util.tree_map(
            lambda x: (
                named(x) if _is_named(x) else _unnamed(fn, name, x, axis, dict(kwargs), named)
            ),
            array,
            is_leaf=_is_named,
        )
    if axis is not None and not isinstance(axis, (int, tuple)):
        raise TypeError(
            f"{name}: a positional array takes an integer axis, got {axis!r} "
            "(name its axes with hax.named first)"
        )
    return fn(array, axis=axis, **kwargs)


def general_reduce(
    fn: Callable, name: str, array: Any, axis: AxisSelection | None, where: Any, kwargs: dict
) -> NamedArray:
    """The general reduction path: any selection, an optional ``where`` mask, extra kwargs.

    As in Haliax, a plain (positional) array is passed to ``fn`` as is, and a pytree of
    NamedArrays is reduced leaf by leaf.

    Raises:
        TypeError: if ``array`` is neither a NamedArray, an array, nor a pytree of them.
        ValueError: if a selected axis is missing.
    """
    if not isinstance(array, NamedArray):
        extra = dict(kwargs)
        if where is not None:
            kwargs["where"] = where.array if isinstance(where, NamedArray) else where
        return _unnamed(
            fn,
            name,
            array,
            axis,
            kwargs,
            lambda x: general_reduce(fn, name, x, axis, where, dict(extra)),
        )
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
    if not isinstance(array, NamedArray):
        return _unnamed(fn, name, array, axis, {}, lambda x: arg_reduce(fn, name, x, axis))
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
    if not isinstance(a, NamedArray):
        return _unnamed(
            fn, name, a, axis, kwargs, lambda x: along_axis(fn, name, x, axis, **kwargs)
        )
    return NamedArray._new(fn(a.array, axis=a._index_of(axis), **kwargs), a.axes, a._names)

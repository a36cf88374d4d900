"""Creating NamedArrays: constant fills, ranges and spaced samples along named axes."""

from __future__ import annotations

import math

import jax.numpy as jnp

from jaxcore.named._array import NamedArray, check_named
from jaxcore.named._axis import Axis, AxisSelector, AxisSpec, to_axes

_DEFAULT_NUM = 50  # numpy's default number of samples for linspace & co.


def _shape(axes) -> tuple[int, ...]:
    return tuple(a.size for a in axes)


def zeros(shape: AxisSpec, dtype=None) -> NamedArray:
    """A NamedArray of zeros with the given axes (an ``Axis``, sequence or shape dict)."""
    axes = to_axes(shape)
    return NamedArray._new(jnp.zeros(_shape(axes), dtype=dtype), axes)


def ones(shape: AxisSpec, dtype=None) -> NamedArray:
    """A NamedArray of ones with the given axes."""
    axes = to_axes(shape)
    return NamedArray._new(jnp.ones(_shape(axes), dtype=dtype), axes)


def full(shape: AxisSpec, fill_value, dtype=None) -> NamedArray:
    """A NamedArray filled with ``fill_value`` (a scalar) with the given axes."""
    axes = to_axes(shape)
    if isinstance(fill_value, NamedArray):
        if fill_value.axes:
            raise ValueError(
                f"full needs a scalar fill_value, got a NamedArray with axes {fill_value.axes}"
            )
        fill_value = fill_value.array
    return NamedArray._new(jnp.full(_shape(axes), fill_value, dtype=dtype), axes)


def zeros_like(a: NamedArray, dtype=None) -> NamedArray:
    """Zeros with ``a``'s axes and (unless given) dtype."""
    check_named(a, "zeros_like")
    return NamedArray._new(jnp.zeros_like(a.array, dtype=dtype), a.axes, a._names)


def ones_like(a: NamedArray, dtype=None) -> NamedArray:
    """Ones with ``a``'s axes and (unless given) dtype."""
    check_named(a, "ones_like")
    return NamedArray._new(jnp.ones_like(a.array, dtype=dtype), a.axes, a._names)


def full_like(a: NamedArray, fill_value, dtype=None) -> NamedArray:
    """``fill_value`` with ``a``'s axes and (unless given) dtype."""
    check_named(a, "full_like")
    return NamedArray._new(jnp.full_like(a.array, fill_value, dtype=dtype), a.axes, a._names)


def arange(axis: AxisSpec, *, start=0, step=1, dtype=None) -> NamedArray:
    """``start + step * i`` for ``i`` counting along ``axis``.

    Unlike ``jnp.arange`` the length comes from the axis, so ``start`` and ``step`` may be
    traced values. With several axes the count runs over their product in row-major
    order (``arange((X, Y))`` equals ``jnp.arange(X.size * Y.size).reshape(X.size, Y.size)``).
    """
    axes = to_axes(axis)
    n = math.prod(a.size for a in axes)
    out = start + step * jnp.arange(n)
    if dtype is not None:
        out = out.astype(dtype)
    return NamedArray._new(out.reshape(_shape(axes)), axes)


def _samples_axis(axis: AxisSelector) -> Axis:
    if isinstance(axis, str):
        return Axis(axis, _DEFAULT_NUM)
    if isinstance(axis, Axis):
        return axis
    raise TypeError(f"Expected an Axis or an axis name, got {axis!r}")


def linspace(
    axis: AxisSelector, *, start: float, stop: float, endpoint: bool = True, dtype=None
) -> NamedArray:
    """Evenly spaced samples from ``start`` to ``stop`` along ``axis`` (a name gives 50)."""
    ax = _samples_axis(axis)
    return NamedArray._new(
        jnp.linspace(start, stop, ax.size, endpoint=endpoint, dtype=dtype), (ax,)
    )


def logspace(
    axis: AxisSelector,
    *,
    start: float,
    stop: float,
    endpoint: bool = True,
    base: float = 10.0,
    dtype=None,
) -> NamedArray:
    """``base ** linspace(start, stop)`` along ``axis`` (a name gives 50 samples)."""
    ax = _samples_axis(axis)
    return NamedArray._new(
        jnp.logspace(start, stop, ax.size, endpoint=endpoint, base=base, dtype=dtype), (ax,)
    )


def geomspace(
    axis: AxisSelector, *, start: float, stop: float, endpoint: bool = True, dtype=None
) -> NamedArray:
    """Geometrically spaced samples from ``start`` to ``stop`` along ``axis``."""
    ax = _samples_axis(axis)
    return NamedArray._new(
        jnp.geomspace(start, stop, ax.size, endpoint=endpoint, dtype=dtype), (ax,)
    )


__all__ = [
    "zeros", "ones", "full", "zeros_like", "ones_like", "full_like",
    "arange", "linspace", "logspace", "geomspace",
]  # fmt: skip

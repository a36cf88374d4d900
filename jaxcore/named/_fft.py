"""Named wrappers around ``jax.numpy.fft``.

One function per transform kind; the ``axis`` argument picks the variant:

* ``None`` -- the last axis;
* a name -- that axis, at its current length;
* an ``Axis`` -- the axis of that name, transformed at length ``axis.size`` (padded or
  cropped first, as ``n=`` does in NumPy);
* a sequence of names/axes -- an n-dimensional transform over them, in that order;
* a mapping ``{axis: size}`` with ``size`` an int, an ``Axis`` or ``None`` (current length) --
  an n-dimensional transform with per-axis lengths.

Axes keep their names and positions; their sizes become whatever the transform produces
(e.g. ``n // 2 + 1`` along the last axis of an ``rfft``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import jax.numpy as jnp

from jaxcore.named._array import NamedArray
from jaxcore.named._axis import Axis, AxisSelection, AxisSelector

__all__ = [
    "fft",
    "fftfreq",
    "fftshift",
    "hfft",
    "ifft",
    "ifftshift",
    "ihfft",
    "irfft",
    "rfft",
    "rfftfreq",
]

AxisSizeLike = int | Axis | None
AxisMapping = Mapping[AxisSelector, AxisSizeLike]


def _index_of(a: NamedArray, sel: AxisSelector, fn: str) -> int:
    name = sel.name if isinstance(sel, Axis) else sel
    if not isinstance(name, str):
        raise TypeError(f"{fn}: axes are given as Axis or names, got {sel!r}")
    if name in a._names:
        return a._names.index(name)
    raise ValueError(f"{fn}: axis {name!r} is not in the array (axes: {a.axes})")


def _size_of(name: str, size: AxisSizeLike, fn: str) -> int | None:
    if size is None:
        return None
    if isinstance(size, Axis):
        if size.name != name:
            raise ValueError(
                f"{fn}: size for axis {name!r} is given as {size!r}, which has another name"
            )
        return size.size
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError(
            f"{fn}: length for axis {name!r} must be an int, an Axis or None, got {size!r}"
        )
    if size <= 0:
        raise ValueError(f"{fn}: length for axis {name!r} must be positive, got {size}")
    return size


def _resolve(a: NamedArray, axis, fn: str) -> tuple[list[int], list[int | None]]:
    """Turns the ``axis`` argument into (axis indices, requested lengths or None)."""
    if not isinstance(a, NamedArray):
        raise TypeError(f"{fn} expects a NamedArray, got {type(a).__name__}")
    if a.ndim == 0:
        raise ValueError(f"{fn} needs at least one axis; the array is a scalar")
    if axis is None:
        return [a.ndim - 1], [None]
    if isinstance(axis, str):
        return [_index_of(a, axis, fn)], [None]
    if isinstance(axis, Axis):
        return [_index_of(a, axis, fn)], [_size_of(axis.name, axis, fn)]
    if isinstance(axis, Mapping):
        items = list(axis.items())
    elif isinstance(axis, Sequence):
        items = [(sel, sel if isinstance(sel, Axis) else None) for sel in axis]
    else:
        raise TypeError(
            f"{fn}: axis must be None, a name, an Axis, a sequence or a mapping, got {axis!r}"
        )
    if not items:
        raise ValueError(f"{fn}: axis selects no axes")
    indices, sizes = [], []
    for sel, size in items:
        i = _index_of(a, sel, fn)
        if i in indices:
            raise ValueError(f"{fn}: axis {a.axes[i].name!r} is selected twice")
        indices.append(i)
        sizes.append(_size_of(a.axes[i].name, size, fn))
    return indices, sizes


def _wrap(a: NamedArray, raw) -> NamedArray:
    return NamedArray(raw, tuple(Axis(ax.name, n) for ax, n in zip(a.axes, raw.shape)))


def _make(
    name: str, one_d: Callable, n_d: Callable | None, default_last: Callable[[int], int] | None
):
    """Builds a named transform from a 1-D and (optionally) an n-D ``jnp.fft`` function.

    ``default_last`` gives the default length of the last transformed axis when other axes
    get explicit lengths (irfft's ``2 * (m - 1)``); ``None`` means "current length".
    """

    def transform(a: NamedArray, axis=None, norm: str | None = None) -> NamedArray:
        indices, sizes = _resolve(a, axis, name)
        if len(indices) == 1:
            return _wrap(a, one_d(a.array, n=sizes[0], axis=indices[0], norm=norm))
        if n_d is None:
            raise ValueError(f"{name} transforms one axis only; got {len(indices)} axes")
        if all(s is None for s in sizes):
            s = None
        else:
            s = [a.array.shape[i] if n is None else n for i, n in zip(indices, sizes)]
            if sizes[-1] is None and default_last is not None:
                s[-1] = default_last(a.array.shape[indices[-1]])
        return _wrap(a, n_d(a.array, s=s, axes=indices, norm=norm))

    transform.__name__ = name
    transform.__qualname__ = name
    transform.__doc__ = (
        f"Named version of ``jax.numpy.fft.{name}``.\n\n"
        "Args:\n"
        "  a: the input ``NamedArray``.\n"
        "  axis: ``None`` (last axis), a name, an ``Axis`` (name and transform length), a sequence\n"
        "    of them (n-dimensional transform, in order) or a mapping axis -> length.\n"
        "  norm: the normalization mode, as in ``jax.numpy.fft``.\n\n"
        "Returns:\n"
        "  The transform, with the same axis names and order; sizes as the transform gives.\n\n"
        "Raises:\n"
        "  ValueError: if an axis is missing or selected twice"
        + ("" if n_d is not None else ", or more than one axis is given")
        + ".\n"
    )
    return transform


fft = _make("fft", jnp.fft.fft, jnp.fft.fftn, None)
ifft = _make("ifft", jnp.fft.ifft, jnp.fft.ifftn, None)
rfft = _make("rfft", jnp.fft.rfft, jnp.fft.rfftn, None)
irfft = _make("irfft", jnp.fft.irfft, jnp.fft.irfftn, lambda m: 2 * (m - 1))
hfft = _make("hfft", jnp.fft.hfft, None, None)
ihfft = _make("ihfft", jnp.fft.ihfft, None, None)


def _shift(name: str, op: Callable):
    def shift(x: NamedArray, axes: AxisSelection | None = None) -> NamedArray:
        if not isinstance(x, NamedArray):
            raise TypeError(f"{name} expects a NamedArray, got {type(x).__name__}")
        idx: tuple[int, ...] | None
        if axes is None:
            idx = None
        elif isinstance(axes, (str, Axis)):
            idx = (_index_of(x, axes, name),)
        else:
            idx = tuple(_index_of(x, sel, name) for sel in axes)
        return NamedArray(op(x.array, axes=idx), x.axes)

    shift.__name__ = shift.__qualname__ = name
    shift.__doc__ = (
        f"Named version of ``jax.numpy.fft.{name}``.\n\n"
        "Args:\n"
        "  x: the input ``NamedArray``.\n"
        "  axes: the axes to shift (names or ``Axis``); ``None`` shifts all of them.\n\n"
        "Returns:\n"
        "  The shifted array, same axes.\n"
    )
    return shift


fftshift = _shift("fftshift", jnp.fft.fftshift)
ifftshift = _shift("ifftshift", jnp.fft.ifftshift)


def fftfreq(axis: Axis, d: float = 1.0) -> NamedArray:
    """Named ``jax.numpy.fft.fftfreq``: the sample frequencies of an ``axis.size``-point FFT.

    Raises:
      TypeError: if ``axis`` is not an ``Axis`` (its size is needed).
    """
    if not isinstance(axis, Axis):
        raise TypeError(f"fftfreq needs an Axis (name and size), got {axis!r}")
    return NamedArray(jnp.fft.fftfreq(axis.size, d), (axis,))


def rfftfreq(axis: Axis, d: float = 1.0) -> NamedArray:
    """Named ``jax.numpy.fft.rfftfreq``; the result axis has ``axis.size // 2 + 1`` entries.

    Raises:
      TypeError: if ``axis`` is not an ``Axis`` (its size is needed).
    """
    if not isinstance(axis, Axis):
        raise TypeError(f"rfftfreq needs an Axis (name and size), got {axis!r}")
    raw = jnp.fft.rfftfreq(axis.size, d)
    return NamedArray(raw, (Axis(axis.name, raw.shape[0]),))

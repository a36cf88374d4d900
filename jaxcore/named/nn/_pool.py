"""Pooling over named window axes: ``max_pool``, ``min_pool``, ``mean_pool`` and ``pool``.

``Window`` names the pooled axes and gives the window size of each (an ``Axis``, a sequence
of them, or a ``{name: size}`` dict). ``stride`` and ``padding`` follow ``Window``'s order;
the other axes of the input are untouched. The result keeps the input's axis order, each
pooled axis resized to ``(n + lo + hi - size) // stride + 1`` (rounded up with
``use_ceil``). One ``jax.lax.reduce_window`` does the work.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxcore.named import _ops
from jaxcore.named._array import NamedArray
from jaxcore.named._axis import Axis, AxisSpec

__all__ = ["max_pool", "mean_pool", "min_pool", "pool"]

Padding = str | int | Sequence[int] | Sequence[tuple[int, int]]
""""SAME", "VALID", an int for every side, or one int / (low, high) pair per window axis."""

DEFAULT_PADDING = "VALID"


def _describe(axes) -> str:
    return "(" + ", ".join(f"{a.name}={a.size}" for a in axes) + ")"


def _window(fname: str, window: AxisSpec) -> dict[str, int]:
    if isinstance(window, Axis):
        items: list[tuple[str, Any]] = [(window.name, window.size)]
    elif isinstance(window, Mapping):
        items = [(k.name if isinstance(k, Axis) else k, v) for k, v in window.items()]
    elif isinstance(window, Sequence) and not isinstance(window, str):
        items = []
        for a in window:
            if not isinstance(a, Axis):
                raise TypeError(
                    f"{fname}: Window entries must be Axis objects (name and window size), got {a!r}"
                )
            items.append((a.name, a.size))
    else:
        raise TypeError(
            f"{fname}: Window must be an Axis, axes or a {{name: size}} dict, got {window!r}"
        )
    out: dict[str, int] = {}
    for name, size in items:
        if name in out:
            raise ValueError(f"{fname}: Window repeats the axis {name!r}")
        if not isinstance(size, int) or size < 1:
            raise ValueError(
                f"{fname}: window size of {name!r} must be a positive int, got {size!r}"
            )
        out[name] = size
    if not out:
        raise ValueError(f"{fname}: Window needs at least one axis")
    return out


def _strides(fname: str, stride, names: list[str]) -> list[int]:
    if stride is None:
        return [1] * len(names)
    vals = [stride] if isinstance(stride, int) else list(stride)
    if len(vals) == 1:
        vals = vals * len(names)
    if len(vals) != len(names) or not all(isinstance(v, int) and v >= 1 for v in vals):
        raise ValueError(
            f"{fname}: stride must be a positive int or one per window axis {tuple(names)}, got {stride!r}"
        )
    return vals


def _pads(
    fname, padding: Padding, names, sizes, window, strides, use_ceil
) -> list[tuple[int, int]]:
    if isinstance(padding, str):
        up = padding.upper()
        if up == "VALID":
            pads = [(0, 0)] * len(names)
        elif up == "SAME":
            pads = list(lax.padtype_to_pads(sizes, window, strides, "SAME"))
        else:
            raise ValueError(f"{fname}: padding must be 'SAME' or 'VALID', got {padding!r}")
    elif isinstance(padding, int):
        pads = [(padding, padding)] * len(names)
    else:
        entries = list(padding)
        if len(entries) != len(names):
            raise ValueError(
                f"{fname}: padding needs one entry per window axis {tuple(names)}, got {padding!r}"
            )
        pads = []
        for p in entries:
            if isinstance(p, int):
                pads.append((p, p))
            elif isinstance(p, (tuple, list)) and len(p) == 2:
                pads.append((int(p[0]), int(p[1])))
            else:
                raise ValueError(
                    f"{fname}: each padding entry must be an int or a (low, high) pair, got {p!r}"
                )
    if use_ceil:
        # grow the high side so the last, partial window is kept (ceil instead of floor)
        pads = [
            (lo, hi + (s - (n + lo + hi - k) % s) % s)
            for (lo, hi), n, k, s in zip(pads, sizes, window, strides)
        ]
    return [(int(lo), int(hi)) for lo, hi in pads]


def _plan(fname: str, window: AxisSpec, inputs: NamedArray, stride, padding, use_ceil):
    if not isinstance(inputs, NamedArray):
        raise TypeError(f"{fname} needs a NamedArray input, got {type(inputs).__name__}")
    win = _window(fname, window)
    names = list(win)
    for n in names:
        if n not in inputs._names:
            raise ValueError(
                f"{fname}: input with axes {_describe(inputs.axes)} lacks the window axis {n!r}"
            )
    sizes = [inputs.axes[inputs._names.index(n)].size for n in names]
    ks = [win[n] for n in names]
    strides = _strides(fname, stride, names)
    pads = _pads(fname, padding, names, sizes, ks, strides, use_ceil)
    for n, size, k, (lo, hi) in zip(names, sizes, ks, pads):
        if k > size + lo + hi:
            raise ValueError(
                f"{fname}: window {k} on axis {n!r} is larger than the axis ({size}) with its "
                f"padding ({lo}, {hi})"
            )
    dims, st, pd = [], [], []
    for ax in inputs.axes:
        if ax.name in win:
            i = names.index(ax.name)
            dims.append(ks[i])
            st.append(strides[i])
            pd.append(pads[i])
        else:
            dims.append(1)
            st.append(1)
            pd.append((0, 0))
    return tuple(dims), tuple(st), tuple(pd)


def _out_axes(inputs: NamedArray, y_shape) -> tuple[Axis, ...]:
    return tuple(
        ax if ax.size == n else Axis(ax.name, int(n)) for ax, n in zip(inputs.axes, y_shape)
    )


_REDUCERS: dict[Any, Callable] = {}


def pool(
    Window: AxisSpec,  # noqa: N803 - Haliax's name
    inputs: NamedArray,
    init: Any,
    reduce_fn: Callable[[Any, Any], Any],
    stride: int | Sequence[int] | None = None,
    padding: Padding = DEFAULT_PADDING,
    use_ceil: bool = False,
) -> NamedArray:
    """Reduces every window of ``inputs`` with ``reduce_fn`` starting from ``init``.

    Args:
      Window: the pooled axes with their window sizes.
      inputs: the input (any other axes are left alone).
      init: the reduction's identity (e.g. ``-inf`` for max).
      reduce_fn: a binary reduction, e.g. ``jax.lax.max`` (``hax.max``, ``hax.min``,
        ``hax.sum`` and ``hax.prod`` are understood too); JAX differentiates only max,
        min and add.
      stride: an int, or one per window axis; default 1.
      padding: "VALID" (default), "SAME", an int, or one int / ``(low, high)`` pair per
        window axis.
      use_ceil: round the output size up (keep a last, partial window).

    Raises:
      ValueError: naming the axis, if a window axis is missing from ``inputs``; on a
        stride or padding of the wrong length.
    """
    return _pool("pool", Window, inputs, init, reduce_fn, stride, padding, use_ceil)


def _pool(fname, window, inputs, init, reduce_fn, stride, padding, use_ceil) -> NamedArray:
    dims, strides, pads = _plan(fname, window, inputs, stride, padding, use_ceil)
    fn = _reducer(reduce_fn)
    # a NumPy init lets JAX recognize max/min/add windows and differentiate them
    y = lax.reduce_window(inputs.array, np.asarray(init, inputs.dtype), fn, dims, strides, pads)
    return NamedArray._new(y, _out_axes(inputs, y.shape))


def _reducer(fn: Callable) -> Callable:
    if not _REDUCERS:
        for name, prim in (("max", lax.max), ("min", lax.min), ("sum", lax.add), ("prod", lax.mul)):
            f = getattr(_ops, name, None)
            if f is not None:
                _REDUCERS[f] = prim
    return _REDUCERS.get(fn, fn)


def _lowest(dtype) -> Any:
    if jnp.issubdtype(dtype, jnp.inexact):
        return -jnp.inf
    if jnp.issubdtype(dtype, jnp.bool_):
        return False
    return jnp.iinfo(dtype).min


def _highest(dtype) -> Any:
    if jnp.issubdtype(dtype, jnp.inexact):
        return jnp.inf
    if jnp.issubdtype(dtype, jnp.bool_):
        return True
    return jnp.iinfo(dtype).max


def max_pool(
    Window: AxisSpec,  # noqa: N803 - Haliax's name
    inputs: NamedArray,
    stride: int | Sequence[int] | None = None,
    padding: Padding = DEFAULT_PADDING,
    use_ceil: bool = False,
) -> NamedArray:
    """The maximum of every window (padding never wins). Arguments as ``pool``."""
    init = _lowest(inputs.dtype) if isinstance(inputs, NamedArray) else -jnp.inf
    return _pool("max_pool", Window, inputs, init, lax.max, stride, padding, use_ceil)


def min_pool(
    Window: AxisSpec,  # noqa: N803 - Haliax's name
    inputs: NamedArray,
    stride: int | Sequence[int] | None = None,
    padding: Padding = DEFAULT_PADDING,
    use_ceil: bool = False,
) -> NamedArray:
    """The minimum of every window (padding never wins). Arguments as ``pool``."""
    init = _highest(inputs.dtype) if isinstance(inputs, NamedArray) else jnp.inf
    return _pool("min_pool", Window, inputs, init, lax.min, stride, padding, use_ceil)


def mean_pool(
    Window: AxisSpec,  # noqa: N803 - Haliax's name
    inputs: NamedArray,
    stride: int | Sequence[int] | None = None,
    padding: Padding = DEFAULT_PADDING,
    *,
    use_ceil: bool = False,
    count_include_pad: bool = False,
) -> NamedArray:
    """The mean of every window. Arguments as ``pool``.

    Args:
      count_include_pad: divide by the full window size even where the window overlaps
        padding; by default only the real elements are counted.
    """
    total = _pool("mean_pool", Window, inputs, 0, lax.add, stride, padding, use_ceil)
    if count_include_pad:
        size = math.prod(_window("mean_pool", Window).values())
        return NamedArray._new(total.array / size, total.axes)
    # count the real elements under each window: pool a ones array over the window axes only
    dims, strides, pads = _plan("mean_pool", Window, inputs, stride, padding, use_ceil)
    keep = [i for i, d in enumerate(dims) if d > 1 or strides[i] > 1 or pads[i] != (0, 0)]
    shape = tuple(inputs.axes[i].size if i in keep else 1 for i in range(len(dims)))
    ones = jnp.ones(shape, total.dtype)
    counts = lax.reduce_window(ones, np.asarray(0, total.dtype), lax.add, dims, strides, pads)
    return NamedArray._new(total.array / jax.lax.stop_gradient(counts), total.axes)

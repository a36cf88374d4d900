"""``Conv`` and ``ConvTranspose``: N-d convolutions over named spatial axes.

A layer names its spatial axes (``Spatial``), its input channel axis (``In``) and its output
channel axis (``Out``). Every other axis of the input is a batch axis, however many there
are and wherever they sit. The weight has axes ``(Out, In/groups, *kernel)``, the kernel
axes carrying the spatial names with the kernel's sizes. The result has the input's axes
in the input's order, with ``In`` replaced by ``Out`` and each spatial axis resized:

* ``Conv``: ``(n + lo + hi - dilation * (k - 1) - 1) // stride + 1``
* ``ConvTranspose``: ``(n - 1) * stride - lo - hi + dilation * (k - 1) + output_padding + 1``

Both run as one ``jax.lax.conv_general_dilated``: the batch axes are moved to the front and
flattened into its single batch dimension.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

import jaxcore.tree as jtree
from jaxcore.named import random as hrandom
from jaxcore.named._array import NamedArray
from jaxcore.named._axis import Axis, AxisSelection
from jaxcore.named.nn._module import module

__all__ = ["Conv", "ConvTranspose"]

_Padding = int | str | Sequence[int] | Sequence[tuple[int, int]]


def _describe(axes) -> str:
    return "(" + ", ".join(f"{a.name}={a.size}" for a in axes) + ")"


def _spatial_names(owner: str, spatial: AxisSelection) -> tuple[str, ...]:
    if isinstance(spatial, (Axis, str)):
        items: list[Any] = [spatial]
    elif isinstance(spatial, Mapping):
        items = list(spatial.keys())
    else:
        items = list(spatial)
    names = tuple(a.name if isinstance(a, Axis) else a for a in items)
    if not names:
        raise ValueError(f"{owner}: Spatial needs at least one axis")
    if not all(isinstance(n, str) for n in names):
        raise TypeError(f"{owner}: Spatial must be axes or axis names, got {spatial!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"{owner}: Spatial repeats an axis: {names}")
    return names


def _per_axis(owner: str, what: str, value: Any, names: tuple[str, ...]) -> tuple[int, ...]:
    """An int for every spatial axis (one int is used for all)."""
    vals = (value,) if isinstance(value, int) else tuple(value)
    if len(vals) == 1:
        vals = vals * len(names)
    if len(vals) != len(names) or not all(isinstance(v, int) for v in vals):
        raise ValueError(
            f"{owner}: {what} must be an int or one int per spatial axis {names}, got {value!r}"
        )
    return vals


def _padding(owner: str, padding: _Padding, names: tuple[str, ...], allow_str: bool):
    if isinstance(padding, str):
        if not allow_str:
            raise ValueError(f"{owner}: padding must be ints or (low, high) pairs, got {padding!r}")
        up = padding.upper()
        if up not in ("SAME", "VALID", "SAME_LOWER"):
            raise ValueError(
                f"{owner}: padding must be 'SAME', 'VALID', 'SAME_LOWER', ints or pairs, got {padding!r}"
            )
        return up
    if isinstance(padding, int):
        return ((padding, padding),) * len(names)
    pads = tuple(padding)
    if len(pads) == 1:
        pads = pads * len(names)
    if len(pads) != len(names):
        raise ValueError(
            f"{owner}: padding needs one entry per spatial axis {names}, got {padding!r}"
        )
    out = []
    for p in pads:
        if isinstance(p, int):
            out.append((p, p))
        elif isinstance(p, (tuple, list)) and len(p) == 2 and all(isinstance(v, int) for v in p):
            out.append((int(p[0]), int(p[1])))
        else:
            raise ValueError(f"{owner}: bad padding entry {p!r} (an int or a (low, high) pair)")
    return tuple(out)


def _init_weights(owner, key, names, In, Out, kernel_size, groups, use_bias):  # noqa: N803
    if not isinstance(In, Axis) or not isinstance(Out, Axis):
        raise TypeError(f"{owner}: In and Out must be Axis objects, got {In!r} and {Out!r}")
    if groups < 1 or In.size % groups or Out.size % groups:
        raise ValueError(f"{owner}: groups={groups} must divide both In {In} and Out {Out}")
    clash = {In.name, Out.name} & set(names)
    if clash:
        raise ValueError(f"{owner}: channel axis {sorted(clash)} is also a spatial axis {names}")
    in_group = In.resize(In.size // groups)
    kernel = tuple(Axis(n, k) for n, k in zip(names, kernel_size))
    limit = 1.0 / math.sqrt(math.prod(kernel_size) * in_group.size)
    k_w, k_b = jax.random.split(key)
    weight = hrandom.uniform(k_w, (Out, in_group, *kernel), minval=-limit, maxval=limit)
    bias = hrandom.uniform(k_b, (Out,), minval=-limit, maxval=limit) if use_bias else None
    return weight, bias


class _ConvBase:
    """The input checks and the layout shuffle ``Conv`` and ``ConvTranspose`` share."""

    Spatial: tuple[str, ...]
    In: Axis  # noqa: N815 - Haliax's name
    Out: Axis  # noqa: N815 - Haliax's name
    weight: NamedArray
    bias: NamedArray | None
    groups: int

    def _apply(self, owner: str, inputs: NamedArray) -> NamedArray:
        if not isinstance(inputs, NamedArray):
            raise TypeError(f"{owner} needs a NamedArray input, got {type(inputs).__name__}")
        names = inputs._names
        axes = inputs.axes
        for s in self.Spatial:
            if s not in names:
                raise ValueError(
                    f"{owner}: input with axes {_describe(axes)} lacks the spatial axis {s!r}"
                )
        if self.In.name not in names:
            raise ValueError(
                f"{owner}: input with axes {_describe(axes)} lacks the input channel axis {self.In.name!r}"
            )
        c = names.index(self.In.name)
        if axes[c].size != self.In.size:
            raise ValueError(
                f"{owner}: input channel axis {self.In.name!r} has size {axes[c].size}, the layer expects {self.In.size}"
            )
        if self.Out.name in names and self.Out.name != self.In.name:
            raise ValueError(
                f"{owner}: input with axes {_describe(axes)} already has the output axis {self.Out.name!r}"
            )
        spatial_idx = tuple(names.index(s) for s in self.Spatial)
        batch_idx = tuple(i for i in range(len(axes)) if i != c and i not in spatial_idx)
        perm = (*batch_idx, c, *spatial_idx)
        w_names = self.weight._names
        w_order = (w_names.index(self.Out.name), w_names.index(self.In.name)) + tuple(
            w_names.index(s) for s in self.Spatial
        )
        plan = (
            perm,
            tuple(axes[i].size for i in batch_idx),
            self.In.size,
            w_order,
            len(self.Spatial),
            self._conv_args(),
            tuple(perm.index(i) for i in range(len(axes))),
        )
        args = (
            inputs.array,
            self.weight.array,
            None if self.bias is None else self.bias.array,
        )
        if any(isinstance(a, jax.core.Tracer) for a in args):
            y = _conv_kernel(*args, plan)
        else:  # eagerly: one cached executable instead of an op-by-op dispatch
            y = _conv_jit(*args, plan)
        out_axes = tuple(
            self.Out if i == c else (Axis(ax.name, int(y.shape[i])) if i in spatial_idx else ax)
            for i, ax in enumerate(axes)
        )
        return NamedArray._new(y, out_axes)

    def _conv_args(self) -> tuple:
        """``(window_strides, padding, lhs_dilation, rhs_dilation, feature_group_count)``."""
        raise NotImplementedError


def _conv_kernel(x: jax.Array, w: jax.Array, b: jax.Array | None, plan: tuple) -> jax.Array:
    """Batch axes to the front and flattened, one ``conv_general_dilated``, axes put back."""
    perm, batch_shape, in_size, w_order, n, conv_args, inverse = plan
    strides, padding, lhs_dilation, rhs_dilation, groups = conv_args
    if perm != tuple(range(x.ndim)):
        x = jnp.transpose(x, perm)
    x = x.reshape((math.prod(batch_shape), in_size, *x.shape[len(batch_shape) + 1 :]))
    if w_order != tuple(range(w.ndim)):
        w = jnp.transpose(w, w_order)
    y = lax.conv_general_dilated(
        x,
        w.astype(x.dtype),
        window_strides=strides,
        padding=padding,
        lhs_dilation=lhs_dilation,
        rhs_dilation=rhs_dilation,
        feature_group_count=groups,
        dimension_numbers=_specs(n),
    )
    if b is not None:
        y = y + b.reshape((-1,) + (1,) * n).astype(y.dtype)
    y = y.reshape(batch_shape + y.shape[1:])
    return jnp.transpose(y, inverse) if inverse != tuple(range(y.ndim)) else y


_conv_jit = jax.jit(_conv_kernel, static_argnums=3)


def _specs(n: int) -> tuple[str, str, str]:
    """``conv_general_dilated`` layouts for (batch, channel, *n spatial) operands."""
    if n > 10:
        raise ValueError(f"convolutions over more than 10 spatial axes are not supported (got {n})")
    letters = "HWDXYZUVST"[:n]
    return "NC" + letters, "OI" + letters, "NC" + letters


@module
class Conv(_ConvBase):
    """General N-d convolution (cross-correlation, as ``jax.lax.conv_general_dilated``).

    Attributes:
      Spatial: names of the spatial axes (static).
      In: input channel axis (static).
      Out: output channel axis (static).
      weight: axes ``(Out, In/groups, *kernel)``.
      bias: axes ``(Out,)``, or ``None``.
      kernel_size, stride, dilation: one int per spatial axis (static).
      padding: ``(low, high)`` per spatial axis, or "SAME"/"VALID"/"SAME_LOWER" (static).
      groups: feature groups (static).
    """

    Spatial: tuple[str, ...] = jtree.field(static=True)  # noqa: N815 - Haliax's name
    In: Axis = jtree.field(static=True)  # noqa: N815 - Haliax's name
    Out: Axis = jtree.field(static=True)  # noqa: N815 - Haliax's name
    weight: NamedArray
    bias: NamedArray | None
    kernel_size: tuple[int, ...] = jtree.field(static=True)
    stride: tuple[int, ...] = jtree.field(static=True)
    padding: Any = jtree.field(static=True)
    dilation: tuple[int, ...] = jtree.field(static=True)
    groups: int = jtree.field(static=True)

    @staticmethod
    def init(
        Spatial: AxisSelection,  # noqa: N803 - Haliax's name
        In: Axis,  # noqa: N803 - Haliax's name
        Out: Axis,  # noqa: N803 - Haliax's name
        kernel_size: int | Sequence[int],
        *,
        stride: int | Sequence[int] = 1,
        padding: _Padding = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        use_bias: bool = True,
        key,
    ) -> Conv:
        """Weights and bias uniform in ``+-1/sqrt(prod(kernel_size) * In.size / groups)``.

        Args:
          Spatial: the spatial axes (or their names).
          In: input channels.
          Out: output channels.
          kernel_size: an int, or one per spatial axis.
          stride: an int, or one per spatial axis.
          padding: an int, one int or ``(low, high)`` pair per spatial axis, or
            "SAME"/"VALID"/"SAME_LOWER".
          dilation: kernel dilation, an int or one per spatial axis.
          groups: split the channels into this many independent groups.
          use_bias: add a bias over ``Out``.
          key: PRNG key.

        Raises:
          ValueError: on a size list of the wrong length, a bad padding, or ``groups``
            not dividing ``In`` and ``Out``.
        """
        names = _spatial_names("Conv", Spatial)
        ks = _per_axis("Conv", "kernel_size", kernel_size, names)
        st = _per_axis("Conv", "stride", stride, names)
        dl = _per_axis("Conv", "dilation", dilation, names)
        pad = _padding("Conv", padding, names, allow_str=True)
        weight, bias = _init_weights("Conv", key, names, In, Out, ks, groups, use_bias)
        return Conv(names, In, Out, weight, bias, ks, st, pad, dl, groups)

    def __call__(self, inputs: NamedArray, *, key=None) -> NamedArray:
        """Convolves ``inputs`` (axes: batch axes, ``Spatial`` and ``In``, in any order).

        Raises:
          ValueError: naming the axis, if a spatial or the ``In`` axis is missing or
            ``In`` has the wrong size, or the input already has ``Out``.
        """
        del key
        return self._apply("Conv", inputs)

    def _conv_args(self) -> tuple:
        return (self.stride, self.padding, None, self.dilation, self.groups)


@module
class ConvTranspose(_ConvBase):
    """General N-d transposed convolution (the gradient-of-``Conv`` shape map).

    Computed as a convolution of the input dilated by ``stride`` (``lhs_dilation``), padded
    by ``dilation * (k - 1) - padding`` (plus ``output_padding`` at the end).

    Attributes:
      as ``Conv``, plus ``output_padding``: extra size added at the end of each spatial
      axis (static), to pick among the input sizes a strided ``Conv`` maps to one size.
    """

    Spatial: tuple[str, ...] = jtree.field(static=True)  # noqa: N815 - Haliax's name
    In: Axis = jtree.field(static=True)  # noqa: N815 - Haliax's name
    Out: Axis = jtree.field(static=True)  # noqa: N815 - Haliax's name
    weight: NamedArray
    bias: NamedArray | None
    kernel_size: tuple[int, ...] = jtree.field(static=True)
    stride: tuple[int, ...] = jtree.field(static=True)
    padding: tuple[tuple[int, int], ...] = jtree.field(static=True)
    output_padding: tuple[int, ...] = jtree.field(static=True)
    dilation: tuple[int, ...] = jtree.field(static=True)
    groups: int = jtree.field(static=True)

    @staticmethod
    def init(
        Spatial: AxisSelection,  # noqa: N803 - Haliax's name
        In: Axis,  # noqa: N803 - Haliax's name
        Out: Axis,  # noqa: N803 - Haliax's name
        kernel_size: int | Sequence[int],
        *,
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] | Sequence[tuple[int, int]] = 0,
        output_padding: int | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        use_bias: bool = True,
        key,
    ) -> ConvTranspose:
        """As ``Conv.init``; ``padding`` is ints or pairs only, ``output_padding`` is new.

        Raises:
          ValueError: as ``Conv.init``, or if an ``output_padding`` is not smaller than
            that axis's stride or dilation.
        """
        names = _spatial_names("ConvTranspose", Spatial)
        ks = _per_axis("ConvTranspose", "kernel_size", kernel_size, names)
        st = _per_axis("ConvTranspose", "stride", stride, names)
        dl = _per_axis("ConvTranspose", "dilation", dilation, names)
        op = _per_axis("ConvTranspose", "output_padding", output_padding, names)
        pad = _padding("ConvTranspose", padding, names, allow_str=False)
        for n, o, s, d in zip(names, op, st, dl):
            if not 0 <= o < max(s, d):
                raise ValueError(
                    f"ConvTranspose: output_padding {o} on axis {n!r} must be >= 0 and smaller "
                    f"than its stride ({s}) or dilation ({d})"
                )
        weight, bias = _init_weights("ConvTranspose", key, names, In, Out, ks, groups, use_bias)
        return ConvTranspose(names, In, Out, weight, bias, ks, st, pad, op, dl, groups)

    def __call__(self, inputs: NamedArray, *, key=None) -> NamedArray:
        """Applies the transposed convolution; checks as ``Conv.__call__``."""
        del key
        return self._apply("ConvTranspose", inputs)

    def _conv_args(self) -> tuple:
        pads = tuple(
            (d * (k - 1) - lo, d * (k - 1) - hi + o)
            for k, (lo, hi), o, d in zip(
                self.kernel_size, self.padding, self.output_padding, self.dilation
            )
        )
        return ((1,) * len(self.Spatial), pads, self.stride, self.dilation, self.groups)

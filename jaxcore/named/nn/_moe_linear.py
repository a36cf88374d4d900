"""``MoELinear``: one ``In -> Out`` weight per expert, applied to rows grouped by expert.

The input's rows (every axis but ``In``, flattened in order) are sorted by expert:
``group_sizes[e]`` consecutive rows go through expert ``e``'s weight. The product is one
grouped ("ragged") matmul, ``jax.lax.ragged_dot``, instead of a loop over experts or a
dense product with every expert.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

import jaxcore.tree as jtree
from jaxcore.named import random as hrandom
from jaxcore.named._array import NamedArray
from jaxcore.named._axis import Axis
from jaxcore.named._creation import zeros
from jaxcore.named.nn._module import module

__all__ = ["MoELinear"]


def _describe(axes) -> str:
    return "(" + ", ".join(f"{a.name}={a.size}" for a in axes) + ")"


@module
class MoELinear:
    """A per-expert dense layer over grouped rows.

    Attributes:
      weight: axes ``(Experts, In, Out)`` or, with ``out_first``, ``(Experts, Out, In)``.
      bias: axes ``(Out,)`` shared by the experts, or ``None``.
      Experts: the expert axis (static).
      In: input axis (static).
      Out: output axis (static).
      use_gmm: accepted for Haliax compatibility (static); every backend runs the grouped
        product as ``jax.lax.ragged_dot``, which XLA lowers to its grouped-matmul kernel
        where the backend has one.
    """

    weight: NamedArray
    bias: NamedArray | None
    Experts: Axis = jtree.field(static=True)  # noqa: N815 - Haliax's name
    In: Axis = jtree.field(static=True)  # noqa: N815 - Haliax's name
    Out: Axis = jtree.field(static=True)  # noqa: N815 - Haliax's name
    use_gmm: bool = jtree.field(static=True, default=False)

    @staticmethod
    def init(
        Experts: Axis,  # noqa: N803 - Haliax's name
        In: Axis,  # noqa: N803 - Haliax's name
        Out: Axis,  # noqa: N803 - Haliax's name
        *,
        key,
        use_bias: bool = True,
        out_first: bool = False,
        init_scale: float = 1.0,
        use_gmm: bool = False,
    ) -> MoELinear:
        """Truncated-normal weights scaled by ``init_scale / sqrt(In.size)``, zero bias.

        Raises:
          TypeError: if an axis is not an ``Axis``.
          ValueError: if two of the axes share a name.
        """
        for what, ax in (("Experts", Experts), ("In", In), ("Out", Out)):
            if not isinstance(ax, Axis):
                raise TypeError(f"MoELinear.init: {what} must be an Axis, got {ax!r}")
        if len({Experts.name, In.name, Out.name}) != 3:
            raise ValueError(
                f"MoELinear.init: Experts {Experts}, In {In} and Out {Out} need distinct names"
            )
        axes = (Experts, Out, In) if out_first else (Experts, In, Out)
        weight = hrandom.truncated_normal(key, axes, -3, 3)
        weight = NamedArray._new(weight.array * (init_scale / math.sqrt(max(In.size, 1))), axes)
        bias = zeros(Out) if use_bias else None
        return MoELinear(weight, bias, Experts, In, Out, use_gmm=use_gmm)

    @property
    def out_first(self) -> bool:
        """Whether the weight is laid out ``(Experts, Out, In)``."""
        return self.weight._names.index(self.Out.name) < self.weight._names.index(self.In.name)

    def __call__(self, inputs: NamedArray, group_sizes: Any, *, key=None) -> NamedArray:
        """Applies expert ``e`` to its block of ``group_sizes[e]`` consecutive rows.

        Args:
          inputs: ``(..., In)``: every axis but ``In`` indexes rows (flattened in order),
            sorted by expert.
          group_sizes: integer rows per expert: a ``NamedArray`` with the ``Experts`` axis,
            or a plain array of length ``Experts.size``. Rows past ``sum(group_sizes)`` give 0.
          key: unused, for a uniform module interface.

        Returns:
          ``inputs``' axes with ``In`` replaced by ``Out`` (same place).

        Raises:
          ValueError: naming the axis, if ``inputs`` lacks ``In`` (or has the wrong size) or
            already has ``Out``, or ``group_sizes`` does not run over ``Experts``.
        """
        del key
        if not isinstance(inputs, NamedArray):
            raise TypeError(f"MoELinear needs a NamedArray input, got {type(inputs).__name__}")
        names = inputs._names
        if self.In.name not in names:
            raise ValueError(
                f"MoELinear: input with axes {_describe(inputs.axes)} lacks the input axis {self.In.name!r}"
            )
        c = names.index(self.In.name)
        if inputs.axes[c].size != self.In.size:
            raise ValueError(
                f"MoELinear: input axis {self.In.name!r} has size {inputs.axes[c].size}, the layer expects {self.In.size}"
            )
        if self.Out.name in names:
            raise ValueError(
                f"MoELinear: input with axes {_describe(inputs.axes)} already has the output axis {self.Out.name!r}"
            )
        sizes = self._group_sizes(group_sizes)
        w_names = self.weight._names
        order = (
            w_names.index(self.Experts.name),
            w_names.index(self.In.name),
            w_names.index(self.Out.name),
        )
        args = (
            inputs.array,
            self.weight.array,
            None if self.bias is None else self.bias.array,
            sizes,
        )
        plan = (c, order)
        if any(isinstance(a, jax.core.Tracer) for a in args):
            y = _moe_kernel(*args, plan)
        else:  # eagerly: one cached executable instead of an op-by-op dispatch
            y = _moe_jit(*args, plan)
        return NamedArray._new(y, inputs.axes[:c] + (self.Out,) + inputs.axes[c + 1 :])

    def _group_sizes(self, group_sizes: Any) -> jax.Array:
        if isinstance(group_sizes, NamedArray):
            if group_sizes._names != (self.Experts.name,):
                raise ValueError(
                    f"MoELinear: group_sizes must have exactly the axis {self.Experts.name!r}, got "
                    f"axes {_describe(group_sizes.axes)}"
                )
            arr = group_sizes.array
        else:
            arr = jnp.asarray(group_sizes)
        if arr.shape != (self.Experts.size,):
            raise ValueError(
                f"MoELinear: group_sizes has shape {arr.shape}, expected one count per expert "
                f"({self.Experts.name!r}: {self.Experts.size})"
            )
        if not jnp.issubdtype(arr.dtype, jnp.integer):
            raise TypeError(f"MoELinear: group_sizes must be integers, got dtype {arr.dtype}")
        return arr.astype(jnp.int32)


def _moe_kernel(x, w, b, group_sizes, plan):
    """Rows flattened to ``(m, In)``, one ``ragged_dot`` with ``(Experts, In, Out)``, bias."""
    c, order = plan
    x = jnp.moveaxis(x, c, -1)
    rows = x.shape[:-1]
    x = x.reshape((-1, x.shape[-1]))
    if order != (0, 1, 2):
        w = jnp.transpose(w, order)
    y = jax.lax.ragged_dot(x, w.astype(x.dtype), group_sizes)
    if b is not None:
        y = y + b.astype(y.dtype)
    return jnp.moveaxis(y.reshape((*rows, y.shape[-1])), -1, c)


_moe_jit = jax.jit(_moe_kernel, static_argnums=4)

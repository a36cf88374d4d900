"""``Linear``: a named dense layer whose input and output are axis specs.

The forward pass contracts the input's ``In`` axes with the weight by name. Eagerly it runs
as one cached jitted kernel (``dot_general`` + bias in a single dispatch), so a named layer
costs no more than ``jnp.dot(x, w) + b`` run op by op; under ``jit`` the same two
operations are emitted inline.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

import jaxcore.tree as jtree
from jaxcore.named import random as hrandom
from jaxcore.named import state_dict
from jaxcore.named._array import NamedArray
from jaxcore.named._axis import Axis, AxisSpec, to_axes
from jaxcore.named._creation import zeros
from jaxcore.named._dot import dot
from jaxcore.named.nn._module import module
from jaxcore.named.nn._mup import AbstractLinearReparam, LinearStandardParam

__all__ = ["Linear"]

_Tracer = jax.core.Tracer
_KERNELS: dict = {}
_KERNEL_LIMIT = 1024


def _describe(axes) -> str:
    return "(" + ", ".join(f"{a.name}={a.size}" for a in axes) + ")"


def _plan(
    x_axes: tuple[Axis, ...],
    w_axes: tuple[Axis, ...],
    in_axes: tuple[Axis, ...],
    b_axes,
    scale: float = 1,
):
    """Contraction dims, output axes and bias permutation for one layout (cached).

    ``scale`` (a muP ``active_scale``) multiplies the product before the bias is added.
    """
    key = (x_axes, w_axes, in_axes, b_axes, scale)
    hit = _KERNELS.get(key)
    if hit is not None:
        return hit
    x_names = [a.name for a in x_axes]
    w_names = [a.name for a in w_axes]
    lc, rc = [], []
    for ax in in_axes:
        if ax.name not in x_names:
            raise ValueError(
                f"Linear: input with axes {_describe(x_axes)} lacks the input axis {ax.name!r} "
                f"(In={_describe(in_axes)})"
            )
        i = x_names.index(ax.name)
        if x_axes[i].size != ax.size:
            raise ValueError(
                f"Linear: input axis {ax.name!r} has size {x_axes[i].size}, the layer expects {ax.size}"
            )
        lc.append(i)
        rc.append(w_names.index(ax.name))
    out_w = tuple(a for a in w_axes if a not in in_axes)
    clash = [a.name for a in x_axes if a.name in {o.name for o in out_w} and a not in in_axes]
    if clash:
        raise ValueError(
            f"Linear: input axes {clash} clash with the layer's output axes {_describe(out_w)}"
        )
    out_axes = tuple(a for i, a in enumerate(x_axes) if i not in lc) + out_w
    perm = None
    if b_axes is not None:
        b_names = [a.name for a in b_axes]
        perm = tuple(b_names.index(a.name) for a in out_w)
        if perm == tuple(range(len(perm))):
            perm = None
    dims = ((tuple(lc), tuple(rc)), ((), ()))
    has_bias = b_axes is not None

    def kernel(x, w, b=None):
        y = lax.dot_general(x, w, dims)
        if scale != 1:
            y = y * jnp.asarray(scale, y.dtype)
        if has_bias:
            y = y + (b if perm is None else jnp.transpose(b, perm))
        return y

    plan = (kernel, jax.jit(kernel), out_axes)
    if len(_KERNELS) >= _KERNEL_LIMIT:
        _KERNELS.pop(next(iter(_KERNELS)))
    _KERNELS[key] = plan
    return plan


@module
class Linear:
    """A dense layer mapping the ``In`` axes of its input to the ``Out`` axes.

    ``In`` and ``Out`` are axis specs (one axis or several), so a layer can take, e.g.,
    ``(Heads, HeadSize)`` to ``Embed`` without reshaping. The weight has axes
    ``Out + In`` (``out_first``, PyTorch's layout) or ``In + Out``; the result has the
    input's other axes followed by ``Out``.

    Attributes:
      weight: the weight matrix.
      bias: the bias (axes ``Out``), or ``None``.
      In: input axes (static).
      Out: output axes (static).
      dot_general: the contraction (static); ``None`` means ``jax.lax.dot_general``.
      _reparam_cls: the parametrization rule (static; ``hax.nn.mup``), ``reparam`` builds it.
    """

    weight: NamedArray
    bias: NamedArray | None
    In: Any = jtree.field(static=True)  # noqa: N815 - Haliax's name
    Out: Any = jtree.field(static=True)  # noqa: N815 - Haliax's name
    dot_general: Callable | None = jtree.field(static=True, default=None)
    _reparam_cls: type[AbstractLinearReparam] = jtree.field(
        static=True, default=LinearStandardParam
    )

    @staticmethod
    def init(
        In: AxisSpec,  # noqa: N803 - Haliax's name
        Out: AxisSpec,  # noqa: N803 - Haliax's name
        *,
        key,
        use_bias: bool = True,
        out_first: bool = True,
        dot_general: Callable | None = None,
        init_scale: float = 1.0,
        reparam_cls: type[AbstractLinearReparam] = LinearStandardParam,
    ) -> Linear:
        """Makes a layer with truncated-normal weights scaled by ``init_scale / sqrt(size(In))``.

        (The ``sqrt`` factor is ``reparam_cls.init_scale(In, Out)``: muP rules change it.)

        Args:
          In: input axes.
          Out: output axes (names distinct from ``In``).
          key: PRNG key for the weights.
          use_bias: add a zero-initialized bias over ``Out``.
          out_first: lay the weight out as ``Out + In`` (else ``In + Out``).
          dot_general: a replacement for ``jax.lax.dot_general`` (e.g. a quantized one).
          init_scale: multiplies the default scale.
          reparam_cls: the parametrization rule (``hax.nn.mup``); ``OutputLinearMup`` also
            scales the layer's output.
        """
        in_axes, out_axes = to_axes(In), to_axes(Out)
        shared = {a.name for a in in_axes} & {a.name for a in out_axes}
        if shared:
            raise ValueError(
                f"Linear.init: In and Out share axis names {sorted(shared)}; rename one side"
            )
        joint = out_axes + in_axes if out_first else in_axes + out_axes
        scale = init_scale * reparam_cls.init_scale(In, Out)
        weight = hrandom.truncated_normal(key, joint, -3, 3)
        weight = NamedArray._new(weight.array * scale, weight.axes)
        bias = zeros(out_axes) if use_bias else None
        return Linear(weight, bias, In, Out, dot_general=dot_general, _reparam_cls=reparam_cls)

    @property
    def reparam(self) -> AbstractLinearReparam:
        """The parametrization rule for this layer's axes (``hax.nn.mup``)."""
        return self._reparam_cls(self.In, self.Out)

    def _export_scale(self) -> Any:
        """The muP ``active_scale`` that Haliax folds into the exported weight (1 if none)."""
        return 1 if self._reparam_cls is LinearStandardParam else self.reparam.active_scale

    def to_state_dict(self, prefix: str | None = None) -> dict[str, Any]:
        """The layer's entries (``weight``, ``bias``); as in Haliax, a muP layer exports
        its effective weight, ``weight * active_scale``, so the export runs without muP."""
        out = state_dict.module_to_state_dict(self, prefix)
        scale = self._export_scale()
        if scale != 1:
            key = state_dict.with_prefix(prefix, "weight") or "weight"
            out[key] = out[key] * scale
        return out

    def from_state_dict(self, sd: Mapping[str, Any], prefix: str | None = None) -> Linear:
        """A copy filled from ``sd``; a muP layer divides the exported weight by its
        ``active_scale`` again (the inverse of ``to_state_dict``)."""
        scale = self._export_scale()
        if scale != 1:
            key = state_dict.with_prefix(prefix, "weight") or "weight"
            sd = {**sd, key: jnp.asarray(sd[key]) / scale}
        return state_dict.module_from_state_dict(self, sd, prefix)

    @property
    def out_first(self) -> bool:
        """Whether the weight is laid out ``Out + In`` (also for a stacked layer's weight)."""
        names = self.weight._names
        return names.index(to_axes(self.Out)[0].name) < names.index(to_axes(self.In)[0].name)

    def __call__(self, inputs: NamedArray, *, key=None) -> NamedArray:
        """Applies the layer; ``key`` is accepted (and unused) for a uniform module interface."""
        del key
        if not isinstance(inputs, NamedArray):
            raise TypeError(f"Linear needs a NamedArray input, got {type(inputs).__name__}")
        in_axes = to_axes(self.In)
        scale = 1 if self._reparam_cls is LinearStandardParam else self.reparam.active_scale
        if self.dot_general is not None:
            out = dot(inputs, self.weight, axis=in_axes, dot_general=self.dot_general)
            if scale != 1:
                out = out * scale
            return out if self.bias is None else out + self.bias
        b = self.bias
        kernel, jitted, out_axes = _plan(
            inputs.axes, self.weight.axes, in_axes, None if b is None else b.axes, scale
        )
        args = (
            (inputs.array, self.weight.array)
            if b is None
            else (inputs.array, self.weight.array, b.array)
        )
        if any(isinstance(a, _Tracer) for a in args):
            return NamedArray._new(kernel(*args), out_axes)
        return NamedArray._new(jitted(*args), out_axes)

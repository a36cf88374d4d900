"""Layers beyond ``Linear``: ``Embedding``, ``LayerNorm``, ``RmsNorm``, ``Dropout`` and ``MLP``.

Each layer is a frozen ``jaxcore.tree`` dataclass (a pytree: arrays are leaves, axes and
hyper-parameters are static), built with a ``.init(...)`` static method and applied by
calling it, the way Haliax's equinox modules are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

import jaxcore.tree as jtree
from jaxcore.named import _ops
from jaxcore.named import random as hrandom
from jaxcore.named._array import NamedArray
from jaxcore.named._axis import Axis, AxisSelection, AxisSpec, to_axes
from jaxcore.named._creation import ones, zeros
from jaxcore.named._dot import dot
from jaxcore.named._indexing import take
from jaxcore.named.nn._activations import relu
from jaxcore.named.nn._linear import Linear
from jaxcore.named.nn._module import module
from jaxcore.named.nn._mup import AbstractEmbeddingReparam, EmbeddingStandardParam

__all__ = ["MLP", "Dropout", "Embedding", "LayerNorm", "RMSNorm", "RmsNorm", "dropout"]


def _describe(axes) -> str:
    return "(" + ", ".join(f"{a.name}={a.size}" for a in axes) + ")"


# ----------------------------------------------------------------------- Embedding


@module
class Embedding:
    """A lookup table from token ids (``Vocab``) to vectors (``Embed``).

    Attributes:
      weight: the table, axes ``(Vocab, Embed)``.
      Vocab: the vocabulary axis (static).
      Embed: the embedding axis (static).
      _reparam_cls: the parametrization rule (static; ``hax.nn.mup``), ``reparam`` builds it.
    """

    weight: NamedArray
    Vocab: Axis = jtree.field(static=True)  # noqa: N815 - Haliax's name
    Embed: Any = jtree.field(static=True)  # noqa: N815 - Haliax's name
    _reparam_cls: type[AbstractEmbeddingReparam] = jtree.field(
        static=True, default=EmbeddingStandardParam
    )

    @staticmethod
    def init(
        Vocab: Axis,  # noqa: N803 - Haliax's name
        Embed: AxisSpec,  # noqa: N803 - Haliax's name
        *,
        key,
        init_scale: float = 1.0,
        reparam_cls: type[AbstractEmbeddingReparam] = EmbeddingStandardParam,
    ) -> Embedding:
        """Truncated-normal table scaled by ``init_scale / size(Embed)``, as Haliax's.

        (The ``1 / size(Embed)`` factor is ``reparam_cls.init_scale(Vocab, Embed)``:
        ``EmbeddingMup`` makes it 1 and scales ``unembed`` instead.)
        """
        embed = to_axes(Embed)
        scale = init_scale * reparam_cls.init_scale(Vocab, embed)
        weight = hrandom.truncated_normal(key, (Vocab, *embed), -3, 3)
        weight = NamedArray._new(weight.array * scale, weight.axes)
        return Embedding(weight, Vocab, Embed, reparam_cls)

    @property
    def reparam(self) -> AbstractEmbeddingReparam:
        """The parametrization rule for this table's axes (``hax.nn.mup``)."""
        return self._reparam_cls(self.Embed, self.Vocab)

    def embed(self, input_ids: NamedArray) -> NamedArray:
        """Rows of the table for integer ``input_ids``: axes ``input_ids.axes + Embed``."""
        if not isinstance(input_ids, NamedArray):
            raise TypeError(
                f"Embedding.embed needs named token ids, got {type(input_ids).__name__}"
            )
        if not jnp.issubdtype(input_ids.dtype, jnp.integer):
            raise TypeError(f"Embedding.embed needs integer token ids, got dtype {input_ids.dtype}")
        return take(self.weight, self.Vocab, input_ids)

    def __call__(self, input_ids: NamedArray, *, key=None) -> NamedArray:
        """Same as ``embed``."""
        del key
        return self.embed(input_ids)

    def unembed(self, x: NamedArray) -> NamedArray:
        """Logits over ``Vocab``: ``x`` contracted with the table along ``Embed`` (tied output layer).

        Scaled by ``reparam.unembed_active_scale`` (1 unless muP).
        """
        logits = dot(x, self.weight, axis=self.Embed)
        scale = self.reparam.unembed_active_scale
        return logits if scale == 1 else logits * scale

    def resize_embeddings(self, new_size: int, key=None) -> Embedding:
        """A table with ``new_size`` rows: old rows kept, new ones drawn like ``init`` (needs ``key``)."""
        new_vocab = self.Vocab.resize(new_size)
        old = self.weight.array
        if new_size <= self.Vocab.size:
            new = old[:new_size]
        else:
            if key is None:
                raise ValueError(
                    "Embedding.resize_embeddings: growing the table needs a key for the new rows"
                )
            embed = to_axes(self.Embed)
            extra = Embedding.init(
                Axis(self.Vocab.name, new_size - self.Vocab.size),
                embed,
                key=key,
                reparam_cls=self._reparam_cls,
            ).weight
            new = jnp.concatenate([old, extra.array.astype(old.dtype)], axis=0)
        weight = NamedArray(new, (new_vocab, *self.weight.axes[1:]))
        return Embedding(weight, new_vocab, self.Embed, self._reparam_cls)


# ----------------------------------------------------------------------- norms


def _norm_axes(fname: str, x: NamedArray, axis) -> tuple[Axis, ...]:
    axes = to_axes(axis)
    for a in axes:
        if a not in x.axes:
            raise ValueError(
                f"{fname}: input with axes {_describe(x.axes)} lacks the normalized axis {a}"
            )
    return axes


def _affine(out: NamedArray, weight, bias, dtype, x: NamedArray) -> NamedArray:
    if weight is not None:
        out = weight * out
    if bias is not None:
        out = out + bias
    if dtype is not None:
        out = out.astype(dtype)
    return out.rearrange(x.axes) if out.axes != x.axes else out


@module
class LayerNorm:
    """Layer normalization over ``axis``: ``(x - mean) / sqrt(var + eps) * weight + bias``.

    Attributes:
      axis: the normalized axis or axes (static).
      weight: scale over ``axis`` (or ``None``).
      bias: shift over ``axis`` (or ``None``).
      eps: added to the variance (static).
      dtype: result dtype, or ``None`` to keep the input's (static).
    """

    axis: Any = jtree.field(static=True)
    weight: NamedArray | None = None
    bias: NamedArray | None = None
    eps: float = jtree.field(static=True, default=1e-5)
    dtype: Any = jtree.field(static=True, default=None)

    @staticmethod
    def init(
        axis: AxisSpec,
        eps: float = 1e-5,
        use_weight: bool = True,
        use_bias: bool = True,
        dtype=None,
    ):
        """Ones for the weight, zeros for the bias."""
        return LayerNorm(
            axis, ones(axis) if use_weight else None, zeros(axis) if use_bias else None, eps, dtype
        )

    def __call__(self, x: NamedArray, *, key=None) -> NamedArray:
        """Normalizes ``x`` over ``axis``."""
        del key
        axes = _norm_axes("LayerNorm", x, self.axis)
        mean = _ops.mean(x, axes)
        var = _ops.var(x, axes)
        out = (x - mean) * _ops.rsqrt(var + self.eps)
        return _affine(out, self.weight, self.bias, self.dtype, x)


@module
class RmsNorm:
    """Root-mean-square normalization over ``axis``: ``x / sqrt(mean(x^2) + eps) * weight (+ bias)``.

    Attributes: as ``LayerNorm`` (``use_bias`` defaults to False).
    """

    axis: Any = jtree.field(static=True)
    weight: NamedArray | None = None
    bias: NamedArray | None = None
    eps: float = jtree.field(static=True, default=1e-6)
    dtype: Any = jtree.field(static=True, default=None)

    @staticmethod
    def init(
        axis: AxisSpec,
        eps: float = 1e-6,
        use_weight: bool = True,
        use_bias: bool = False,
        dtype=None,
    ):
        """Ones for the weight, zeros for the (optional) bias."""
        return RmsNorm(
            axis, ones(axis) if use_weight else None, zeros(axis) if use_bias else None, eps, dtype
        )

    def __call__(self, x: NamedArray, *, key=None) -> NamedArray:
        """Normalizes ``x`` over ``axis``."""
        del key
        axes = _norm_axes("RmsNorm", x, self.axis)
        ms = _ops.mean(_ops.square(x), axes)
        out = x * _ops.rsqrt(ms + self.eps)
        return _affine(out, self.weight, self.bias, self.dtype, x)


RMSNorm = RmsNorm


# ----------------------------------------------------------------------- dropout


def dropout(
    x: NamedArray,
    pdrop: float,
    broadcast_axes: AxisSelection | None = None,
    *,
    inference: bool,
    key=None,
) -> NamedArray:
    """Zeroes entries of ``x`` with probability ``pdrop`` and scales the rest by ``1 / (1 - pdrop)``.

    Args:
      x: the input.
      pdrop: drop probability.
      broadcast_axes: axes along which one mask value is shared (e.g. a whole position).
      inference: if True, return ``x`` unchanged.
      key: PRNG key, needed unless ``inference`` or ``pdrop == 0``.
    """
    if inference or pdrop == 0:
        return x
    if key is None:
        raise ValueError("dropout: a key is needed when training (pass key=, or inference=True)")
    if pdrop == 1:
        return _ops.where(False, x, 0) if isinstance(x, NamedArray) else x * 0
    if broadcast_axes is None:
        mask_axes = x.axes
    else:
        names = (
            {broadcast_axes.name if isinstance(broadcast_axes, Axis) else broadcast_axes}
            if isinstance(broadcast_axes, (Axis, str))
            else {a.name if isinstance(a, Axis) else a for a in broadcast_axes}
        )
        mask_axes = tuple(a for a in x.axes if a.name not in names)
    keep = hrandom.bernoulli(key, mask_axes, 1 - pdrop)
    return _ops.where(keep, x / (1 - pdrop), 0).rearrange(x.axes)


@module
class Dropout:
    """Dropout as a layer (see ``dropout``).

    Attributes:
      pdrop: drop probability (static).
      broadcast_axes: axes sharing one mask value (static).
      inference: default for the call's ``inference`` (static).
    """

    pdrop: float = jtree.field(static=True, default=0.5)
    broadcast_axes: Any = jtree.field(static=True, default=None)
    inference: bool = jtree.field(static=True, default=False)

    def __call__(self, x: NamedArray, *, inference: bool | None = None, key=None) -> NamedArray:
        """Applies dropout unless ``inference`` (the call's, else the layer's) is True."""
        inf = self.inference if inference is None else inference
        return dropout(x, self.pdrop, self.broadcast_axes, inference=inf, key=key)


# ----------------------------------------------------------------------- MLP


@module
class MLP:
    """A stack of ``Linear`` layers with an activation between them.

    Attributes:
      layers: the ``Linear`` layers, input first.
      activation: applied after every layer but the last (static).
    """

    layers: Sequence[Linear]
    activation: Callable = jtree.field(static=True, default=relu)

    @staticmethod
    def init(
        Input: AxisSpec,  # noqa: N803 - Haliax's name
        Output: AxisSpec,  # noqa: N803 - Haliax's name
        width: int | Axis,
        depth: int,
        activation: Callable = relu,
        *,
        key,
        use_bias: bool = True,
        use_final_bias: bool = True,
        out_first: bool = True,
        init_scale: float = 1.0,
    ) -> MLP:
        """``depth`` hidden layers of size ``width`` (axes named "mlp"/"mlp2" alternately).

        ``depth == 0`` is a single ``Linear(Input, Output)``.
        """
        w1 = width if isinstance(width, Axis) else Axis("mlp", width)
        w2 = w1.alias(w1.name + "2")
        keys = jax.random.split(key, depth + 1)
        shape = [Input] + [w1 if i % 2 == 0 else w2 for i in range(depth)] + [Output]
        layers = tuple(
            Linear.init(
                shape[i],
                shape[i + 1],
                key=keys[i],
                use_bias=use_bias if i < depth else use_final_bias,
                out_first=out_first,
                init_scale=init_scale,
            )
            for i in range(depth + 1)
        )
        return MLP(layers, activation)

    def __call__(self, x: NamedArray, *, key=None) -> NamedArray:
        """Applies the layers, with ``activation`` between them."""
        del key
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.layers[-1](x)

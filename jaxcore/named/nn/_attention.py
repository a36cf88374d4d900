"""Dot-product attention over named axes, and the usual masks.

Queries and keys share the head-size axis (``Key``) by name; the attended-to axes
(``KPos``) must be named differently from the query's positions (rename one side, e.g.
``"position"`` -> ``"key_position"``). Masks and biases broadcast by name, so a
``(QPos, KPos)`` mask applies to every head and batch element.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from jaxcore.named import _ops
from jaxcore.named import random as hrandom
from jaxcore.named._array import NamedArray
from jaxcore.named._axis import Axis, AxisSelection, AxisSelector, AxisSpec
from jaxcore.named._creation import arange
from jaxcore.named._dot import dot
from jaxcore.named.nn._activations import softmax

__all__ = [
    "alibi_attention_bias",
    "causal_mask",
    "combine_masks_and",
    "combine_masks_or",
    "dot_product_attention",
    "dot_product_attention_weights",
    "dropout_mask",
    "forgetful_causal_mask",
    "mask_to_bias",
    "prefix_lm_mask",
]


def _describe(axes) -> str:
    return "(" + ", ".join(f"{a.name}={a.size}" for a in axes) + ")"


def _names(sel) -> tuple[str, ...]:
    if isinstance(sel, (Axis, str)):
        sel = (sel,)
    return tuple(a.name if isinstance(a, Axis) else a for a in sel)


def dot_product_attention_weights(
    Key: AxisSelector,  # noqa: N803 - Haliax's name
    KPos: AxisSelection,  # noqa: N803 - Haliax's name
    query: NamedArray,
    key: NamedArray,
    mask: NamedArray | None = None,
    bias: NamedArray | None = None,
    attention_dtype=None,
    precision=None,
    scaling_factor: float | None = None,
) -> NamedArray:
    """Softmax attention weights ``softmax(q . k / sqrt(size(Key)) + bias, masked)`` over ``KPos``.

    Masked-out logits are set to -1e9 before the softmax. The result has the query's axes
    (less ``Key``) and ``KPos``, in ``dot``'s order, and the query's dtype.
    """
    kname = _names(Key)[0]
    if kname not in query._names or kname not in key._names:
        raise ValueError(
            f"attention: the head-size axis {kname!r} must be in both query {_describe(query.axes)} "
            f"and key {_describe(key.axes)}"
        )
    orig = query.dtype
    if scaling_factor is None:
        scaling_factor = 1.0 / math.sqrt(query.axes[query._names.index(kname)].size)
    query = query * scaling_factor
    if attention_dtype is not None:
        query = query.astype(attention_dtype)
        key = key.astype(attention_dtype)
    weights = dot(query, key, axis=kname, precision=precision)
    if bias is not None:
        weights = weights + bias
    if mask is not None:
        order = weights.axes
        weights = _ops.where(mask, weights, -1e9)
        if set(weights.axes) == set(order) and weights.axes != order:
            weights = weights.rearrange(order)  # keep the query's layout, not the mask's
    return softmax(weights, axis=_names(KPos)).astype(orig)


def dot_product_attention(
    KPos: AxisSelection,  # noqa: N803 - Haliax's name
    Key: AxisSelector,  # noqa: N803 - Haliax's name
    query: NamedArray,
    key: NamedArray,
    value: NamedArray,
    mask: NamedArray | None = None,
    bias: NamedArray | None = None,
    attention_dtype=None,
    precision=None,
) -> NamedArray:
    """Scaled dot-product attention (single- or multi-head: any extra axes are batch axes).

    Args:
      KPos: the attended-to axis (or axes) of ``key``/``value``; not in ``query``.
      Key: the head-size axis shared by ``query`` and ``key``.
      query: ``{..., QPos, Key}``.
      key: ``{..., KPos, Key}``.
      value: ``{..., KPos, ValueSize}``.
      mask: boolean, broadcast by name against ``(..., QPos, KPos)``; False masks out.
      bias: float, added to the logits.
      attention_dtype: dtype for the logits and softmax.
      precision: ``jax.lax`` precision for the products.

    Returns:
      ``{..., QPos, ValueSize}``.

    Raises:
      TypeError: if ``query`` is not a NamedArray (the old signature took ``QPos`` first).
      ValueError: if an axis of ``KPos`` is also in ``query``, or missing from ``key``.
    """
    if not isinstance(query, NamedArray):
        raise TypeError(
            f"dot_product_attention: query must be a NamedArray, got {type(query).__name__} "
            "(the signature is (KPos, Key, query, key, value, ...))"
        )
    for name in _names(KPos):
        if name in query._names:
            raise ValueError(
                f"dot_product_attention: attended axis {name!r} is also in the query {_describe(query.axes)}; "
                "the key/value position axes must be distinct from the query's (give them another name)"
            )
        if name not in key._names:
            raise ValueError(
                f"dot_product_attention: attended axis {name!r} not found in the key {_describe(key.axes)}"
            )
    weights = dot_product_attention_weights(
        Key,
        KPos,
        query,
        key,
        mask=mask,
        bias=bias,
        attention_dtype=attention_dtype,
        precision=precision,
    )
    return dot(weights, value, axis=_names(KPos), precision=precision)


def mask_to_bias(mask: NamedArray, mask_value: float = -1e9) -> NamedArray:
    """A float bias that is 0 where ``mask`` is True and ``mask_value`` where it is False."""
    return _ops.where(mask, 0.0, mask_value)


def combine_masks_and(mask1: NamedArray | None, mask2: NamedArray | None) -> NamedArray | None:
    """``mask1 & mask2`` (either may be ``None``)."""
    if mask1 is None:
        return mask2
    if mask2 is None:
        return mask1
    return mask1 & mask2.broadcast_axis(mask1.axes)


def combine_masks_or(mask1: NamedArray | None, mask2: NamedArray | None) -> NamedArray | None:
    """``mask1 | mask2`` (either may be ``None``)."""
    if mask1 is None:
        return mask2
    if mask2 is None:
        return mask1
    return mask1 | mask2.broadcast_axis(mask1.axes)


def causal_mask(QPos: Axis, KPos: Axis, q_start: int = 0, k_start: int = 0) -> NamedArray:  # noqa: N803 - Haliax's name
    """Boolean ``(QPos, KPos)`` mask: query position ``q`` may see key positions ``k <= q``.

    ``q_start``/``k_start`` offset the positions (e.g. decoding with a cache).
    """
    if QPos.name == KPos.name:
        raise ValueError(
            f"causal_mask: QPos and KPos must have different names, both are {QPos.name!r}"
        )
    q = arange(QPos, start=q_start)
    k = arange(KPos, start=k_start).broadcast_axis(QPos)
    return q >= k


def prefix_lm_mask(
    QSeqLen: Axis, KSeqLen: Axis, prefix_len, q_start: int = 0, k_start: int = 0
) -> NamedArray:  # noqa: N803 - Haliax's name
    """Prefix-LM mask: every query sees the first ``prefix_len`` keys, and is causal after."""
    if isinstance(prefix_len, int) and prefix_len < 0:
        raise ValueError(f"prefix_lm_mask: prefix_len must be >= 0, got {prefix_len}")
    causal = causal_mask(QSeqLen, KSeqLen, q_start=q_start, k_start=k_start)
    prefix = arange(KSeqLen, start=k_start) < (prefix_len + k_start)
    return causal | prefix


def dropout_mask(axes: AxisSpec, dropout_rate: float, *, key) -> NamedArray:
    """A keep-mask: True with probability ``1 - dropout_rate`` (``hax.random.bernoulli``)."""
    return hrandom.bernoulli(key, axes, 1 - dropout_rate)


def _alibi_slopes(n_heads: int, bias_max: float) -> list[float]:
    """The per-head ALiBi slopes: a geometric sequence ending at ``2 ** -bias_max``.

    For a power-of-two head count ``n`` the slopes are ``r, r**2, ..., r**n`` with
    ``r = 2 ** (-bias_max / n)`` (the ALiBi paper uses ``bias_max = 8``). Other counts take
    the slopes of the largest power of two below, then every other slope of the next power
    of two, as the paper's reference code does.
    """

    def geometric(n: int) -> list[float]:
        ratio = 2.0 ** (-bias_max / n)
        return [ratio ** (i + 1) for i in range(n)]

    if n_heads & (n_heads - 1) == 0:
        return geometric(n_heads)
    lower = 1 << (n_heads.bit_length() - 1)
    return geometric(lower) + geometric(2 * lower)[0::2][: n_heads - lower]


def alibi_attention_bias(
    Heads: Axis,  # noqa: N803 - Haliax's axis-argument naming
    KPos: Axis,  # noqa: N803 - Haliax's axis-argument naming
    bias_max: float = 8,
    dtype=jnp.float32,
) -> NamedArray:
    """The ALiBi attention bias (Press et al., 2021): ``slope[head] * key_position``.

    Added to the attention logits (``dot_product_attention(..., bias=...)``), it makes each
    head prefer nearer keys at its own rate; softmax is shift-invariant, so the linear-in-key
    form equals the paper's relative-distance form for each query.

    Args:
        Heads: The heads axis (one slope per head).
        KPos: The key-position axis.
        bias_max: The exponent of the smallest slope, ``2 ** -bias_max``.
        dtype: The result's dtype.

    Returns:
        A NamedArray with axes ``(Heads, KPos)``.
    """
    slopes = jnp.asarray(_alibi_slopes(Heads.size, bias_max), dtype=jnp.float32)
    positions = jnp.arange(KPos.size, dtype=jnp.float32)
    return NamedArray._new((slopes[:, None] * positions[None, :]).astype(dtype), (Heads, KPos))


def forgetful_causal_mask(
    KPos: Axis,  # noqa: N803 - Haliax's axis-argument naming
    mask_prob: float,
    sample_prob: bool = True,
    *,
    key,
) -> NamedArray:
    """Forgetful causal masking (Liu et al., 2022): randomly hides key positions.

    Each key position except the first is kept with probability ``1 - p``; the first stays
    visible so that every query attends to something. Combine it with ``causal_mask``.

    Args:
        KPos: The key-position axis.
        mask_prob: The probability ``p`` of hiding a position.
        sample_prob: If True, ``p`` is itself drawn uniformly from ``[0, mask_prob)`` (as in
            the paper).
        key: A PRNG key.

    Returns:
        A boolean NamedArray with axes ``(KPos,)``: True where attention is allowed.
    """
    first = jnp.arange(KPos.size) == 0
    if mask_prob == 0:
        return NamedArray._new(jnp.ones((KPos.size,), dtype=bool), (KPos,))
    if mask_prob == 1:
        return NamedArray._new(first, (KPos,))
    p: Any = mask_prob
    if sample_prob:
        key, sub = jax.random.split(key)
        p = jax.random.uniform(sub, (), minval=0.0, maxval=mask_prob)
    keep = jax.random.bernoulli(key, 1 - p, (KPos.size,))
    return NamedArray._new(keep | first, (KPos,))

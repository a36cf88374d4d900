"""Double quantization: storing NF4's per-block absmax in 8 bits (QLoRA, section 3).

The float32 absmax costs 32 / block_size bits per weight (0.5 bit at block 64). Storing it
as int8 codes of ``absmax - offset`` (the offset is the mean absmax, centring the values) with
one float32 scale per group of `GROUP_SIZE` consecutive blocks brings that to about
8 / block_size + 32 / (block_size * GROUP_SIZE) bits. The layout, and its inverse
`expand_scales`, live in `jaxcore.kernels._dq_scales`, which kernels read.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxcore.kernels._dq_scales import GROUP_SIZE, expand_scales

__all__ = ["GROUP_SIZE", "compress_scales", "expand_scales"]


def _group_index(count: int) -> jax.Array:
    return jnp.arange(count, dtype=jnp.int32) // GROUP_SIZE


@jax.jit
def compress_scales(absmax: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Quantizes float32 block scales to int8.

    Args:
      absmax: float32 (B, N) per-block absolute maxima.

    Returns:
      ``(codes, group_scale, offset)``: int8 codes shaped like ``absmax`` (row-major groups
      of `GROUP_SIZE` entries share a scale), float32 (ceil(B * N / GROUP_SIZE),) group
      scales, and the float32 scalar offset. A group holding a non-finite absmax (a weight
      block with NaN/Inf) gets a NaN scale, so its blocks materialize as NaN; the offset
      and the other groups are computed from the finite absmax values only.
    """
    flat = absmax.astype(jnp.float32).reshape(-1)
    finite = jnp.isfinite(flat)
    count = jnp.maximum(finite.sum(), 1).astype(jnp.float32)
    finite_values = jnp.where(finite, flat, 0)
    # The mean, dividing before summing: the sum of absmax values near float32's max
    # overflowed to inf and made every block NaN. Rounding cannot take it past the largest.
    offset = jnp.minimum((finite_values / count).sum(), finite_values.max(initial=0))
    centred = jnp.where(finite, flat - offset, 0)
    n_groups = -(-flat.size // GROUP_SIZE)
    group = _group_index(flat.size)
    group_max = jnp.zeros((n_groups,), jnp.float32).at[group].max(jnp.abs(centred))
    poisoned = jnp.zeros((n_groups,), jnp.bool_).at[group].max(~finite)
    group_scale = jnp.where(poisoned, jnp.float32(jnp.nan), group_max / jnp.float32(127))
    safe = jnp.where((group_scale == 0) | poisoned, jnp.float32(1), group_scale)
    codes = jnp.clip(jnp.round(centred / safe[group]), -127, 127).astype(jnp.int8)
    return codes.reshape(absmax.shape), group_scale, offset

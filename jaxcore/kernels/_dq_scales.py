"""NF4's double-quantized block scales (QLoRA, section 3): the layout every kernel reads.

The float32 absmax of each (block, column) is stored as int8 ``codes`` of ``absmax - offset``
with one float32 scale per group of `GROUP_SIZE` consecutive codes (row-major over the
(K // block_size, N) scale array) and one float32 ``offset``:

    scale.flat[i] = min(codes.flat[i] * group_scale[i // GROUP_SIZE] + offset, float32 max)

(two roundings, no fused multiply-add; a NaN group scale makes its blocks NaN).
``jaxcore.quant`` writes this layout; kernels that take it directly read the compressed
bytes instead of a float32 array expanded on every call.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

GROUP_SIZE = 256


@jax.jit
def expand_scales(codes: jax.Array, group_scale: jax.Array, offset: jax.Array) -> jax.Array:
    """float32 block scales shaped like ``codes`` (the formula in the module docstring)."""
    flat = codes.reshape(-1).astype(jnp.float32)
    # Whole groups as rows times their scale: a broadcast, where indexing the scale of
    # every entry would be a gather (about 10x slower on CPU, and it runs every call).
    count = flat.size
    groups = group_scale.shape[0]
    padded = jnp.pad(flat, (0, groups * GROUP_SIZE - count)).reshape(groups, GROUP_SIZE)
    values = (padded * group_scale[:, None] + offset).reshape(-1)[:count]
    # A finite absmax is at most float32's max; rounding must not turn it into inf (NaN stays).
    values = jnp.minimum(values, jnp.finfo(jnp.float32).max)
    return values.reshape(codes.shape)


def group_count(codes_shape: tuple[int, ...]) -> int:
    """Entries of ``group_scale`` for scale codes of this shape."""
    size = 1
    for d in codes_shape:
        size *= int(d)
    return -(-size // GROUP_SIZE)

"""``nf4xf32_to_f32``: NF4 code indices to their float32 values."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxcore.kernels import NF4_CODE


def nf4xf32_to_f32(x) -> jax.Array:
    """Returns the float32 NF4 value of each code index in ``x`` (0..15).

    eformer's function of this name evaluates a degree-5 polynomial fitted to the NF4
    table (fast on TPUs, off by up to a few thousandths); jaxcore returns the table
    values themselves (`jaxcore.kernels.NF4_CODE`), which is what the quantized arrays
    decode to. Codes given as floats are rounded; all are clipped to 0..15.

    Args:
      x: integer (or integral float) array of NF4 codes, any shape.

    Returns:
      float32 array of ``x``'s shape.
    """
    x = jnp.asarray(x)
    if jnp.issubdtype(x.dtype, jnp.floating):
        x = jnp.round(x)
    index = jnp.clip(x.astype(jnp.int32), 0, 15)
    return jnp.take(jnp.asarray(NF4_CODE, jnp.float32), index)

"""int8 with one scale for a whole matrix (``ArrayInt8.quantize(x, axis=(0, 1))``)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxcore.quant import _quantize


@functools.partial(jax.jit, static_argnums=1)
def quantize_int8_per_tensor(
    x: jax.Array, scale_dtype: str = "float32"
) -> tuple[jax.Array, jax.Array]:
    """Symmetric int8 of a (K, N) matrix with a single scale, absmax(x) / 127.

    The matrix is quantized as one block (the per-block quantizer on its K * N values,
    so zeros and non-finite values are treated exactly as in every other layout), and the
    scale is stored repeated per column: the per-channel layout with equal columns, which
    the kernels read unchanged.

    Returns:
      (qvalue int8 (K, N), scale (1, N) of ``scale_dtype``).
    """
    k, n = x.shape
    flat = x.reshape(k * n, 1)
    q, scale = _quantize.quantize_int8(flat, max(k * n, 1), scale_dtype)
    return q.reshape(k, n), jnp.broadcast_to(scale.reshape(1, 1), (1, n))

"""Quantizers: float (K, N) weights to the packed layouts of `jaxcore.kernels._formats`.

Blocks of ``block_size`` rows run along K (the contracted axis) for each output column, and
each block is scaled by its absolute maximum (symmetric quantization).

Non-finite weights are never turned into finite ones: a block holding a NaN gets a NaN
scale (its whole dequantized block is NaN); a block holding an infinity (and no NaN) gets an
infinite scale, its infinities keep their sign and its other entries dequantize to NaN (the
codes cannot store them next to an infinite scale). Eager and jitted calls run the same
program, so they agree bit for bit.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxcore.kernels import pack_nibbles
from jaxcore.kernels._formats import INT4_ZERO_POINT
from jaxcore.kernels._nf4 import NF4_MIDPOINTS


def block_absmax(x: jax.Array, block_size: int) -> jax.Array:
    """Absolute maximum of each block of ``block_size`` rows: (K, N) -> (K // block_size, N) float32.

    A block holding a NaN has a NaN absmax. (XLA:CPU's vectorized max reduction can drop a
    NaN, so it is propagated explicitly.)
    """
    k, n = x.shape
    blocks = jnp.abs(x.astype(jnp.float32)).reshape(k // block_size, block_size, n)
    return jnp.where(jnp.isnan(blocks).any(axis=1), jnp.float32(jnp.nan), blocks.max(axis=1))


def _normalize(x: jax.Array, absmax: jax.Array, block_size: int) -> jax.Array:
    """``x / absmax`` per block (0 where absmax is 0), exact for every finite absmax.

    Dividing by an absmax above ~8.5e37 directly can go through its reciprocal, which is
    subnormal and flushed to zero on XLA:CPU (every value became 0). Both operands are first
    multiplied by the power of two 2**-e that brings the absmax into [0.5, 1), which is exact.
    """
    _, e = jnp.frexp(jnp.where(jnp.isfinite(absmax), absmax, jnp.float32(1)))
    e = jnp.clip(e, -125, 126).astype(jnp.int32)
    pow2 = jax.lax.bitcast_convert_type((127 - e) << 23, jnp.float32)  # 2**-e, a normal float
    safe = jnp.where(absmax == 0, jnp.float32(1), absmax * pow2)
    return (x.astype(jnp.float32) * _expand_rows(pow2, block_size)) / _expand_rows(safe, block_size)


def _non_finite_codes(
    x: jax.Array, absmax: jax.Array, block_size: int, codes, inf_code, neg_inf_code, zero_code
):
    """Replaces the codes of blocks with a non-finite absmax: +-inf -> the +-1 code, else zero."""
    x = x.astype(jnp.float32)
    special = jnp.where(x == jnp.inf, inf_code, jnp.where(x == -jnp.inf, neg_inf_code, zero_code))
    return jnp.where(_expand_rows(jnp.isfinite(absmax), block_size), codes, special)


def _expand_rows(per_block: jax.Array, block_size: int) -> jax.Array:
    """Repeats each block row ``block_size`` times: (K // bs, N) -> (K, N)."""
    return jnp.repeat(per_block, block_size, axis=0)


def _rounded(scale: jax.Array, scale_dtype: str) -> jax.Array:
    """``scale`` rounded to ``scale_dtype`` (to nearest), as float32 values.

    The codes are computed against the rounded scale, so ``codes * stored scale`` is the
    nearest grid point of each weight. A scale beyond the dtype's range becomes infinite, and
    its block non-finite, like a block whose absmax is.
    """
    if scale_dtype == "float32":
        return scale
    return scale.astype(scale_dtype).astype(jnp.float32)


def _symmetric(
    x: jax.Array, block_size: int, qmax: int, scale_dtype: str = "float32"
) -> tuple[jax.Array, jax.Array]:
    """Rounds x / scale to integers in [-qmax, qmax] with scale = absmax / qmax per block
    (rounded to ``scale_dtype``); returns the codes and the scales in ``scale_dtype``."""
    absmax = block_absmax(x, block_size)
    scale = _rounded(absmax / jnp.float32(qmax), scale_dtype)
    safe = jnp.where((scale == 0) | ~jnp.isfinite(scale), jnp.float32(1), scale)
    q = jnp.clip(jnp.round(x.astype(jnp.float32) / _expand_rows(safe, block_size)), -qmax, qmax)
    # A finite absmax whose rounded scale overflowed counts as non-finite too.
    absmax = jnp.where(jnp.isfinite(scale), absmax, jnp.float32(jnp.inf))
    q = _non_finite_codes(x, absmax, block_size, q.astype(jnp.int32), qmax, -qmax, 0)
    return q, scale.astype(scale_dtype)


@functools.partial(jax.jit, static_argnums=(1, 2))
def quantize_int8(
    x: jax.Array, block_size: int, scale_dtype: str = "float32"
) -> tuple[jax.Array, jax.Array]:
    """Symmetric int8: returns (qvalue int8 (K, N), scale (K // block_size, N) of scale_dtype)."""
    q, scale = _symmetric(x, block_size, 127, scale_dtype)
    return q.astype(jnp.int8), scale


@functools.partial(jax.jit, static_argnums=(1, 2))
def quantize_int4(
    x: jax.Array, block_size: int, scale_dtype: str = "float32"
) -> tuple[jax.Array, jax.Array]:
    """Symmetric int4 in [-7, 7]: returns (qvalue uint8 (K // 2, N), scale of scale_dtype)."""
    q, scale = _symmetric(x, block_size, 7, scale_dtype)
    return pack_nibbles(q + INT4_ZERO_POINT), scale


@functools.partial(jax.jit, static_argnums=(1, 2))
def quantize_nf4(
    x: jax.Array, block_size: int, scale_dtype: str = "float32"
) -> tuple[jax.Array, jax.Array]:
    """NF4: each value / its block absmax (rounded to ``scale_dtype``) goes to the nearest
    NF4 code.

    Returns:
      (qvalue uint8 (K // 2, N) of packed code indices, absmax (K // block_size, N) of
      ``scale_dtype``).
    """
    absmax = _rounded(block_absmax(x, block_size), scale_dtype)
    normalized = _normalize(x, absmax, block_size)
    index = jnp.searchsorted(jnp.asarray(NF4_MIDPOINTS), normalized, side="left").astype(jnp.int32)
    # Codes 15 and 0 are +1 and -1, code 7 is 0 (see jaxcore.kernels.NF4_CODE).
    index = _non_finite_codes(x, absmax, block_size, index, 15, 0, 7)
    return pack_nibbles(index), absmax.astype(scale_dtype)

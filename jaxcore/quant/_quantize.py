"""Quantisers: float (K, N) weights to the packed layouts of `jaxcore.kernels._formats`.

Blocks of ``block_size`` rows run along K (the contracted axis) for each output column, and
each block is scaled by its absolute maximum (symmetric quantisation).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxcore.kernels import pack_nibbles
from jaxcore.kernels._formats import INT4_ZERO_POINT
from jaxcore.kernels._nf4 import NF4_MIDPOINTS


def block_absmax(x: jax.Array, block_size: int) -> jax.Array:
    """Absolute maximum of each block of ``block_size`` rows: (K, N) -> (K // block_size, N) float32."""
    k, n = x.shape
    blocks = jnp.abs(x.astype(jnp.float32)).reshape(k // block_size, block_size, n)
    return blocks.max(axis=1)


def _expand_rows(per_block: jax.Array, block_size: int) -> jax.Array:
    """Repeats each block row ``block_size`` times: (K // bs, N) -> (K, N)."""
    return jnp.repeat(per_block, block_size, axis=0)


def _symmetric(x: jax.Array, block_size: int, qmax: int) -> tuple[jax.Array, jax.Array]:
    """Rounds x / scale to integers in [-qmax, qmax] with scale = absmax / qmax per block."""
    scale = block_absmax(x, block_size) / jnp.float32(qmax)
    safe = jnp.where(scale == 0, jnp.float32(1), scale)
    q = jnp.round(x.astype(jnp.float32) / _expand_rows(safe, block_size))
    return jnp.clip(q, -qmax, qmax).astype(jnp.int32), scale


@functools.partial(jax.jit, static_argnums=1)
def quantize_int8(x: jax.Array, block_size: int) -> tuple[jax.Array, jax.Array]:
    """Symmetric int8: returns (qvalue int8 (K, N), scale float32 (K // block_size, N))."""
    q, scale = _symmetric(x, block_size, 127)
    return q.astype(jnp.int8), scale


@functools.partial(jax.jit, static_argnums=1)
def quantize_int4(x: jax.Array, block_size: int) -> tuple[jax.Array, jax.Array]:
    """Symmetric int4 in [-7, 7]: returns (qvalue uint8 (K // 2, N), scale float32)."""
    q, scale = _symmetric(x, block_size, 7)
    return pack_nibbles(q + INT4_ZERO_POINT), scale


@functools.partial(jax.jit, static_argnums=1)
def quantize_nf4(x: jax.Array, block_size: int) -> tuple[jax.Array, jax.Array]:
    """NF4: each value / its block absmax goes to the nearest NF4 code.

    Returns:
      (qvalue uint8 (K // 2, N) of packed code indices, absmax float32 (K // block_size, N)).
    """
    absmax = block_absmax(x, block_size)
    safe = jnp.where(absmax == 0, jnp.float32(1), absmax)
    normalised = x.astype(jnp.float32) / _expand_rows(safe, block_size)
    index = jnp.searchsorted(jnp.asarray(NF4_MIDPOINTS), normalised, side="left")
    return pack_nibbles(index), absmax

"""In-kernel decoding of quantized weight tiles (traceable by the Mosaic TPU lowering).

Mosaic vectors have no gather and only 32-bit integer arithmetic is portable across TPU
generations, so tiles are widened to int32 first, every decoded tile is float32, and the
NF4 codebook lookup is a select tree over full-tile constants.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from jaxcore.kernels import plugin_api


def codebook_lookup(idx, code: Sequence[float]):
    """``code[idx]`` as float32 for an int32 tile ``idx`` in [0, 15], without a gather."""
    return plugin_api.codebook_lookup(idx, code, jnp.float32, full_tiles=True)


def decode(q, fmt: str, code: Sequence[float] | None) -> list:
    """Decodes a qvalue tile into unscaled float32 weights, one tile per x part.

    Returns:
      ``[values]`` for int8; ``[even_rows, odd_rows]`` (low, high nibbles) for int4/NF4.
    """
    if fmt == "int8":
        return [q.astype(jnp.int32).astype(jnp.float32)]
    lo, hi = plugin_api.nibbles(q)
    if fmt == "int4":
        return [(lo - 8).astype(jnp.float32), (hi - 8).astype(jnp.float32)]
    if code is None:
        raise ValueError(f"decode: format {fmt!r} needs its codebook (code=None)")
    return [codebook_lookup(lo, code), codebook_lookup(hi, code)]


def expand_scales(s, group: int, rows: int):
    """Repeats each of the ``g`` rows of ``s`` (g, N) ``group`` times: (g * group, N).

    A sublane-aligned broadcast-and-reshape when ``group`` is a multiple of 8; otherwise
    a 0/1 expansion matmul on the MXU (exact: one non-zero term per output).
    """
    g, n = s.shape
    if group % 8 == 0:
        return jnp.broadcast_to(s[:, None, :], (g, group, n)).reshape(rows, n)
    r = jax.lax.broadcasted_iota(jnp.int32, (rows, g), 0)
    c = jax.lax.broadcasted_iota(jnp.int32, (rows, g), 1) * group
    onehot = ((r >= c) & (r < c + group)).astype(jnp.float32)
    return jnp.dot(
        onehot, s, precision=jax.lax.Precision.HIGHEST, preferred_element_type=jnp.float32
    )

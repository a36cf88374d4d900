"""In-kernel decoding of quantized weight tiles (traceable by the Triton lowering).

Only elementwise integer ops and selects are used: Triton has no vector gather, so the
NF4 codebook lookup is a 4-level select tree on the index bits.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp


def nibbles(q):
    """Splits a packed uint8 tile into (low, high) nibbles as int32 in [0, 15].

    The low nibble holds the even logical row, the high nibble the odd one.
    """
    q = q.astype(jnp.int32)
    return q & 0xF, (q >> 4) & 0xF


def codebook_lookup(idx, code: Sequence[float], dtype):
    """``code[idx]`` for an int32 tile ``idx`` in [0, 15], without a gather.

    Args:
      idx: int32 indices in [0, len(code)).
      code: the 16 code values (Python floats, baked into the kernel as constants).
      dtype: dtype of the result.

    Returns:
      A tile of ``idx``'s shape holding the selected code values.
    """
    if len(code) != 16:
        raise ValueError(f"expected a 16-entry codebook, got {len(code)} entries")
    level = [jnp.asarray(float(c), dtype) for c in code]
    bit = 0
    while len(level) > 1:
        take_odd = ((idx >> bit) & 1) == 1
        level = [
            jnp.where(take_odd, level[i + 1], level[i]) for i in range(0, len(level), 2)
        ]
        bit += 1
    return level[0]


def decode(q, fmt: str, code: Sequence[float] | None, dtype) -> list:
    """Decodes a qvalue tile into unscaled weight values, one tile per x part.

    Args:
      q: the (rows, cols) qvalue tile (int8, or packed uint8).
      fmt: ``"int8"``, ``"int4"`` or ``"nf4"``.
      code: the NF4 codebook (needed for ``"nf4"``).
      dtype: dtype of the decoded values.

    Returns:
      ``[values]`` for int8; ``[even_rows, odd_rows]`` for the packed formats, each the
      shape of ``q``, to be contracted with the even / odd columns of x.
    """
    if fmt == "int8":
        return [q.astype(dtype)]
    lo, hi = nibbles(q)
    if fmt == "int4":
        return [(lo - 8).astype(dtype), (hi - 8).astype(dtype)]
    return [codebook_lookup(lo, code, dtype), codebook_lookup(hi, code, dtype)]

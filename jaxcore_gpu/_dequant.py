"""In-kernel decoding of quantized weight tiles (traceable by the Triton lowering).

Only elementwise integer ops and selects are used: Triton has no vector gather, so the
NF4 codebook lookup is the select tree of :func:`jaxcore.kernels.plugin_api.codebook_lookup`.
"""

from __future__ import annotations

from collections.abc import Sequence

from jaxcore.kernels.plugin_api import codebook_lookup, nibbles

__all__ = ["codebook_lookup", "decode", "nibbles"]


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
    if code is None:
        raise ValueError(f"decode: format {fmt!r} needs its codebook (code=None)")
    return [codebook_lookup(lo, code, dtype), codebook_lookup(hi, code, dtype)]

"""Storage formats of quantized weights and the arithmetic that decodes them.

This module is the single source of truth for the packed layout that `jaxcore.quant`
writes and every kernel (the portable reference and the plugin kernels) reads. For a
logical (K, N) weight W, blocks of ``block_size`` rows run along K for each column n:

* ``"int8"``: ``qvalue`` int8 (K, N); W[k, n] = qvalue[k, n] * scale[k // block_size, n].
* ``"int4"``: ``qvalue`` uint8 (K // 2, N); row 2i in the low nibble, row 2i + 1 in the high
  nibble; a nibble v means q = v - 8; W = q * scale.
* ``"nf4"``: same packing; a nibble is an index into `NF4_CODE`; W = NF4_CODE[v] * scale.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxcore.kernels._nf4 import NF4_CODE

FORMATS: tuple[str, ...] = ("int8", "int4", "nf4")
PACKED_FORMATS: frozenset[str] = frozenset({"int4", "nf4"})
QVALUE_DTYPES: dict[str, np.dtype] = {
    "int8": np.dtype(np.int8),
    "int4": np.dtype(np.uint8),
    "nf4": np.dtype(np.uint8),
}
INT4_ZERO_POINT = 8


def check_format(fmt: str) -> None:
    """Raises ValueError unless ``fmt`` names a known storage format."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown quantization format {fmt!r}; expected one of {FORMATS}")


def rows_per_qvalue_row(fmt: str) -> int:
    """How many logical weight rows one stored ``qvalue`` row holds (2 for 4-bit formats)."""
    check_format(fmt)
    return 2 if fmt in PACKED_FORMATS else 1


def logical_rows(fmt: str, qvalue_rows: int) -> int:
    """The logical K of a weight whose ``qvalue`` has ``qvalue_rows`` rows."""
    return qvalue_rows * rows_per_qvalue_row(fmt)


def check_layout(fmt: str, qvalue: jax.Array, scale: jax.Array, block_size: int) -> tuple[int, int]:
    """Validates that ``qvalue``/``scale`` follow the documented layout for ``fmt``.

    Args:
      fmt: storage format name.
      qvalue: stored codes.
      scale: per-block float scales, one row per block of ``block_size`` logical rows.
      block_size: logical rows per block.

    Returns:
      The logical weight shape (K, N).

    Raises:
      ValueError: on a wrong rank, dtype or shape, naming the offending array.
    """
    check_format(fmt)
    if qvalue.ndim != 2:
        raise ValueError(f"{fmt} qvalue must be 2-D (rows, N), got shape {qvalue.shape}")
    if np.dtype(qvalue.dtype) != QVALUE_DTYPES[fmt]:
        raise ValueError(
            f"{fmt} qvalue must have dtype {QVALUE_DTYPES[fmt]}, got {np.dtype(qvalue.dtype)}"
        )
    k = logical_rows(fmt, qvalue.shape[0])
    n = qvalue.shape[1]
    if not isinstance(block_size, (int, np.integer)) or block_size <= 0 or k % block_size:
        raise ValueError(
            f"block_size={block_size!r} must be a positive divisor of K={k} "
            f"(qvalue shape {qvalue.shape}, format {fmt})"
        )
    if fmt in PACKED_FORMATS and block_size % 2:
        raise ValueError(f"{fmt} needs an even block_size, got {block_size}")
    if scale.shape != (k // block_size, n):
        raise ValueError(
            f"{fmt} scale must have shape (K // block_size, N) = {(k // block_size, n)}, "
            f"got {scale.shape}"
        )
    if not jnp.issubdtype(scale.dtype, jnp.floating):
        raise ValueError(f"scale must be floating point, got dtype {scale.dtype}")
    return k, n


def unpack_nibbles(packed: jax.Array) -> jax.Array:
    """Unpacks uint8 (R, N) into (2R, N) nibbles: row 2i from the low, 2i + 1 from the high nibble."""
    low = packed & jnp.uint8(0x0F)
    high = packed >> jnp.uint8(4)
    return jnp.stack([low, high], axis=1).reshape(2 * packed.shape[0], *packed.shape[1:])


def pack_nibbles(nibbles: jax.Array) -> jax.Array:
    """Inverse of `unpack_nibbles`: (2R, N) values in [0, 15] to uint8 (R, N)."""
    nibbles = nibbles.astype(jnp.uint8)
    return nibbles[0::2] | (nibbles[1::2] << jnp.uint8(4))


def decode_unscaled(fmt: str, qslab: jax.Array) -> jax.Array:
    """Decodes stored codes to float32 values before scaling (q for int formats, code for NF4).

    Args:
      fmt: storage format name.
      qslab: a slab of stored ``qvalue`` rows (packed for the 4-bit formats).

    Returns:
      float32 (logical rows, N) values; multiply by the block scale to get weights.
    """
    parts = decode_parts(fmt, qslab)
    if len(parts) == 1:
        return parts[0]
    # Interleave like `unpack_nibbles`: row 2i from the low nibbles, 2i + 1 from the high.
    return jnp.stack(parts, axis=1).reshape(2 * qslab.shape[0], *qslab.shape[1:])


def decode_parts(fmt: str, qslab: jax.Array) -> tuple[jax.Array, ...]:
    """Decodes stored codes without interleaving the packed rows.

    For int8 this is ``(q,)``. For the 4-bit formats it is ``(even, odd)``: the unscaled
    values of logical rows 2i (low nibbles) and 2i + 1 (high nibbles), each shaped like
    ``qslab``. Kernels contract them with the even and odd columns of the activations,
    which avoids interleaving the rows of every dequantized slab.

    Args:
      fmt: storage format name.
      qslab: a slab of stored ``qvalue`` rows.

    Returns:
      A tuple of float32 arrays shaped like ``qslab``.
    """
    check_format(fmt)
    if fmt == "int8":
        return (qslab.astype(jnp.float32),)
    halves = (qslab & jnp.uint8(0x0F), qslab >> jnp.uint8(4))
    if fmt == "int4":
        return tuple(h.astype(jnp.float32) - jnp.float32(INT4_ZERO_POINT) for h in halves)
    code = jnp.asarray(NF4_CODE)
    return tuple(code[h.astype(jnp.int32)] for h in halves)


def apply_block_scales(values: jax.Array, scale_rows: jax.Array, block_size: int) -> jax.Array:
    """Multiplies (R, N) unscaled values by their block scales, as float32.

    Args:
      values: R rows, where R is a multiple or a divisor of ``block_size``.
      scale_rows: (max(R // block_size, 1), N) scales for the blocks the rows cover.
      block_size: rows per scale row.

    Returns:
      float32 (R, N) values.
    """
    rows, n = values.shape
    if rows == 0:  # an empty weight: nothing to scale
        return values.astype(jnp.float32)
    per_scale = min(rows, block_size)
    values = values.reshape(rows // per_scale, per_scale, n)
    return (values * scale_rows.astype(jnp.float32)[:, None, :]).reshape(rows, n)


def dequantize(fmt: str, qvalue: jax.Array, scale: jax.Array, block_size: int) -> jax.Array:
    """Dequantizes a whole stored weight to float32 (K, N) (the materialized form)."""
    check_layout(fmt, qvalue, scale, block_size)
    return _dequantize_jit(fmt, qvalue, scale, block_size)


@functools.partial(jax.jit, static_argnums=(0, 3))
def _dequantize_jit(fmt, qvalue, scale, block_size):
    # One compiled program per layout, so eager materialization is one dispatch.
    return apply_block_scales(decode_unscaled(fmt, qvalue), scale, block_size)

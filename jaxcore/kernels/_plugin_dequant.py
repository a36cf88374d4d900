"""Dequantization helpers of the plugin kernels, and their XLA dequantize-then-dot path.

The in-kernel helpers (:func:`nibbles`, :func:`codebook_lookup`) use only elementwise
integer ops and selects, so both the Triton and the Mosaic TPU lowering of Pallas can
trace them: neither has a vector gather, so the NF4 codebook lookup is a 4-level select
tree on the index bits. :func:`xla_quantized_matmul` is the plain-XLA product a plugin
falls back to where no fused kernel serves a call. Part of :mod:`jaxcore.kernels.plugin_api`.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence

import jax
import jax.numpy as jnp

from jaxcore.kernels._formats import decode_parts
from jaxcore.kernels._nf4 import NF4_CODE
from jaxcore.kernels._plugin_checks import Problem, prepare_operands


def nibbles(q):
    """Splits a packed uint8 tile into (low, high) nibbles as int32 in [0, 15].

    The low nibble holds the even logical row, the high nibble the odd one.
    """
    q = q.astype(jnp.int32)
    return q & 0xF, (q >> 4) & 0xF


def codebook_lookup(idx, code: Sequence[float], dtype, *, full_tiles: bool = False):
    """``code[idx]`` for an int32 tile ``idx`` in [0, 15], without a gather.

    Args:
      idx: int32 indices in [0, len(code)).
      code: the 16 code values (Python floats, baked into the kernel as constants).
      dtype: dtype of the result.
      full_tiles: materialize each code value as a tile of ``idx``'s shape (what Mosaic
        TPU wants) instead of a scalar that the selects broadcast.

    Returns:
      A tile of ``idx``'s shape holding the selected code values.

    Raises:
      ValueError: ``code`` does not have 16 entries.
    """
    if len(code) != 16:
        raise ValueError(f"expected a 16-entry codebook, got {len(code)} entries")
    if full_tiles:
        level = [jnp.full(idx.shape, float(c), dtype) for c in code]
    else:
        level = [jnp.asarray(float(c), dtype) for c in code]
    bit = 0
    while len(level) > 1:
        take_odd = ((idx >> bit) & 1) == 1
        level = [jnp.where(take_odd, level[i + 1], level[i]) for i in range(0, len(level), 2)]
        bit += 1
    return level[0]


@functools.cache
def nf4_code() -> tuple[float, ...]:
    """`jaxcore.kernels.NF4_CODE` as Python floats, to bake into a kernel as constants."""
    return tuple(float(c) for c in NF4_CODE)


def split_activations(x, problem: Problem) -> list:
    """``[x]`` for int8; x's (even, odd) columns for the nibble-packed formats.

    The packed formats keep row 2i of the weight in the low nibble and row 2i + 1 in the
    high nibble, so the decoded low / high tiles contract with these two halves of x and
    no kernel ever re-interleaves nibbles. ``x`` may have more rows than ``problem.m``
    (a kernel that pads M).
    """
    if not problem.packed:
        return [x]
    pairs = x.reshape(x.shape[0], problem.k // 2, 2)
    return [pairs[:, :, 0], pairs[:, :, 1]]


def xla_quantized_matmul(x, qvalue, scale, *, fmt: str, block_size: int, out_dtype=None):
    """``x @ dequantize(qvalue, scale)`` as XLA's dequantize-then-dot, at HIGHEST precision.

    What a plugin's kernel computes for the calls it has no fused kernel for (an
    activation dtype the hardware's dot lacks, a shape no legal tile fits), and what its
    platform primitive lowers to on the platforms it does not serve.

    Args:
      x: activations (M, K), any floating dtype; accumulation is in float32 or wider.
      qvalue: int8 (K, N) or nibble-packed uint8 (K // 2, N).
      scale: floating (K // block_size, N) per-block scale, read as float32.
      fmt: ``"int8"``, ``"int4"`` or ``"nf4"``.
      block_size: logical weight rows per scale row.
      out_dtype: dtype of the result; defaults to ``x.dtype``.

    Returns:
      The (M, N) product in ``out_dtype``.

    Raises:
      ValueError, TypeError: operands that break the contract of ``check_problem``.
    """
    problem, scale, out_dtype = prepare_operands(
        x, qvalue, scale, fmt=fmt, block_size=block_size, out_dtype=out_dtype
    )
    rows = jnp.repeat(scale, problem.group_packed, axis=0)
    acc_dtype = jnp.promote_types(x.dtype, jnp.float32)
    acc: jax.Array = functools.reduce(
        operator.add,
        (
            jnp.dot(
                xp.astype(acc_dtype),
                v.astype(acc_dtype) * rows.astype(acc_dtype),
                precision=jax.lax.Precision.HIGHEST,
                preferred_element_type=acc_dtype,
            )
            for xp, v in zip(split_activations(x, problem), decode_parts(fmt, qvalue))
        ),
    )
    return acc.astype(out_dtype)

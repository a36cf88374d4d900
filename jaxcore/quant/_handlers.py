"""Primitive handlers that keep quantised arrays quantised under `jaxcore.implicit.implicit`.

``dot_general`` with a dense operand runs `jaxcore.kernels.quantized_matmul` (or its
transposed form) slab by slab, whichever side the quantised weight is on and whichever of
its axes is contracted, with any number of leading dimensions on the dense operand.
``transpose`` of a quantised weight just flips its blocked axis. Other contractions (batch
dimensions shared with the weight, or contracting both of its axes) are rare and fall back
to materialising the weight.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jaxcore.implicit import register
from jaxcore.kernels import quantized_matmul, quantized_matmul_transposed
from jaxcore.quant._arrays import _QuantizedArray


def _contract(
    dense, q: _QuantizedArray, dimension_numbers, precision, preferred_element_type, q_is_lhs: bool
):
    """Evaluates ``dot_general`` of a dense operand with a 2-D quantised weight.

    The dense operand's contracted axis is moved last and it is flattened to (M, C) by the
    kernel; contracting the weight's first logical axis is ``x @ W``, its second ``x @ W.T``.
    The kernels accumulate in float32 at full precision, so ``precision`` only applies to
    the dense fallback.

    Args:
      dense: the dense operand.
      q: the quantised operand.
      dimension_numbers: ``((lhs_contract, rhs_contract), (lhs_batch, rhs_batch))``.
      precision: the primitive's precision (used by the fallback only).
      preferred_element_type: the result dtype, or ``None`` for the operands' common type.
      q_is_lhs: whether ``q`` is the left operand.

    Returns:
      The ``dot_general`` result, laid out as (lhs free dims, rhs free dims).
    """
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    d_contract, q_contract = (rhs_contract, lhs_contract) if q_is_lhs else (lhs_contract, rhs_contract)
    q_batch = lhs_batch if q_is_lhs else rhs_batch
    out_dtype = preferred_element_type
    if out_dtype is None:
        out_dtype = jnp.result_type(dense.dtype, q.dtype)
    if q_batch or len(q_contract) != 1:
        w = q.materialize()
        operands = (w, dense) if q_is_lhs else (dense, w)
        return lax.dot_general(
            *operands, dimension_numbers, precision=precision, preferred_element_type=preferred_element_type
        )
    if not jnp.issubdtype(dense.dtype, jnp.floating):
        dense = dense.astype(q.dtype)  # only reachable through lax.dot_general on raw ints
    x = jnp.moveaxis(dense, d_contract[0], -1)
    if q_contract[0] == 0:
        out = quantized_matmul(x, q, preferred_element_type=out_dtype)
    else:
        out = quantized_matmul_transposed(x, q, preferred_element_type=out_dtype)
    # dot_general orders the output as (lhs free dims, rhs free dims).
    return jnp.moveaxis(out, -1, 0) if q_is_lhs else out


@register("dot_general")
def _dense_at_quantized(
    lhs: jax.Array,
    rhs: _QuantizedArray,
    *,
    dimension_numbers,
    precision=None,
    preferred_element_type=None,
    **params,
):
    return _contract(lhs, rhs, dimension_numbers, precision, preferred_element_type, q_is_lhs=False)


@register("dot_general")
def _quantized_at_dense(
    lhs: _QuantizedArray,
    rhs: jax.Array,
    *,
    dimension_numbers,
    precision=None,
    preferred_element_type=None,
    **params,
):
    return _contract(rhs, lhs, dimension_numbers, precision, preferred_element_type, q_is_lhs=True)


@register("dot_general")
def _quantized_at_quantized(
    lhs: _QuantizedArray,
    rhs: _QuantizedArray,
    *,
    dimension_numbers,
    precision=None,
    preferred_element_type=None,
    **params,
):
    # Two quantised operands: the left one is dequantised, the right one stays in the kernel.
    dense = lhs.materialize()
    return _contract(dense, rhs, dimension_numbers, precision, preferred_element_type, q_is_lhs=False)


@register("transpose")
def _transpose(operand: _QuantizedArray, *, permutation):
    if tuple(permutation) == (0, 1):
        return operand
    return operand.T

"""Primitive handlers that keep quantized arrays quantized under `jaxcore.implicit.implicit`.

``dot_general`` with a dense operand runs `jaxcore.kernels.quantized_matmul` (or its
transposed form) slab by slab, whichever side the quantized weight is on and whichever of
its matrix axes is contracted, with any number of free dimensions on the dense operand and
with a stacked weight's leading dimensions as batch dimensions (the first ones) or free
ones. ``transpose`` of the matrix axes just flips the blocked axis (indexing a stack is in
`jaxcore.quant._stacking`). Other contractions (a matrix axis as a batch dimension,
contracting both matrix axes) are rare and fall back to materializing the weight.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jaxcore.implicit import register
from jaxcore.kernels import (
    quantized_matmul,
    quantized_matmul_stacked,
    quantized_matmul_transposed,
)
from jaxcore.quant._arrays import QuantizedArray
from jaxcore.quant._layer import StackLayer


def _contract_matrix(
    dense, q: QuantizedArray | StackLayer, d_axis: int, q_axis: int, out_dtype, q_is_lhs: bool
):
    """Contracts ``dense`` axis ``d_axis`` with axis ``q_axis`` of one 2-D quantized matrix.

    The kernel flattens the dense operand's other axes to M; contracting the weight's first
    logical axis is ``x @ W``, its second ``x @ W.T``. The result is laid out like
    ``dot_general``'s: (lhs free dims, rhs free dims).
    """
    x = jnp.moveaxis(dense, d_axis, -1)
    if isinstance(q, StackLayer):  # one matrix of a stack, read where it lies
        out = quantized_matmul_stacked(
            x, q.stack, q.index, transposed=q_axis == 1, preferred_element_type=out_dtype
        )
    elif q_axis == 0:
        out = quantized_matmul(x, q, preferred_element_type=out_dtype)
    else:
        out = quantized_matmul_transposed(x, q, preferred_element_type=out_dtype)
    return jnp.moveaxis(out, -1, 0) if q_is_lhs else out


def _contract(
    dense,
    q: QuantizedArray | StackLayer,
    dimension_numbers,
    precision,
    preferred_element_type,
    q_is_lhs: bool,
):
    """Evaluates ``dot_general`` of a dense operand with a quantized weight.

    Handled without materializing: one contracted matrix axis of the weight, with any free
    dimensions on the dense side; and, for stacked weights (leading dimensions, e.g. one
    matrix per expert), those leading dimensions as batch dimensions (a prefix of them) or
    free ones, vmapping the matrix case over them. Anything else (a matrix axis as a batch
    dimension, contracting both matrix axes) materializes the weight. The kernels accumulate
    in float32 at full precision, so ``precision`` only applies to that fallback.

    Args:
      dense: the dense operand.
      q: the quantized operand.
      dimension_numbers: ``((lhs_contract, rhs_contract), (lhs_batch, rhs_batch))``.
      precision: the primitive's precision (used by the fallback only).
      preferred_element_type: the result dtype, or ``None`` for the operands' common type.
      q_is_lhs: whether ``q`` is the left operand.

    Returns:
      The ``dot_general`` result, laid out as (batch dims, lhs free dims, rhs free dims).
    """
    if isinstance(q, StackLayer) and q.keepdims:
        q = q.resolve()  # a (1, K, N) slice, rare: multiplied as the stack of one it is
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    d_contract, q_contract = (
        (rhs_contract, lhs_contract) if q_is_lhs else (lhs_contract, rhs_contract)
    )
    d_batch, q_batch = (rhs_batch, lhs_batch) if q_is_lhs else (lhs_batch, rhs_batch)
    n_lead = q.ndim - 2
    n_batch = len(q_batch)
    handled = (
        len(q_contract) == 1 and q_contract[0] >= n_lead and tuple(q_batch) == tuple(range(n_batch))
    )
    handled = handled and n_batch <= n_lead
    if not handled:
        w = q.materialize()
        lhs, rhs = (w, dense) if q_is_lhs else (dense, w)
        return lax.dot_general(
            lhs,
            rhs,
            dimension_numbers,
            precision=precision,
            preferred_element_type=preferred_element_type,
        )
    out_dtype = preferred_element_type
    if out_dtype is None:
        out_dtype = jnp.result_type(dense.dtype, q.dtype)
    if not jnp.issubdtype(dense.dtype, jnp.floating):
        dense = dense.astype(q.dtype)  # only reachable through lax.dot_general on raw ints
    # Batch dimensions go first on the dense side (in q's leading order), then get vmapped.
    free = [a for a in range(dense.ndim) if a not in d_batch]
    dense = jnp.transpose(dense, tuple(d_batch) + tuple(free))
    d_axis = free.index(d_contract[0])
    q_axis = q_contract[0] - n_lead

    def matrix(d, qm):
        return _contract_matrix(d, qm, d_axis, q_axis, out_dtype, q_is_lhs)

    # Leading dimensions of the weight that are not batch dimensions are free ones: every
    # matrix of the stack meets the whole dense operand. In the result they come with the
    # weight's free dimension (first when the weight is on the left, before it otherwise).
    n_dense_free = len(free) - 1
    for _ in range(n_lead - n_batch):
        matrix = jax.vmap(matrix, in_axes=(None, 0), out_axes=0 if q_is_lhs else n_dense_free)
    for _ in range(n_batch):
        matrix = jax.vmap(matrix)
    return matrix(dense, q)


@register("dot_general")
def _dense_at_quantized(
    lhs: jax.Array,
    rhs: QuantizedArray | StackLayer,
    *,
    dimension_numbers,
    precision=None,
    preferred_element_type=None,
    **params,
):
    return _contract(lhs, rhs, dimension_numbers, precision, preferred_element_type, q_is_lhs=False)


@register("dot_general")
def _quantized_at_dense(
    lhs: QuantizedArray | StackLayer,
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
    lhs: QuantizedArray,
    rhs: QuantizedArray,
    *,
    dimension_numbers,
    precision=None,
    preferred_element_type=None,
    **params,
):
    # Two quantized operands: the left one is dequantized, the right one stays in the kernel.
    dense = lhs.materialize()
    return _contract(
        dense, rhs, dimension_numbers, precision, preferred_element_type, q_is_lhs=False
    )


@register("transpose")
def _transpose(operand: QuantizedArray, *, permutation):
    permutation = tuple(permutation)
    lead = tuple(range(len(permutation) - 2))
    n = len(permutation)
    if permutation == tuple(range(n)):
        return operand
    if permutation == lead + (n - 1, n - 2):
        return operand.T  # swapping the matrix axes only flips the blocked axis
    return lax.transpose(operand.materialize(), permutation)

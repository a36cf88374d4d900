"""The ``vmap`` rule shared by the quantized-matmul primitives.

Every such primitive takes ``(x2d, qvalue, *scales)`` with ``x2d`` of shape (M, C) (the
scales: one float32 array, or NF4's double-quantized codes, group scales and offset) and
returns (M, R): a batch of activations against shared weights folds into M (one kernel
call); batched weights (a stack of layers under ``vmap``) run one kernel call per member
with ``jax.lax.map``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp


def matmul_batch_rule(bind: Callable[..., jax.Array]) -> Callable[..., tuple[jax.Array, int]]:
    """Returns a ``batching.primitive_batchers`` rule for the primitive bound by ``bind``.

    Args:
      bind: ``bind(x2d, qvalue, *scales, **params) -> (M, R)``, the primitive's bind.

    Returns:
      ``rule(args, dims, **params) -> (out, out_dim)``.
    """

    def rule(args: Sequence[jax.Array], dims: Sequence[int | None], **params):
        x, *weight = args
        dx, *dw = dims
        if all(d is None for d in dw):  # shared weights: fold the batch into M
            assert dx is not None  # a batching rule sees at least one batched operand
            xb = jnp.moveaxis(x, dx, 0)
            out = bind(xb.reshape(-1, xb.shape[-1]), *weight, **params)
            return out.reshape(*xb.shape[:2], out.shape[-1]), 0
        moved = [None if d is None else jnp.moveaxis(a, d, 0) for a, d in zip(args, dims)]

        def one(slices):
            it = iter(slices)
            call = [a if m is None else next(it) for a, m in zip(args, moved)]
            return bind(*call, **params)

        return jax.lax.map(one, tuple(m for m in moved if m is not None)), 0

    return rule

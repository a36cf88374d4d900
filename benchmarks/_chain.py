"""The benchmarks' chained timing call: several matmuls in one jitted program, in sequence."""

from __future__ import annotations

import jax


def chained(matmul, chain: int):
    """One jitted program of ``chain`` matmuls ``matmul(x, w)``, one per weight in its list.

    Each matmul's activations depend on the previous product (``x + 0 * y[..., :1]``, the
    same values while the products are finite), so the products run one after another, as a
    model's layers do, never side by side. An optimization barrier on ``(x, y)`` does not do
    that: XLA:CPU drops the barrier and leaves the products independent in the compiled
    program, free to run concurrently. The one small elementwise op per product stands in
    for what a layer does between its matmuls.
    """

    def run(x, weights):
        if len(weights) != chain:
            raise ValueError(f"expected {chain} weights, got {len(weights)}")
        outs = []
        for w in weights:
            y = matmul(x, w)
            outs.append(y)
            x = x + (0.0 * y[..., :1]).astype(x.dtype)
        return outs

    return jax.jit(run)

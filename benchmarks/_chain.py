"""The benchmarks' chained timing call: several matmuls in one jitted program, in sequence."""

from __future__ import annotations

import jax


def chained(matmul, chain: int):
    """One jitted program of ``chain`` matmuls ``matmul(x, w)``, one per weight in its list.

    Each matmul's activations pass an optimization barrier with the previous product, so
    the products run one after another (as a model's layers do), never side by side.
    """

    def run(x, weights):
        if len(weights) != chain:
            raise ValueError(f"expected {chain} weights, got {len(weights)}")
        outs = []
        for w in weights:
            y = matmul(x, w)
            outs.append(y)
            x, _ = jax.lax.optimization_barrier((x, y))
        return outs

    return jax.jit(run)

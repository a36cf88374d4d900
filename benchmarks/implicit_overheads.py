"""Overheads of jaxcore.implicit, as ratios to plain jax.numpy measured in the same run.

Prints, for an 8x8 float32 array:
  * an eager handled op (``implicit(lambda a: a * 3.0)`` with a registered ``mul`` handler)
    against the plain ``x * 3.0``;
  * an eager materialising fallback (``implicit(jnp.sin)``, no handler) against ``jnp.sin``;
  * tracing (``jax.make_jaxpr``) of 50 handled ops against tracing 50 plain ops;
and the storage bytes per weight of NF4 and int8 quantised weights (jaxcore.quant).

Timings are the minimum over interleaved rounds (each round times both sides back to
back), so machine load affects both sides alike. Run: ``python3 benchmarks/implicit_overheads.py``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxcore.implicit as ji  # noqa: E402


@dataclasses.dataclass
class Scaled(ji.ImplicitArray):
    """value * scale: a minimal implicit array with a ``mul`` handler."""

    value: jax.Array
    scale: float = ji.aux_field()

    def materialize(self):
        return self.value * self.scale


@ji.register("mul")
def _scaled_mul(x: Scaled, y: jax.Array, **params):
    return Scaled(x.value * y, scale=x.scale)


def _per_call(fn, number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        out = fn()
    jax.block_until_ready(jax.tree_util.tree_leaves(out))
    return (time.perf_counter() - start) / number


def compare(plain, candidate, number: int, rounds: int = 7) -> tuple[float, float]:
    """Returns the best per-call seconds of (plain, candidate), timed in interleaved rounds."""
    plain()
    candidate()
    best_plain = best_candidate = float("inf")
    for _ in range(rounds):
        best_plain = min(best_plain, _per_call(plain, number))
        best_candidate = min(best_candidate, _per_call(candidate, number))
    return best_plain, best_candidate


def _fifty_ops(a):
    for _ in range(50):
        a = a * 1.01
    return a


def _report(name: str, plain_s: float, cand_s: float, unit: str = "us", goal: float | None = None):
    scale = 1e6 if unit == "us" else 1e3
    goal_text = f"  (goal <= {goal:g}x)" if goal is not None else ""
    print(
        f"{name:<34} plain {plain_s * scale:9.1f} {unit}   implicit {cand_s * scale:9.1f} {unit}"
        f"   ratio {cand_s / plain_s:6.2f}x{goal_text}"
    )


def main() -> None:
    warnings.simplefilter("ignore", ji.MaterializationWarning)
    print(f"jax {jax.__version__}, backend {jax.default_backend()}, 8x8 float32")
    x = jnp.asarray(np.random.default_rng(0).normal(size=(8, 8)), jnp.float32)
    s = Scaled(x, scale=2.0)

    handled = ji.implicit(lambda a: a * 3.0)
    plain_s, cand_s = compare(lambda: x * 3.0, lambda: handled(s), number=200)
    _report("eager handled op (mul)", plain_s, cand_s, goal=8)

    fallback = ji.implicit(jnp.sin)
    plain_s, cand_s = compare(lambda: jnp.sin(x), lambda: fallback(s), number=200)
    _report("eager fallback (sin, materialise)", plain_s, cand_s, goal=8)

    # A fresh function per call, so neither side hits JAX's tracing cache.
    plain_s, cand_s = compare(
        lambda: jax.make_jaxpr(lambda a: _fifty_ops(a))(x),
        lambda: jax.make_jaxpr(ji.implicit(lambda a: _fifty_ops(a)))(s),
        number=5,
    )
    _report("tracing 50 handled ops", plain_s, cand_s, unit="ms")
    print(f"{'':<34} implicit tracing of 50 ops: {cand_s * 1e3:.2f} ms (goal <= 4 ms)")

    try:
        from jaxcore.quant import ArrayInt8, ArrayNF4
    except ImportError as err:  # jaxcore.quant is optional for this benchmark.
        print(f"jaxcore.quant unavailable ({err}); skipping bytes per weight")
        return
    w = jnp.asarray(np.random.default_rng(1).normal(size=(1024, 1024)), jnp.float32)
    for name, q in (
        ("NF4 (block 64)", ArrayNF4.quantize(w, block_size=64)),
        ("int8 (per channel)", ArrayInt8.quantize(w)),
    ):
        nbytes = sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree_util.tree_leaves(q))
        print(f"{name:<34} {nbytes / w.size:.4f} bytes per weight (float32: 4)")


if __name__ == "__main__":
    main()

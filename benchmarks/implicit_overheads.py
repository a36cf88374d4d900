"""Overheads of jaxcore.implicit, as ratios to plain jax.numpy measured in the same run.

Prints, for an 8x8 float32 array:
  * an eager handled op (``implicit(lambda a: a * 3.0)`` with a registered ``mul`` handler)
    against the plain ``x * 3.0``;
  * an eager materialising fallback (``implicit(jnp.sin)``, no handler) against ``jnp.sin``;
  * tracing (``jax.make_jaxpr``) of 50 handled ops against tracing 50 plain ops;
and the storage bytes per weight of NF4 and int8 quantised weights (jaxcore.quant).

Each side is timed in interleaved rounds (both sides back to back per round) and the
best round is kept, both in wall-clock time and in process CPU time; on a shared,
loaded machine the CPU-time ratio is the steadier of the two.
Run: ``python3 benchmarks/implicit_overheads.py``.
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


def _per_call(fn, number: int) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(number):
        out = fn()
    jax.block_until_ready(jax.tree_util.tree_leaves(out))
    return (time.perf_counter() - wall) / number, (time.process_time() - cpu) / number


def compare(plain, candidate, number: int, rounds: int = 7) -> dict[str, tuple[float, float]]:
    """Best per-call seconds {"wall": (plain, candidate), "cpu": (plain, candidate)}."""
    plain()
    candidate()
    best = {"wall": [float("inf")] * 2, "cpu": [float("inf")] * 2}
    for _ in range(rounds):
        for side, fn in enumerate((plain, candidate)):
            wall, cpu = _per_call(fn, number)
            best["wall"][side] = min(best["wall"][side], wall)
            best["cpu"][side] = min(best["cpu"][side], cpu)
    return {k: (v[0], v[1]) for k, v in best.items()}


def _fifty_ops(a):
    for _ in range(50):
        a = a * 1.01
    return a


def _report(name: str, times: dict[str, tuple[float, float]], unit: str = "us", goal: float | None = None):
    scale = 1e6 if unit == "us" else 1e3
    goal_text = f"   goal <= {goal:g}x" if goal is not None else ""
    for clock in ("wall", "cpu"):
        plain_s, cand_s = times[clock]
        print(
            f"{name:<34} {clock:<4} plain {plain_s * scale:9.1f} {unit}   implicit "
            f"{cand_s * scale:9.1f} {unit}   ratio {cand_s / plain_s:6.2f}x{goal_text}"
        )


def main() -> None:
    warnings.simplefilter("ignore", ji.MaterializationWarning)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"jax {jax.__version__}, backend {jax.default_backend()}, 8x8 float32, "
        f"load average {load:.2f} on {os.cpu_count()} cores"
    )
    x = jnp.asarray(np.random.default_rng(0).normal(size=(8, 8)), jnp.float32)
    s = Scaled(x, scale=2.0)

    handled = ji.implicit(lambda a: a * 3.0)
    _report("eager handled op (mul)", compare(lambda: x * 3.0, lambda: handled(s), number=500), goal=8)

    fallback = ji.implicit(jnp.sin)
    _report("eager fallback (sin, materialise)", compare(lambda: jnp.sin(x), lambda: fallback(s), number=500), goal=8)

    # A fresh function per call, so neither side hits JAX's tracing cache.
    times = compare(
        lambda: jax.make_jaxpr(lambda a: _fifty_ops(a))(x),
        lambda: jax.make_jaxpr(ji.implicit(lambda a: _fifty_ops(a)))(s),
        number=5,
    )
    _report("tracing 50 handled ops", times, unit="ms")
    print(f"{'':<34} implicit tracing of 50 ops: {times['wall'][1] * 1e3:.2f} ms wall (goal <= 4 ms)")

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

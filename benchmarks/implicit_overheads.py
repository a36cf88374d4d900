"""Overheads of jaxcore.implicit, as ratios to plain jax.numpy measured in the same run.

Prints, for an 8x8 float32 array:
  * an eager handled op (``implicit(lambda a: a * 3.0)`` with a registered ``mul`` handler)
    against the plain ``x * 3.0``;
  * an eager materializing fallback (``implicit(jnp.sin)``, no handler) against ``jnp.sin``;
  * tracing (``jax.make_jaxpr``) of 50 handled ops against tracing 50 plain ops;
and the storage bytes per weight of NF4 and int8 quantized weights (jaxcore.quant).

The issue states its goals against anchors measured on a reference machine (quax:
116 us eager handled op, 115 us fallback, 7.7 ms tracing 50 ops). When quax is
installed (``.venv/bin/pip install --require-hashes -r benchmarks/anchors_lock.txt``)
it runs in the same rounds, and the report scales jaxcore's numbers by how much
slower quax runs here than on that machine. The absolute tracing goal is also stated
through the plain jnp op, which the issue puts at ~5 us there.

Each side is timed in interleaved rounds (both sides back to back per round) and the
best round is kept, both in wall-clock time and in process CPU time; on a shared,
loaded machine the CPU-time ratio is the steadier of the two.
Run: ``python3 benchmarks/implicit_overheads.py``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402 - after the environment set-up above
import jax.numpy as jnp  # noqa: E402 - after the environment set-up above
import numpy as np  # noqa: E402 - after the environment set-up above

import jaxcore.implicit as ji  # noqa: E402 - after the environment set-up above

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _quax_anchor  # noqa: E402 - after the environment set-up above
import plot_tables  # noqa: E402 - after the environment set-up above


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


def compare(
    plain, candidate, number: int, rounds: int = 7, anchor=None
) -> dict[str, tuple[float, ...]]:
    """Best per-call seconds {"wall": (plain, candidate[, anchor]), "cpu": (...)}."""
    sides = (plain, candidate) if anchor is None else (plain, candidate, anchor)
    for fn in sides:
        fn()
    best = {"wall": [float("inf")] * len(sides), "cpu": [float("inf")] * len(sides)}
    for _ in range(rounds):
        for side, fn in enumerate(sides):
            wall, cpu = _per_call(fn, number)
            best["wall"][side] = min(best["wall"][side], wall)
            best["cpu"][side] = min(best["cpu"][side], cpu)
    return {k: tuple(v) for k, v in best.items()}


def _fifty_ops(a):
    for _ in range(50):
        a = a * 1.01
    return a


def _report(
    name: str, times: dict[str, tuple[float, ...]], unit: str = "us", goal: float | None = None
) -> tuple[str, list[float | None]]:
    """Prints the wall and CPU lines of one case; returns its plot row (the two ratios)."""
    scale = 1e6 if unit == "us" else 1e3
    goal_text = f"   goal <= {goal:g}x" if goal is not None else ""
    ratios: list[float | None] = []
    for clock in ("wall", "cpu"):
        plain_s, cand_s = times[clock][:2]
        print(
            f"{name:<34} {clock:<4} plain {plain_s * scale:9.1f} {unit}   implicit "
            f"{cand_s * scale:9.1f} {unit}   ratio {cand_s / plain_s:6.2f}x{goal_text}"
        )
        ratios.append(cand_s / plain_s)
    return name, ratios


# The anchors, measured on its reference machine with jax 0.10.2: quax's times,
# and a plain jnp op on the 8x8 array (its goal "8x plain jnp (~40 us)" puts it at ~5 us).
_QUAX_ANCHORS = {"handled": 116e-6, "fallback": 115e-6, "tracing": 7.7e-3}
_PLAIN_OP_ANCHOR_S = 40e-6 / 8
_TRACING_GOAL_S = 4e-3


def _report_anchor(name: str, key: str, times: dict[str, tuple[float, ...]], unit: str) -> None:
    """Prints jaxcore against quax measured in the same rounds, and what that means on
    the issue's reference machine (scaled by how much slower quax runs here)."""
    scale = 1e6 if unit == "us" else 1e3
    _, ours, theirs = times["cpu"]
    slowdown = theirs / _QUAX_ANCHORS[key]
    line = (
        f"{name:<34} cpu  quax {theirs * scale:9.1f} {unit} (anchor {_QUAX_ANCHORS[key] * scale:g}: "
        f"this machine {slowdown:.2f}x slower)   jaxcore/quax {ours / theirs:5.2f}   "
        f"jaxcore on the anchor machine ~{ours / slowdown * scale:.1f} {unit}"
    )
    if key == "tracing":
        line += f" (goal <= {_TRACING_GOAL_S * 1e3:g} ms)"
    print(line)


def _report_tracing_goal(handled_times, tracing_times) -> None:
    """States the absolute tracing goal in this machine's terms.

    The goal (<= 4 ms) was set on the issue's reference machine. How much slower this
    machine is comes from the same run: the plain jnp op against the ~5 us the issue
    implies, and quax's tracing against its 7.7 ms anchor when quax is installed.
    """
    ours = tracing_times["cpu"][1]
    factors = {"plain jnp op": handled_times["cpu"][0] / _PLAIN_OP_ANCHOR_S}
    if len(tracing_times["cpu"]) == 3:
        factors["quax tracing"] = tracing_times["cpu"][2] / _QUAX_ANCHORS["tracing"]
    print(
        f"tracing goal: <= {_TRACING_GOAL_S * 1e3:g} ms on the issue's reference machine; here {ours * 1e3:.2f} ms"
    )
    for basis, factor in factors.items():
        scaled = ours / factor
        verdict = "met" if scaled <= _TRACING_GOAL_S else "missed"
        print(
            f"  by {basis:<13} this machine is {factor:4.2f}x slower -> jaxcore there "
            f"~{scaled * 1e3:.2f} ms ({verdict})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    plot_tables.add_plot_option(parser)
    args = parser.parse_args()
    plot_tables.check_plot_option(parser, args)
    warnings.simplefilter("ignore", ji.MaterializationWarning)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"jax {jax.__version__}, backend {jax.default_backend()}, 8x8 float32, "
        f"load average {load:.2f} on {os.cpu_count()} cores"
    )
    x = jnp.asarray(np.random.default_rng(0).normal(size=(8, 8)), jnp.float32)
    s = Scaled(x, scale=2.0)
    quax_sides = _quax_anchor.sides(x, _fifty_ops) if _quax_anchor.available() else {}

    handled = ji.implicit(lambda a: a * 3.0)
    handled_times = compare(
        lambda: x * 3.0, lambda: handled(s), number=500, anchor=quax_sides.get("handled")
    )
    plotted = [_report("eager handled op (mul)", handled_times, goal=8)]

    fallback = ji.implicit(jnp.sin)
    fallback_times = compare(
        lambda: jnp.sin(x), lambda: fallback(s), number=500, anchor=quax_sides.get("fallback")
    )
    plotted.append(_report("eager fallback (sin, materialize)", fallback_times, goal=8))

    # A fresh function per call, so neither side hits JAX's tracing cache.
    times = compare(
        lambda: jax.make_jaxpr(lambda a: _fifty_ops(a))(x),
        lambda: jax.make_jaxpr(ji.implicit(lambda a: _fifty_ops(a)))(s),
        number=5,
        anchor=quax_sides.get("tracing"),
    )
    plotted.append(_report("tracing 50 handled ops", times, unit="ms"))
    if args.plot is not None:
        plot_tables.plot_ratios(
            args.plot, "implicit / plain jnp, 8x8 float32", "case", ["wall", "cpu"], plotted
        )

    if quax_sides:
        print(
            f"anchor: quax {quax_sides['version']}, measured in the same rounds as the lines above"
        )
        _report_anchor("eager handled op (mul)", "handled", handled_times, "us")
        _report_anchor("eager fallback (sin, materialize)", "fallback", fallback_times, "us")
        _report_anchor("tracing 50 handled ops", "tracing", times, "ms")
    else:
        print(
            "anchor: quax not installed; to measure it side by side: "
            ".venv/bin/pip install --require-hashes -r benchmarks/anchors_lock.txt"
        )
    _report_tracing_goal(handled_times, times)

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

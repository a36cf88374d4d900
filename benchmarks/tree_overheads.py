"""Pytree overheads of jaxcore.tree.dataclass against a plain dict (100 leaves).

Measures, interleaved in one process so machine noise hits every variant alike:

* flatten + unflatten (``jax.tree_util.tree_flatten`` then ``treedef.unflatten``);
* a call of an already-compiled ``jax.jit`` function taking the object.

Variants: plain dict (the baseline), ``jaxcore.tree.dataclass``, the same
dataclass registered with ``jax.tree_util.register_dataclass`` (JAX's built-in
path, for reference), and equinox.Module / flax.struct when installed.

Prints per-variant median and minimum microseconds and the ratios to the plain
dict (goals: flatten+unflatten <= 1.1x, jitted call <= 1.0x). Usage:

    python3 benchmarks/tree_overheads.py [--rounds 30] [--leaves 100]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import statistics
import sys
import timeit
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import plot_tables  # benchmarks/, the script's directory

try:
    from jaxcore import tree as jt
except ImportError:  # running from a source checkout without an installed wheel
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from jaxcore import tree as jt


def _names(n: int) -> list[str]:
    return [f"f{i}" for i in range(n)]


def make_variants(n: int) -> dict[str, Any]:
    """Builds one n-leaf object per available pytree flavour."""
    names = _names(n)
    leaves = [jnp.full((), float(i), jnp.float32) for i in range(n)]
    variants: dict[str, Any] = {"plain dict": dict(zip(names, leaves))}

    annotations = {name: jax.Array for name in names}
    ours = jt.dataclass(type("JaxcoreTree", (), {"__annotations__": dict(annotations)}))
    variants["jaxcore.tree.dataclass"] = ours(*leaves)

    builtin = dataclasses.dataclass(frozen=True)(
        type("JaxRegisterDataclass", (), {"__annotations__": dict(annotations)})
    )
    jax.tree_util.register_dataclass(builtin, data_fields=names, meta_fields=[])
    variants["jax register_dataclass"] = builtin(*leaves)

    try:
        import equinox as eqx  # optional, for comparison only

        module = type("EqxModule", (eqx.Module,), {"__annotations__": dict(annotations)})
        variants["equinox.Module"] = module(*leaves)
    except ImportError:
        pass
    try:
        from flax import struct  # optional, for comparison only

        flax_cls = struct.dataclass(type("FlaxStruct", (), {"__annotations__": dict(annotations)}))
        variants["flax.struct"] = flax_cls(*leaves)
    except ImportError:
        pass
    return variants


def _flatten_unflatten(obj: Any) -> Callable[[], Any]:
    flatten = jax.tree_util.tree_flatten

    def run() -> Any:
        leaves, treedef = flatten(obj)
        return treedef.unflatten(leaves)

    return run


def _jitted_call(obj: Any) -> Callable[[], Any]:
    fn = jax.jit(lambda tree: jax.tree_util.tree_leaves(tree)[0])
    fn(obj).block_until_ready()  # compile outside the timed region

    def run() -> Any:
        return fn(obj)

    return run


def measure(
    benches: dict[str, Callable[[], Any]], rounds: int, target_s: float = 0.02
) -> dict[str, list[float]]:
    """Times every bench once per round, in a shuffled order each round.

    Returns:
        Per-variant lists of microseconds per call (one entry per round).
    """
    numbers = {}
    for name, bench in benches.items():
        count, elapsed = timeit.Timer(bench).autorange()
        numbers[name] = max(1, int(count * target_s / max(elapsed, 1e-9)))
    samples: dict[str, list[float]] = {name: [] for name in benches}
    order = list(benches)
    rng = random.Random(0)
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            elapsed = timeit.Timer(benches[name]).timeit(numbers[name])
            samples[name].append(elapsed / numbers[name] * 1e6)
    return samples


def report(title: str, samples: dict[str, list[float]], goal: float) -> dict[str, float]:
    """Prints one table; returns each variant's ratio of medians to the plain dict."""
    base_median = statistics.median(samples["plain dict"])
    base_min = min(samples["plain dict"])
    print(f"\n{title}")
    print(f"  {'variant':<26}{'median us':>11}{'min us':>9}{'ratio(median)':>15}{'ratio(min)':>12}")
    for name, values in samples.items():
        med, low = statistics.median(values), min(values)
        print(
            f"  {name:<26}{med:>11.2f}{low:>9.2f}{med / base_median:>15.2f}{low / base_min:>12.2f}"
        )
    ratios = {name: statistics.median(values) / base_median for name, values in samples.items()}
    ours = samples["jaxcore.tree.dataclass"]
    ratio = statistics.median(ours) / base_median
    verdict = "meets" if ratio <= goal else "misses"
    print(f"  jaxcore.tree.dataclass / plain dict = {ratio:.2f} (goal <= {goal:.1f}: {verdict})")
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="interleaved timing rounds")
    parser.add_argument("--leaves", type=int, default=100, help="leaves per object")
    plot_tables.add_plot_option(parser)
    args = parser.parse_args()
    plot_tables.check_plot_option(parser, args)

    variants = make_variants(args.leaves)
    print(
        f"jax {jax.__version__}, {args.leaves} leaves, {args.rounds} interleaved rounds, "
        f"backend {jax.default_backend()}"
    )
    print("variants: " + ", ".join(variants))
    flat = measure({k: _flatten_unflatten(v) for k, v in variants.items()}, args.rounds)
    flat_ratios = report("flatten + unflatten", flat, goal=1.1)
    call = measure({k: _jitted_call(v) for k, v in variants.items()}, args.rounds)
    call_ratios = report("jitted call taking the object", call, goal=1.0)
    if args.plot is not None:
        plot_tables.plot_ratios(
            args.plot,
            f"pytree overheads / plain dict ({args.leaves} leaves, medians)",
            "variant",
            ["flatten + unflatten", "jitted call"],
            [(name, [flat_ratios[name], call_ratios[name]]) for name in variants],
        )


if __name__ == "__main__":
    main()

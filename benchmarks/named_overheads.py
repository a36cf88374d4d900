"""Eager-mode overhead of ``jaxcore.named`` relative to plain ``jax.numpy``, measured side by side.

Every row times the named operation and its positional equivalent in the same process on
the same inputs, interleaving the two, and reports the best-of-N per-call time of each and
their ratio. Goals (issue 6): add <= 2x jnp, sum <= 1.5x jnp, named dot <= 0.25x jnp.einsum.

Run: ``python3 benchmarks/named_overheads.py [--size 8] [--repeats 15] [--number 500]``.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import timeit

import jax
import jax.numpy as jnp
import plot_tables  # benchmarks/, the script's directory

try:
    import jaxcore.named as hax
except ModuleNotFoundError:  # run from a source checkout: python3 benchmarks/named_overheads.py
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
    import jaxcore.named as hax


def _side_by_side_us(named_fn, base_fn, number: int, repeats: int) -> tuple[float, float]:
    """Best-of-``repeats`` per-call times in microseconds, the two timed alternately.

    Alternating the two functions repeat by repeat exposes both to the same machine load,
    so their ratio is meaningful even on a busy machine.
    """
    named_fn()  # warm up: compile and fill caches
    base_fn()
    best_named = best_base = float("inf")
    for _ in range(repeats):
        best_named = min(best_named, timeit.timeit(named_fn, number=number))
        best_base = min(best_base, timeit.timeit(base_fn, number=number))
    return best_named / number * 1e6, best_base / number * 1e6


def _rows(n: int):
    Batch, Embed, Hidden = hax.make_axes(batch=n, embed=n, hidden=n)
    k1, k2 = jax.random.split(jax.random.key(0))
    a_raw = jax.random.normal(k1, (n, n))
    b_raw = jax.random.normal(k2, (n, n))
    a = hax.NamedArray(a_raw, (Batch, Embed))
    b = hax.NamedArray(b_raw, (Batch, Embed))
    b_t = hax.NamedArray(b_raw.T, (Embed, Batch))
    w = hax.NamedArray(b_raw, (Embed, Hidden))
    img = hax.NamedArray(jnp.ones((n, n, n)), (Batch, Embed, Hidden))
    img_raw = img.array

    return [
        (
            "add",
            lambda: (a + b).array.block_until_ready(),
            lambda: (a_raw + b_raw).block_until_ready(),
            "jnp add",
        ),
        (
            "add (operand transposed by name)",
            lambda: (a + b_t).array.block_until_ready(),
            lambda: (a_raw + b_raw).block_until_ready(),
            "jnp add",
        ),
        (
            "sum(axis)",
            lambda: hax.sum(a, axis="embed").array.block_until_ready(),
            lambda: jnp.sum(a_raw, axis=1).block_until_ready(),
            "jnp.sum(axis=1)",
        ),
        (
            "dot(axis)",
            lambda: hax.dot(a, w, axis="embed").array.block_until_ready(),
            lambda: jnp.einsum("be,eh->bh", a_raw, b_raw).block_until_ready(),
            "jnp.einsum",
        ),
        (
            "dot(axis)",
            lambda: hax.dot(a, w, axis="embed").array.block_until_ready(),
            lambda: jnp.dot(a_raw, b_raw).block_until_ready(),
            "jnp.dot",
        ),
        (
            "einsum('{embed} -> batch hidden')",
            lambda: hax.einsum("{embed} -> batch hidden", a, w).array.block_until_ready(),
            lambda: jnp.einsum("be,eh->bh", a_raw, b_raw).block_until_ready(),
            "jnp.einsum",
        ),
        (
            "rearrange('b e h -> h (x: b e)')",
            lambda: hax.rearrange(img, "b e h -> h (x: b e)").array.block_until_ready(),
            lambda: jnp.transpose(img_raw, (2, 0, 1)).reshape(n, n * n).block_until_ready(),
            "jnp transpose+reshape",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8, help="side of the square operands")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--number", type=int, default=500, help="calls per timing repeat")
    plot_tables.add_plot_option(parser)
    args = parser.parse_args()
    plot_tables.check_plot_option(parser, args)

    print(
        f"jax {jax.__version__}, backend {jax.default_backend()}, eager, {args.size}x{args.size} float32"
    )
    print(f"{'named op':38s} {'named us':>9s} {'baseline':>22s} {'base us':>9s} {'ratio':>7s}")
    plotted: list[tuple[str, list[float | None]]] = []
    for name, named_fn, base_fn, base_name in _rows(args.size):
        t_named, t_base = _side_by_side_us(named_fn, base_fn, args.number, args.repeats)
        print(f"{name:38s} {t_named:9.2f} {base_name:>22s} {t_base:9.2f} {t_named / t_base:7.2f}x")
        plotted.append((name, [t_named / t_base]))
    if args.plot is not None:
        plot_tables.plot_ratios(
            args.plot,
            f"named op / baseline, eager, {args.size}x{args.size} float32",
            "named op",
            ["ratio"],
            plotted,
        )


if __name__ == "__main__":
    main()

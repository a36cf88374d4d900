"""hax.nn.Linear forward vs plain ``jnp.dot(x, w) + b`` on (B=32, In=512, Out=512), eager and jitted.

Prints the median time of each and the named/plain ratio, all measured in one run
(issue 16's goal: ratio <= 1.3 both ways).

    python benchmarks/named_linear.py [--reps 2000]
"""

import argparse
import pathlib
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import plot_tables  # benchmarks/, the script's directory

try:
    import jaxcore.named as hax
except ModuleNotFoundError:  # run from a source checkout: python3 benchmarks/named_linear.py
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
    import jaxcore.named as hax


def _median_us(fn, reps: int, rounds: int = 7) -> float:
    for _ in range(50):
        fn().block_until_ready()
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            out = fn()
        out.block_until_ready()
        samples.append((time.perf_counter() - t0) / reps * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2000)
    plot_tables.add_plot_option(parser)
    args = parser.parse_args()
    plot_tables.check_plot_option(parser, args)
    B, In, Out = hax.make_axes(B=32, In=512, Out=512)
    layer = hax.nn.Linear.init(In, Out, key=jax.random.key(0), out_first=False)
    layer = hax.nn.Linear(layer.weight, hax.random.normal(jax.random.key(2), Out), In, Out)
    x = hax.random.normal(jax.random.key(1), (B, In))
    xr, w, b = x.array, layer.weight.array, layer.bias.array

    plain_jit = jax.jit(lambda x, w, b: jnp.dot(x, w) + b)
    named_jit = jax.jit(lambda layer, x: layer(x))
    rows = [
        ("eager", lambda: jnp.dot(xr, w) + b, lambda: layer(x).array),
        ("jit", lambda: plain_jit(xr, w, b), lambda: named_jit(layer, x).array),
    ]
    plotted: list[tuple[str, list[float | None]]] = []
    for mode, plain, named in rows:
        # interleave the two so that machine noise hits both alike
        p1 = _median_us(plain, args.reps)
        n1 = _median_us(named, args.reps)
        p2 = _median_us(plain, args.reps)
        n2 = _median_us(named, args.reps)
        p, n = min(p1, p2), min(n1, n2)
        print(f"{mode:5s}  plain {p:8.1f} us   named Linear {n:8.1f} us   ratio {n / p:.2f}")
        plotted.append((mode, [n / p]))
    if args.plot is not None:
        plot_tables.plot_ratios(
            args.plot, "named Linear / plain jnp (B=32, In=Out=512)", "mode", ["ratio"], plotted
        )


if __name__ == "__main__":
    main()

"""A model's MLP block with quantized weights on CPU, against the same block in float32.

The program a CPU-inference user runs, not one kernel: ``gelu(x @ W_up) @ W_down`` (default
d = 4096, hidden = 14336, a 7B-class MLP), written once as plain JAX and run unchanged under
one ``jax.jit`` -- with float32 weights (XLA's dense matmuls), and with each quantized
format (int8 per-channel, int4 / NF4 in 64-row blocks) through ``jaxcore.implicit``, which
sends both matmuls to the kernel ``jaxcore.kernels`` dispatches to: the native
``jaxcore_cpu`` plugin in each of its precisions (``float32`` exact, ``int8`` activations),
else the portable reference kernel. For each M it prints milliseconds, the ratio to the
float32 block and the error against the same block run on the dequantized weights
(``max |y - y_ref| / max |y_ref|``), all measured in one run: timings are medians of --reps
interleaved repetitions, each contender rotating over enough weight copies (at least 128 MB
or 4x the L3) that every call reads its weights from memory.

Usage: python3 benchmarks/quantized_mlp.py [--d 4096] [--hidden 14336] [--m 1 16]
"""

from __future__ import annotations

import argparse
import contextlib
import math

import jax
import jax.numpy as jnp
import plot_tables  # benchmarks/, the script's directory
import quantized_matmul as qm  # its CPU helpers; also puts the checkout on sys.path

from jaxcore import quant
from jaxcore.implicit import implicit


def _mlp(x, w_up, w_down):
    return jax.nn.gelu(x @ w_up) @ w_down


def _formats():
    return {
        "int8": lambda w: quant.ArrayInt8.quantize(w),
        "int4": lambda w: quant.ArrayInt4.quantize(w, 64),
        "nf4": lambda w: quant.ArrayNF4.quantize(w, 64),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d", type=int, default=4096, help="model width (default 4096)")
    parser.add_argument("--hidden", type=int, default=14336, help="MLP width (default 14336)")
    parser.add_argument("--m", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument(
        "--rotate-mb",
        type=float,
        default=None,
        help="weight bytes each contender rotates over (default: max(128, 4 x L3) MB)",
    )
    plot_tables.add_plot_option(parser)
    args = parser.parse_args()
    plot_tables.check_plot_option(parser, args)
    if jax.default_backend() != "cpu":
        parser.error(f"this benchmark is for CPU; the default backend is {jax.default_backend()}")

    native, why_not = qm._native()
    precisions = list(native.PRECISIONS) if native is not None else [None]
    l3 = qm._l3_bytes()
    rotate = int((args.rotate_mb or max(128, 4 * (l3 or 0) / 2**20)) * 2**20)
    model, _ = qm._cpu_model()
    print(
        f"machine: {model}; {qm._usable_cpus()} logical CPUs usable; jax {jax.__version__}; "
        + (f"native kernels: ISA {native.isa()}" if native else f"native kernels: {why_not}")
    )
    print(f"MLP block gelu(x @ W_up) @ W_down, d={args.d} hidden={args.hidden}, float32 x")

    w_up = jax.random.normal(jax.random.key(0), (args.d, args.hidden), jnp.float32) * 0.02
    w_down = jax.random.normal(jax.random.key(1), (args.hidden, args.d), jnp.float32) * 0.02
    dense_pair = (w_up, w_down)
    pairs = {"dense": qm._copies(dense_pair, max(1, math.ceil(rotate / qm._nbytes(dense_pair))))}
    dequantized = {}
    for name, make in _formats().items():
        pair = (make(w_up), make(w_down))
        nbytes = sum(w.storage_nbytes for w in pair)
        pairs[name] = qm._copies(pair, max(2, math.ceil(rotate / nbytes)))
        dequantized[name] = tuple(w.materialize() for w in pair)

    dense = jax.jit(_mlp)
    columns, plotted = [], []
    for m in args.m:
        x = jax.random.normal(jax.random.key(2 + m), (m, args.d), jnp.float32)
        contenders = {"dense": (dense, [(x, *p) for p in pairs["dense"]])}
        errors = {}
        for name in _formats():
            expected = dense(x, *dequantized[name])
            scale = float(jnp.max(jnp.abs(expected)))
            for prec in precisions:
                label = name if prec is None else f"{name} {prec}"
                # Traced here, in this precision (the plugin's choice applies at trace time).
                with contextlib.nullcontext() if prec is None else native.set_precision(prec):
                    fn = jax.jit(implicit(_mlp))
                    got = fn(x, *pairs[name][0])
                errors[label] = float(jnp.max(jnp.abs(got - expected))) / scale
                contenders[label] = (fn, [(x, *p) for p in pairs[name]])
        t = qm._time_rotating(contenders, args.reps)
        base = t["dense"]
        print(f"\nM = {m}: float32 block {base * 1e3:.2f} ms")
        print(f"  {'weights':22s} {'ms':>8s} {'x dense':>8s} {'max err':>9s}")
        for label in errors:
            print(
                f"  {label:22s} {t[label] * 1e3:8.2f} {t[label] / base:8.2f} {errors[label]:9.1e}"
            )
        columns = list(errors)
        plotted.append((str(m), [t[label] / base for label in errors]))

    plot_tables.print_ratios("ratio to the float32 block:", "M", columns, plotted)
    if args.plot is not None:
        plot_tables.plot_ratios(
            args.plot,
            f"quantized MLP block / float32 (d={args.d}, hidden={args.hidden})",
            "M",
            columns,
            plotted,
        )


if __name__ == "__main__":
    main()

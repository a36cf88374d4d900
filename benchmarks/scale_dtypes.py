"""16-bit block scales on CPU: each format against its twin with float16/bfloat16 scales.

For int8 in blocks of 32, int4 in blocks of 64 (both with float16 scales) and NF4 in blocks
of 64 (bfloat16 absmax), it times the native kernel on the float32-scale weight, on the
16-bit-scale weight as stored (the kernels convert the scales in cache), and on the
16-bit-scale weight converted to float32 by XLA inside the program first (what every call
paid before the kernels read 16-bit scales), and prints the ratios, for each precision and
M. Every contender rotates over at least --rotate-mb of weight copies (each call reads its
weight from memory), each timed call is one jitted program of --chain products, and the
times are medians of --reps interleaved repetitions, as in quantized_matmul.py.

Usage: python3 benchmarks/scale_dtypes.py [--k 4096] [--n 4096] [--m 1 16] [--reps 41]
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import _chain  # benchmarks/, the script's directory
import jax
import jax.numpy as jnp
import plot_tables
import quantized_matmul as _qm

from jaxcore import quant

# (name, its float32-scale twin's name, quantizer)
_FORMATS = [
    ("int8-b32", None, lambda w: quant.ArrayInt8.quantize(w, block_size=32)),
    (
        "int8-b32-f16",
        "int8-b32",
        lambda w: quant.ArrayInt8.quantize(w, block_size=32, scale_dtype="float16"),
    ),
    ("int4", None, lambda w: quant.ArrayInt4.quantize(w, 64)),
    ("int4-f16", "int4", lambda w: quant.ArrayInt4.quantize(w, 64, scale_dtype="float16")),
    ("nf4", None, lambda w: quant.ArrayNF4.quantize(w, 64)),
    ("nf4-bf16", "nf4", lambda w: quant.ArrayNF4.quantize(w, 64, scale_dtype="bfloat16")),
]


def _product(native, x, q, *, precision, convert):
    scale = q.scale.astype(jnp.float32) if convert else q.scale
    return native.quantized_matmul(
        x, q.qvalue, scale, fmt=q.fmt, block_size=q.block_size, precision=precision
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--m", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--reps", type=int, default=41)
    parser.add_argument("--chain", type=int, default=8)
    parser.add_argument("--rotate-mb", type=float, default=128)
    plot_tables.add_plot_option(parser)
    args = parser.parse_args(argv)
    plot_tables.check_plot_option(parser, args)
    if args.chain < 1:
        parser.error(f"--chain must be at least 1, got {args.chain}")
    native, why_not = _qm._native()
    if native is None:
        sys.exit(f"scale_dtypes.py needs the native CPU kernels: {why_not}")
    rotate = int(args.rotate_mb * 2**20)
    w = jax.random.normal(jax.random.key(0), (args.k, args.n), jnp.float32) * 0.02
    weights = {name: make(w) for name, _, make in _FORMATS}
    copies = {
        name: _qm._copies(q, _qm._copy_count(rotate, q.storage_nbytes, args.chain))
        for name, q in weights.items()
    }
    print(
        f"K={args.k} N={args.n}, ISA {native.isa()}, jax {jax.__version__}; median of "
        f"{args.reps} interleaved repetitions, {args.chain} products per timed call"
    )
    for name, q in weights.items():
        print(f"  {name:13s} {q.storage_nbytes / w.size:.4f} bytes per weight")
    twins = {name: twin for name, twin, _ in _FORMATS if twin is not None}
    names = list(twins)
    table = []
    for precision in ("int8", "float32"):
        fns = {
            convert: _chain.chained(
                functools.partial(_product, native, precision=precision, convert=convert),
                args.chain,
            )
            for convert in (False, True)
        }
        for m in args.m:
            x = jax.random.normal(jax.random.key(m), (m, args.k), jnp.float32)
            contenders = {}
            for name, twin, _ in _FORMATS:
                sets = [(x, s) for s in _qm._sets(copies[name], args.chain)]
                contenders[name] = (fns[False], sets)
                if twin is not None:
                    contenders[name + " via XLA"] = (fns[True], sets)
            t = _qm._time_rotating(contenders, args.reps, per_call=args.chain)
            table.append((f"{precision} {m}", [t[name] / t[twins[name]] for name in names]))
            print(f"\n{precision} activations, M = {m}:")
            for name, twin, _ in _FORMATS:
                if twin is None:
                    continue
                print(
                    f"  {name:13s} {t[name] * 1e3:8.3f} ms = {t[name] / t[twin]:.3f}x "
                    f"{twin} ({t[twin] * 1e3:.3f} ms); scales converted by XLA first: "
                    f"{t[name + ' via XLA'] / t[name]:.3f}x the in-kernel time"
                )

    title = "time with 16-bit scales / with float32 scales (precision and M per row)"
    plot_tables.print_ratios(title, "precision M", names, table)
    if args.plot is not None:
        plot_tables.plot_ratios(args.plot, title, "precision M", names, table)


if __name__ == "__main__":
    main()

"""The transposed quantized product ``x @ W.T`` on CPU (the gradient of ``x @ W`` in ``x``).

A frozen quantized weight in training (QLoRA, adapters, any fine-tuning that keeps the base
quantized) costs a ``dy @ W.T`` per layer in the backward pass. For a (K, N) weight and each
M in --m this prints, measured side by side in one run (float32 activations of shape (M, N),
result (M, K)):

* the native kernel of the ``jaxcore-cpu`` plugin (``jaxcore_cpu.quantized_matmul_transposed``,
  --path: the rows path at small M and the GEMM above by default) and the portable reference
  (``reference_quantized_matmul_transposed``, what runs without the plugin), for int8
  per-channel and in 32-row blocks, int4 and NF4 in 64-row blocks and NF4 double-quant (its
  scales expanded inside the timed program, as the gradient does);
* XLA's dense float32 ``x @ W`` of the same size (the baseline of every ratio: same products,
  same weight bytes) and XLA's dense ``x @ W.T`` (what a dense model's gradient runs).

The native kernels are timed interleaved with the dense ``x @ W``; the reference and the dense
``x @ W.T`` in a second pass, since both write large temporaries whose write-backs slow the
contender after them (2x for the native kernel at M = 1 on a 2-vCPU VM).

Weights rotate over enough distinct copies that every call reads them from memory, and each
timed call chains --chain products (as benchmarks/quantized_matmul.py, whose helpers this
uses; see its docstring).

Usage: python3 benchmarks/quantized_matmul_transposed.py [--k 4096] [--n 4096] [--m 1 16 64 256]
       python3 benchmarks/quantized_matmul_transposed.py --model-shape   # K=4096, N=14336
"""

from __future__ import annotations

import argparse
import os

import jax
import jax.numpy as jnp
import plot_tables  # benchmarks/, the script's directory (as quantized_matmul)
import quantized_matmul as qmm_bench

from jaxcore import kernels


def _native_transposed(native, x, q, path):
    return native.quantized_matmul_transposed(
        x, q.qvalue, q.block_scales(), fmt=q.fmt, block_size=q.block_size, path=path
    )


def _reference_transposed(x, q):
    return kernels.reference_quantized_matmul_transposed(
        x, q.qvalue, q.block_scales(), fmt=q.fmt, block_size=q.block_size
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=None, help="weight rows K (default 4096)")
    parser.add_argument("--n", type=int, default=None, help="weight columns N (default 4096)")
    parser.add_argument("--model-shape", action="store_true", help="K=4096, N=14336")
    parser.add_argument("--m", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument(
        "--path", choices=["auto", "gemv", "gemm"], default="auto", help="the native kernel's path"
    )
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--chain", type=int, default=8, help="products per timed jitted call")
    parser.add_argument("--rotate-mb", type=float, default=None)
    parser.add_argument("--isa", default=None, help="pin the native kernels' instruction set")
    parser.add_argument("--no-reference", action="store_true", help="skip the reference")
    plot_tables.add_plot_option(parser)
    args = parser.parse_args()
    plot_tables.check_plot_option(parser, args)
    if args.chain < 1:
        parser.error(f"--chain must be at least 1, got {args.chain}")
    if jax.devices()[0].platform != "cpu":
        parser.error("this benchmark times the CPU kernels; run it with JAX_PLATFORMS=cpu")
    if args.model_shape:
        args.k, args.n = args.k or 4096, args.n or 14336
    k, n, chain = args.k or 4096, args.n or 4096, args.chain
    l3 = qmm_bench._l3_bytes()
    rotate = int((args.rotate_mb or max(128, 4 * (l3 or 0) / 2**20)) * 2**20)
    model, flags = qmm_bench._cpu_model()
    native, why_not = qmm_bench._native()
    if native is not None and args.isa:
        native.set_isa(args.isa)
    print(
        f"machine: {model}; {qmm_bench._usable_cpus()} of {os.cpu_count()} logical CPUs usable; "
        f"{', '.join(flags) or 'no AVX2'}"
    )
    print(
        f"native kernels: ISA {native.isa()}, path {args.path}; {native.library_path()}"
        if native is not None
        else f"native kernels: unavailable ({why_not})"
    )
    print(
        f"jax {jax.__version__}; x @ W.T with W (K={k}, N={n}), x (M, {n}) float32; each "
        f"contender rotates over >= {rotate / 2**20:.0f} MB of weights; median of {args.reps} "
        f"interleaved repetitions; {chain} products per timed call, time per product"
    )

    w = jax.random.normal(jax.random.key(0), (k, n), jnp.float32) * 0.02
    weights = qmm_bench._cpu_formats(w)
    dense_copies = qmm_bench._copies(w, qmm_bench._copy_count(rotate, w.nbytes, chain))
    copies = {
        name: qmm_bench._copies(q, qmm_bench._copy_count(rotate, q.storage_nbytes, chain))
        for name, q in weights.items()
    }
    dense = qmm_bench._chain.chained(jnp.dot, chain)
    dense_t = qmm_bench._chain.chained(lambda x, w: x @ w.T, chain)
    nat = (
        qmm_bench._chain.chained(lambda x, q: _native_transposed(native, x, q, args.path), chain)
        if native is not None
        else None
    )
    ref = qmm_bench._chain.chained(_reference_transposed, chain)
    sets = qmm_bench._sets

    summary = {}
    for m in args.m:
        x_fwd = jax.random.normal(jax.random.key(m), (m, k), jnp.float32)
        x = jax.random.normal(jax.random.key(m + 1), (m, n), jnp.float32)
        # Two passes: the native kernels interleaved with their baseline, then the contenders
        # that write large temporaries (XLA's dense x @ W.T transposes the weight, 64 MB at
        # 4096 x 4096; the reference writes dequantized slabs), whose write-backs would slow
        # whichever contender ran after them.
        first = {"dense": (dense, [(x_fwd, ws) for ws in sets(dense_copies, chain)])}
        second = {"dense.T": (dense_t, [(x, ws) for ws in sets(dense_copies, chain)])}
        for name in weights:
            qsets = [(x, qs) for qs in sets(copies[name], chain)]
            if nat is not None:
                first[name] = (nat, qsets)
            if not args.no_reference:
                second[f"{name}/ref"] = (ref, qsets)
        t = qmm_bench._time_rotating(first, args.reps, per_call=chain)
        t.update(qmm_bench._time_rotating(second, args.reps, per_call=chain))
        base = t["dense"]
        print(
            f"\nM = {m}: dense f32 x @ W {base * 1e3:.3f} ms; dense x @ W.T "
            f"{t['dense.T'] * 1e3:.3f} ms ({t['dense.T'] / base:.2f}x)"
        )
        print(
            f"  {'format':10s} {'native ms':>10s} {'x dense':>8s} {'GB/s':>6s}"
            f"   {'reference ms':>12s} {'x dense':>8s}"
        )
        row = summary.setdefault(m, {"dense x @ W.T": t["dense.T"] / base})
        for name, q in weights.items():
            cells = []
            if name in t:
                row[name] = t[name] / base
                cells.append(
                    f"{t[name] * 1e3:10.3f} {t[name] / base:8.3f} "
                    f"{q.storage_nbytes / t[name] / 1e9:6.1f}"
                )
            else:
                cells.append(f"{'-':>10s} {'-':>8s} {'-':>6s}")
            key = f"{name}/ref"
            cells.append(
                f"{t[key] * 1e3:12.3f} {t[key] / base:8.3f}"
                if key in t
                else f"{'-':>12s} {'-':>8s}"
            )
            print(f"  {name:10s} {cells[0]}   {cells[1]}")

    names = list(summary[args.m[0]])
    print(f"\nx @ W.T, ratio to dense f32 x @ W (native kernel; K={k} N={n}):")
    print("  | M | " + " | ".join(names) + " |")
    print("  |---|" + "---|" * len(names))
    for m in args.m:
        cells = [f"{summary[m][c]:.2f}x" if c in summary[m] else "-" for c in names]
        print(f"  | {m} | " + " | ".join(cells) + " |")
    if args.plot is not None:
        plot_tables.plot_ratios(
            args.plot,
            f"x @ W.T on CPU, ratio to dense f32 x @ W, K={k} N={n}",
            "M",
            names,
            [(str(m), [summary[m].get(c) for c in names]) for m in args.m],
        )


if __name__ == "__main__":
    main()

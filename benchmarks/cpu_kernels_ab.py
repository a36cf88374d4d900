"""Two builds of the native CPU kernel library, timed against each other in one process.

A kernel change worth a few percent cannot be seen by timing the builds in turn on a shared
VM: the same build, run in two processes a minute apart, differs by up to 1.8x there (memory
placement, neighbours, frequency). This script loads both libraries (``--a``, default the
one ``jaxcore_cpu`` would load, and ``--b``) into one process, registers each as its own
XLA FFI target, and times them in alternation (A B, then B A) on the same weights, so
drift hits both alike. For each format and M it prints each build's fastest and median time
per matmul and the median of the paired B / A ratios, with how many pairs B won; the two
builds' results are checked to agree first. It ends with the table of B / A ratios (--plot
PATH draws it).

Each timed call is one jitted program of --chain matmuls (each by its own weight copy, each
waiting for the one before), rotating over two such sets, so every matmul reads its weight
from memory (K = N = 4096: 8 MiB of int4 codes per copy, 16 copies). The codes and scales
are random: the kernels' speed does not depend on their values.

Usage: python3 benchmarks/cpu_kernels_ab.py --b path/to/other/libjaxcore_cpu_kernels.so
       python3 benchmarks/cpu_kernels_ab.py --a old.so --b new.so --isa avx2 --m 1 16
"""

from __future__ import annotations

import argparse
import ctypes
import os
import pathlib
import sys
import time

# Run from a checkout without installing jaxcore.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import _chain  # benchmarks/, the script's directory (as plot_tables)
import jax
import jax.numpy as jnp
import numpy as np
import plot_tables

_FORMATS = {"int8": (0, np.int8, 1), "int4": (1, np.uint8, 2), "nf4": (2, np.uint8, 2)}
_PRECISIONS = {"float32": 0, "int8": 1}


def _load(path: str, target: str, isa: str | None) -> None:
    """Loads the library at ``path`` on its own and registers its handler as ``target``."""
    if not os.path.isfile(path):
        raise SystemExit(f"error: no library at {path!r}")
    lib = ctypes.CDLL(os.path.abspath(path), mode=os.RTLD_LOCAL)
    handler = getattr(lib, "JaxcoreCpuQuantizedMatmul", None)
    if handler is None:
        raise SystemExit(f"error: {path!r} does not export JaxcoreCpuQuantizedMatmul")
    jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(handler), platform="cpu")
    if isa is not None:
        lib.JaxcoreCpuSetIsa.restype = ctypes.c_int
        if not lib.JaxcoreCpuSetIsa(isa.encode()):
            raise SystemExit(f"error: {path!r} cannot run the {isa!r} kernels on this CPU")


def _chained(target: str, n: int, fmt: str, block_size: int, precision: str, chain: int):
    """A jitted ``f(x, [(codes, scales), ...])`` running ``chain`` products through ``target``."""
    code, _, _ = _FORMATS[fmt]

    def product(x, weight):
        q, s = weight
        out = jax.ShapeDtypeStruct((x.shape[0], n), jnp.float32)
        return jax.ffi.ffi_call(target, out)(
            x,
            q,
            s,
            fmt=np.int32(code),
            block_size=np.int64(block_size),
            path=np.int32(0),
            precision=np.int32(_PRECISIONS[precision]),
        )

    return _chain.chained(product, chain)


def _weights(fmt: str, k: int, n: int, block_size: int, copies: int, rng):
    _, dtype, per_row = _FORMATS[fmt]
    codes = [
        jnp.asarray(rng.integers(0, 256, (k // per_row, n), dtype=np.uint8).view(dtype))
        for _ in range(copies)
    ]
    scales = [
        jnp.asarray(rng.random((k // block_size, n), dtype=np.float32) * 0.01)
        for _ in range(copies)
    ]
    return codes, scales


def compare(args) -> list[dict]:
    """Times build A against build B; returns one row of results per (format, M)."""
    _load(args.a, "jaxcore_cpu_ab_a", args.isa)
    _load(args.b, "jaxcore_cpu_ab_b", args.isa)
    rng = np.random.default_rng(0)
    rows = []
    for fmt in args.formats:
        codes, scales = _weights(fmt, args.k, args.n, args.block_size, 2 * args.chain, rng)
        weights = list(zip(codes, scales))
        sets = [weights[: args.chain], weights[args.chain :]]
        runs = {
            tag: _chained(
                f"jaxcore_cpu_ab_{tag}", args.n, fmt, args.block_size, args.precision, args.chain
            )
            for tag in "ab"
        }
        for m in args.m:
            x = jnp.asarray(rng.standard_normal((m, args.k), dtype=np.float32))
            first = {tag: [np.asarray(o) for o in run(x, sets[0])] for tag, run in runs.items()}
            for got_a, got_b in zip(first["a"], first["b"]):
                scale = max(1e-30, float(np.max(np.abs(got_a))))
                if float(np.max(np.abs(got_a - got_b))) > 1e-3 * scale:
                    raise SystemExit(f"error: the builds disagree on {fmt} at M = {m}")
            for run in runs.values():
                jax.block_until_ready(run(x, sets[1]))
            times = {"a": [], "b": []}
            for rep in range(args.reps):
                for tag in "ab" if rep % 2 == 0 else "ba":
                    start = time.perf_counter()
                    jax.block_until_ready(runs[tag](x, sets[(rep // 2) % 2]))
                    times[tag].append((time.perf_counter() - start) / args.chain)
            a, b = np.array(times["a"]), np.array(times["b"])
            rows.append(
                dict(
                    fmt=fmt,
                    m=m,
                    a_min=a.min(),
                    a_med=np.median(a),
                    b_min=b.min(),
                    b_med=np.median(b),
                    ratio=float(np.median(b / a)),
                    b_wins=int((b < a).sum()),
                    reps=args.reps,
                )
            )
            r = rows[-1]
            print(
                f"  {fmt:5s} M={m:<4d} A {r['a_min'] * 1e3:8.3f} / {r['a_med'] * 1e3:8.3f} ms   "
                f"B {r['b_min'] * 1e3:8.3f} / {r['b_med'] * 1e3:8.3f} ms   "
                f"B/A {r['ratio']:.3f}  (B faster in {r['b_wins']}/{r['reps']})",
                flush=True,
            )
    return rows


def _default_library() -> str | None:
    try:
        import jaxcore_cpu

        jaxcore_cpu.isa()  # loads it
        return jaxcore_cpu.library_path()
    except (ImportError, FileNotFoundError):  # no plugin, or no library: --a must be given
        return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", default=None, help="library A (default: what jaxcore_cpu loads)")
    parser.add_argument("--b", required=True, help="library B, the one to compare with A")
    parser.add_argument("--isa", default=None, help="pin both to this instruction set")
    parser.add_argument("--formats", nargs="+", choices=list(_FORMATS), default=["int8", "int4"])
    parser.add_argument("--m", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--precision", choices=list(_PRECISIONS), default="int8")
    parser.add_argument("--block-size", type=int, default=64)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--reps", type=int, default=20, help="timed pairs per format and M")
    parser.add_argument("--chain", type=int, default=8, help="products per timed call")
    plot_tables.add_plot_option(parser)
    args = parser.parse_args(argv)
    plot_tables.check_plot_option(parser, args)
    args.a = args.a or _default_library()
    if args.a is None:
        parser.error("--a is required where jaxcore_cpu cannot find its library")
    if args.k % args.block_size or args.block_size % 2 or min(args.k, args.n, args.chain) < 1:
        parser.error(
            f"--block-size ({args.block_size}) must be even and divide --k ({args.k}); "
            "--k, --n and --chain must be positive"
        )
    if min(args.m) < 1 or args.reps < 1:
        parser.error("--m values and --reps must be positive")
    print(f"A: {args.a}\nB: {args.b}")
    print(
        f"jax {jax.__version__}; K={args.k} N={args.n}, {args.precision} activations, blocks of "
        f"{args.block_size}, ISA {args.isa or 'best'}; {args.chain} products per call over "
        f"{2 * args.chain} weight copies; {args.reps} alternating pairs; fastest / median ms "
        "per product"
    )
    rows = compare(args)
    ratio = {(r["fmt"], r["m"]): r["ratio"] for r in rows}
    print("\nB / A, median of the paired ratios (below 1: B is faster):")
    print("  | M | " + " | ".join(args.formats) + " |")
    print("  |---|" + "---|" * len(args.formats))
    for m in args.m:
        print(f"  | {m} | " + " | ".join(f"{ratio[f, m]:.3f}" for f in args.formats) + " |")
    if args.plot is not None:
        plot_tables.plot_ratios(
            args.plot,
            f"B / A time, {args.precision} activations, K={args.k} N={args.n}",
            "M",
            list(args.formats),
            [(str(m), [ratio[f, m] for f in args.formats]) for m in args.m],
        )


if __name__ == "__main__":
    main()

"""A decoder's stacked layers on CPU: separate arrays, a scan, a Python loop over ``W[i]``.

A model keeps its L layers either as separate arrays or as one stack per weight (what
``jax.vmap`` of an initializer, Flax's ``nn.scan`` or Haliax's ``Stacked`` give), and runs
the stack with ``lax.scan`` or by indexing ``W[i]``. This runs the same pre-norm block
(attention-like projections q/k/v/o, a gated MLP; ``--d``, ``--hidden``, ``--layers``) all
three ways, with float32 weights (XLA's dense dots) and with each quantized format through
``jaxcore.implicit`` (the native ``jaxcore_cpu`` kernels where the plugin is loaded), and
prints milliseconds and two ratios: to the dense model laid out the same way, and to the
quantized model with separate arrays (what indexing a stack costs over the ideal). Stacked
layers reach the quantized kernel in place (``jaxcore.kernels.quantized_matmul_stacked``);
XLA copies each step's slice of a dense stack (``--copied`` adds the quantized stacks traced
without the stacked kernel, which XLA copies the same way). Timings are medians of --reps interleaved
calls rotating over --copies copies of every weight set (default: enough to cover 4x the
L3, at least 2 and at most 256), so every call reads its weights from memory (a set so small
that 256 copies fit in the L3 is read from cache whatever the count); the quantized programs are
timed interleaved with each other, the dense ones and the copied ones in passes of their own.

Usage: python3 benchmarks/stacked_layers.py [--d 1024] [--hidden 2816] [--layers 8] [--m 1 16]
"""

from __future__ import annotations

import argparse
import contextlib
import math

import jax
import jax.numpy as jnp
import plot_tables  # benchmarks/, the script's directory
import quantized_matmul as qm  # its CPU helpers; also puts the checkout on sys.path

from jaxcore import kernels, quant
from jaxcore.implicit import implicit
from jaxcore.kernels import plugin_api

NAMES = ("wq", "wk", "wv", "wo", "wg", "wu", "wd")


# Default copies at most: a 480 MB L3 (the Xeon VM's) over a test-sized model asked for
# millions of copies.
_MAX_COPIES = 256


def _shapes(d: int, hidden: int) -> dict[str, tuple[int, int]]:
    square = (d, d)
    return dict(
        wq=square, wk=square, wv=square, wo=square, wg=(d, hidden), wu=(d, hidden), wd=(hidden, d)
    )


def _rms(x):
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6)


def _block(x, p):
    h = _rms(x)
    q, k, v = h @ p["wq"], h @ p["wk"], h @ p["wv"]
    x = x + (jax.nn.softmax(q * k * 0.1, -1) * v) @ p["wo"]
    h = _rms(x)
    return x + (jax.nn.silu(h @ p["wg"]) * (h @ p["wu"])) @ p["wd"]


def _separate(x, layers):
    for p in layers:
        x = _block(x, p)
    return x


def _scan(x, stack):
    return jax.lax.scan(lambda h, p: (_block(h, p), None), x, stack)[0]


def _indexed(x, stack):
    for i in range(jax.tree_util.tree_leaves(stack)[0].shape[0]):
        x = _block(x, {name: w[i] for name, w in stack.items()})
    return x


LAYOUTS = {"separate": _separate, "scan": _scan, "W[i] loop": _indexed}


def _formats():
    return {
        "int8": lambda w: quant.ArrayInt8.quantize(w),
        "int4": lambda w: quant.ArrayInt4.quantize(w, 64),
        "nf4": lambda w: quant.ArrayNF4.quantize(w, 64),
    }


def _stack(layers: list[dict]) -> dict:
    return jax.tree_util.tree_map(lambda *ws: jnp.stack(ws), *layers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d", type=int, default=1024, help="model width (default 1024)")
    parser.add_argument("--hidden", type=int, default=2816, help="MLP width (default 2816)")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--m", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--copies", type=int, default=None, help="weight copies to rotate over")
    parser.add_argument(
        "--copied",
        action="store_true",
        help="also time the stacked layouts traced without the stacked kernel (layers copied out)",
    )
    plot_tables.add_plot_option(parser)
    args = parser.parse_args()
    plot_tables.check_plot_option(parser, args)
    for flag in ("d", "hidden", "layers", "reps"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be at least 1, got {getattr(args, flag)}")
    if args.d % 64 or args.hidden % 64:
        parser.error(
            f"--d and --hidden must be multiples of 64 (the 4-bit formats' block), got {args.d}, {args.hidden}"
        )
    if min(args.m) < 1:
        parser.error(f"--m must be at least 1, got {min(args.m)}")
    if jax.default_backend() != "cpu":
        parser.error(f"this benchmark is for CPU; the default backend is {jax.default_backend()}")

    native, why_not = qm._native()
    model, _ = qm._cpu_model()
    print(
        f"machine: {model}; {qm._usable_cpus()} logical CPUs usable; jax {jax.__version__}; "
        + (f"native kernels: ISA {native.isa()}" if native else f"native kernels: {why_not}")
    )
    print(f"{args.layers} layers, d={args.d} hidden={args.hidden}, float32 x")

    key = jax.random.key(0)
    layers = []
    for _ in range(args.layers):
        p = {}
        for name, shape in _shapes(args.d, args.hidden).items():
            key, sub = jax.random.split(key)
            p[name] = jax.random.normal(sub, shape, jnp.float32) / math.sqrt(shape[0])
        layers.append(p)
    l3 = qm._l3_bytes() or 32 * 2**20
    weights = {"dense": layers}
    for name, make in _formats().items():
        weights[name] = [{k: make(w) for k, w in p.items()} for p in layers]
    sets = {}
    for name, ws in weights.items():
        copies = args.copies or min(_MAX_COPIES, max(2, math.ceil(4 * l3 / qm._nbytes(ws))))
        sets[name] = {"separate": qm._copies(ws, copies), "stacked": qm._copies(_stack(ws), copies)}

    columns, plotted = [], []
    for m in args.m:
        x = jax.random.normal(jax.random.key(1 + m), (m, args.d), jnp.float32)
        contenders, errors = {}, {}
        runs = [(name, layout, False) for name in weights for layout in LAYOUTS]
        if args.copied:
            runs += [
                (n, lay, True)
                for n in weights
                if n != "dense"
                for lay in LAYOUTS
                if lay != "separate"
            ]
        for name, layout, copied in runs:
            fn = LAYOUTS[layout]
            arg = "separate" if layout == "separate" else "stacked"
            jitted = jax.jit(fn if name == "dense" else implicit(fn))
            key = (name, layout + (" copied" if copied else ""))
            contenders[key] = (jitted, [(x, w) for w in sets[name][arg]])
            if name == "dense":
                continue
            expected = jax.jit(_separate)(
                x, [{k: _dense(w) for k, w in p.items()} for p in weights[name]]
            )
            # Traced (at this first call) without the stacked kernel: each layer sliced out.
            with _without_stacked_kernel() if copied else contextlib.nullcontext():
                got = jitted(x, sets[name][arg][0])
            errors[key] = float(jnp.max(jnp.abs(got - expected)) / jnp.max(jnp.abs(expected)))

        # Passes of their own for the programs that write a copy of every layer they slice
        # (the dense stacks', the copied quantized ones'): the write-back of those hundreds of
        # MB slowed whichever call came next up to 2.5x.
        def copies(key):
            return key[0] == "dense" or key[1].endswith("copied")

        t = {}
        for group in (
            {k: c for k, c in contenders.items() if k[0] == "dense"},
            {k: c for k, c in contenders.items() if not copies(k)},
            {k: c for k, c in contenders.items() if copies(k) and k[0] != "dense"},
        ):
            if group:
                t.update(qm._time_rotating(group, args.reps))
        t = {k: t[k] for k in contenders}
        print(f"\nM = {m}:")
        print(
            f"  {'weights':8s} {'layout':16s} {'ms':>8s} {'x dense':>8s} {'x separate':>10s} {'err':>8s}"
        )
        for (name, layout), seconds in t.items():
            same_layout = seconds / t[("dense", layout.removesuffix(" copied"))]
            to_separate = seconds / t[(name, "separate")]
            err = f"{errors[(name, layout)]:8.1e}" if (name, layout) in errors else f"{'':8s}"
            print(
                f"  {name:8s} {layout:16s} {seconds * 1e3:8.2f} {same_layout:8.2f} {to_separate:10.2f} {err}"
            )
        columns = [f"{n} {lay}" for n in weights if n != "dense" for lay in LAYOUTS]
        plotted.append(
            (
                str(m),
                [
                    t[(n, lay)] / t[("dense", lay)]
                    for n in weights
                    if n != "dense"
                    for lay in LAYOUTS
                ],
            )
        )

    plot_tables.print_ratios(
        "ratio to the dense model laid out the same way:", "M", columns, plotted
    )
    if args.plot is not None:
        plot_tables.plot_ratios(
            args.plot,
            f"stacked quantized layers / dense, same layout ({args.layers} x d={args.d})",
            "M",
            columns,
            plotted,
        )


@contextlib.contextmanager
def _without_stacked_kernel():
    """The registry without ``plugin_api.STACKED_KERNEL_NAME``: a stack's layers are sliced."""
    saved = kernels.registered_kernels(plugin_api.STACKED_KERNEL_NAME)
    for platform in saved:
        kernels.unregister_kernel(plugin_api.STACKED_KERNEL_NAME, platform)
    try:
        yield
    finally:
        for platform, impl in saved.items():
            kernels.register_kernel(plugin_api.STACKED_KERNEL_NAME, platform, impl)


def _dense(w):
    return w if isinstance(w, jax.Array) else w.materialize()


if __name__ == "__main__":
    main()

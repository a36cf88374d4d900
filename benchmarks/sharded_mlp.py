"""A tensor-parallel MLP block with quantized weights, against the same block in float32.

``gelu(x @ W_up) @ W_down`` written as plain JAX under one ``jax.jit``, its weights split
Megatron-style over a mesh axis ``tp``: ``W_up`` by columns, ``W_down`` by rows (whole scale
blocks per device), so each device multiplies its own shards and the down-projection's
partial products are summed. Contenders, measured in one run: float32 weights split that way
(XLA's dense dots), each quantized format split that way, and each quantized format
replicated (every device holding and multiplying the whole weight: what an unsplit weight,
or a kernel call XLA cannot partition, costs). For each M it prints milliseconds (median of
--reps interleaved calls), the ratio to the split float32 block, and per device the compiled
program's argument and temporary bytes and its all-gathers. Results are checked against the
block on the dequantized weights.

On a CPU-only machine the mesh is --devices fake CPU devices sharing its cores (their times
add up); with accelerators it uses that many of them.

Usage: python3 benchmarks/sharded_mlp.py [--devices 8] [--d 4096] [--hidden 14336] [--m 1 16]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def _parse() -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=8, help="mesh size (default 8)")
    parser.add_argument("--d", type=int, default=4096, help="model width (default 4096)")
    parser.add_argument("--hidden", type=int, default=14336, help="MLP width (default 14336)")
    parser.add_argument("--m", type=int, nargs="+", default=[1, 16], help="rows of x")
    parser.add_argument("--reps", type=int, default=7, help="timed calls per contender")
    import plot_tables  # benchmarks/, the script's directory

    plot_tables.add_plot_option(parser)
    args = parser.parse_args()
    plot_tables.check_plot_option(parser, args)
    if args.devices < 2:
        parser.error(f"--devices must be at least 2 to split a weight, got {args.devices}")
    if args.hidden % (64 * args.devices):
        parser.error(
            f"--hidden {args.hidden} must split into whole 64-row blocks over {args.devices} "
            f"devices (a multiple of {64 * args.devices})"
        )
    return parser, args


def main() -> int:
    parser, args = _parse()
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = (
            f"{flags} --xla_force_host_platform_device_count={args.devices}".strip()
        )
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import jax
    import numpy as np
    import plot_tables
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxcore import quant
    from jaxcore.implicit import implicit
    from jaxcore.quant._sharding import shard_like_logical

    if jax.device_count() < args.devices:
        parser.error(f"--devices {args.devices}: only {jax.device_count()} devices here")
    mesh = jax.make_mesh(
        (args.devices,),
        ("tp",),
        axis_types=(jax.sharding.AxisType.Auto,),
        devices=jax.devices()[: args.devices],
    )
    rng = np.random.default_rng(0)
    up = (rng.standard_normal((args.d, args.hidden)) / np.sqrt(args.d)).astype(np.float32)
    down = (rng.standard_normal((args.hidden, args.d)) / np.sqrt(args.hidden)).astype(np.float32)
    formats = {
        "int8": lambda w: quant.ArrayInt8.quantize(w),
        "int4": lambda w: quant.ArrayInt4.quantize(w, 64),
        "nf4": lambda w: quant.ArrayNF4.quantize(w, 64),
        "nf4-dq": lambda w: quant.ArrayNF4.quantize(w, 64, double_quant=True),
    }
    split_up, split_down = NamedSharding(mesh, P(None, "tp")), NamedSharding(mesh, P("tp", None))
    whole = NamedSharding(mesh, P())
    contenders = {"f32 split": (jax.device_put(up, split_up), jax.device_put(down, split_down))}
    references = {"f32": (up, down)}
    for name, quantize in formats.items():
        qu, qd = quantize(up), quantize(down)
        references[name] = (np.asarray(qu.materialize()), np.asarray(qd.materialize()))
        contenders[f"{name} split"] = (
            shard_like_logical(qu, split_up),
            shard_like_logical(qd, split_down),
        )
        contenders[f"{name} replicated"] = (
            shard_like_logical(qu, whole),
            shard_like_logical(qd, whole),
        )
    block = jax.jit(implicit(lambda x, a, b: jax.nn.gelu(x @ a) @ b))
    print(
        f"MLP d={args.d} hidden={args.hidden}, tp={args.devices} "
        f"({jax.devices()[0].platform}: {jax.devices()[0].device_kind}); median of {args.reps}"
    )
    names = list(contenders)
    table = []
    for m in args.m:
        x = jax.device_put(rng.standard_normal((m, args.d)).astype(np.float32), whole)
        compiled, times = {}, {name: [] for name in names}
        print(f"\nM = {m}")
        print(
            f"  {'contender':16s} {'ms':>9s} {'x f32':>7s} {'args MiB':>9s} {'temp MiB':>9s} gathers  error"
        )
        for name, (a, b) in contenders.items():
            compiled[name] = block.lower(x, a, b).compile()
            block(x, a, b).block_until_ready()
        for _ in range(args.reps):
            for name, (a, b) in contenders.items():
                start = time.perf_counter()
                block(x, a, b).block_until_ready()
                times[name].append(time.perf_counter() - start)
        base = statistics.median(times["f32 split"])
        ratios = []
        for name, (a, b) in contenders.items():
            ra, rb = references[name.split()[0]]
            want = jax.nn.gelu(np.asarray(x) @ ra) @ rb
            got = np.asarray(block(x, a, b))
            error = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
            memory = compiled[name].memory_analysis()
            text = compiled[name].as_text()
            gathers = text.count("all-gather(") + text.count("all-gather-start(")
            t = statistics.median(times[name])
            ratios.append(t / base)
            print(
                f"  {name:16s} {t * 1e3:9.3f} {t / base:6.2f}x "
                f"{memory.argument_size_in_bytes / 2**20:9.3f} "
                f"{memory.temp_size_in_bytes / 2**20:9.3f} {gathers:7d}  {error:.1e}"
            )
        table.append((str(m), ratios))
    title = f"ratio to the split float32 MLP, tp={args.devices} (time per call)"
    plot_tables.print_ratios(title, "M", names, table)
    if args.plot is not None:
        plot_tables.plot_ratios(args.plot, title, "M", names, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

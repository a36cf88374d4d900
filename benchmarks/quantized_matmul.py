"""Weight-only quantized matmul: what the fused kernels buy, measured side by side.

On a GPU / TPU, for each format (int8 per-channel, int4 / NF4 in 64-row blocks, NF4 with
double-quantized absmax) and each M in --m it prints, all measured in the same run:

* bytes per weight of the stored format (codes + scales, from the arrays themselves);
* the plugin kernel (Pallas Triton / Mosaic, via the registry call) against XLA's
  dequantize-then-matmul and against a dense bf16 matmul, as time ratios, plus the
  achieved HBM bandwidth (weight + activation + output bytes / time) as a fraction of the
  device's peak (H100 SXM 3.35 TB/s, H200 4.8 TB/s; others: --peak-tbps).
  Goal at M <= 16: >= 80 % of peak for int8 and >= 75 % for int4 / NF4.

On CPU (float32 activations, K = N = 4096 by default, --model-shape for (4096, 14336)) it
prints the machine (CPU model, cores, the native kernels' instruction set) and, for int8
per-channel and in 32-row blocks, int4 and NF4 in 64-row blocks, NF4 double-quant, and
int8 in 32-row blocks and int4 with float16 scales (``-f16``, llama.cpp's scale dtype):

* the native kernel of the ``jaxcore-cpu`` plugin (``jaxcore_cpu``, via XLA's FFI), the
  portable reference kernel (what runs without the plugin) and XLA's dense float32 matmul,
  each as milliseconds, ratio to dense and weight GB/s (stored bytes / time);
* ONNX Runtime's 4-bit ``MatMulNBits`` (com.microsoft, --ort-block rows per block; with
  float32 and with int8 activation compute) when ``onnxruntime`` and ``onnx`` import.
* ggml's (llama.cpp's) ``mul_mat`` of q8_0 and q4_0 weights when ``ggml-python`` imports
  (benchmarks/_ggml.py says how to build it as llama.cpp does).

Every CPU contender rotates over enough distinct copies of its weight that each call reads
the weight from memory: at least --rotate-mb (default: 128 MB or 4x the L3 cache, the
larger) per contender, dense float32 included. One matrix would sit in a 32 MB L3 in its
quantized form and flatter the quantized side.

Timings are medians of --reps interleaved repetitions (each repetition times every
contender once, in a freshly shuffled order, so drift and the call that ran just before hit
all of them alike) after a compile-and-warm-up call. On CPU
each timed call is one jitted program of --chain matmuls (default 8), each by its own weight
copy and each waiting for the one before, and the time per matmul is the call's time over
--chain: a model's matmuls run inside one program, and a lone call's dispatch (~0.1-0.2 ms
through JAX just after another computation, on a 2-vCPU VM) would be timed as part of a
0.3 ms matmul. ``--chain 1`` times single calls. ONNX Runtime runs --chain sessions back to
back per timed sample.

Usage: python3 benchmarks/quantized_matmul.py [--k 4096] [--n 4096] [--m 1 16 256]
       python3 benchmarks/quantized_matmul.py --model-shape          # CPU: K=4096, N=14336
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time

# Run from a checkout without installing jaxcore.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import _chain  # benchmarks/, the script's directory (as plot_tables)
import _ggml
import jax
import jax.numpy as jnp
import numpy as np
import plot_tables

import jaxcore
from jaxcore import kernels, quant

# ggml's products against float64 x @ w, relative to the product's norm: q8_0 measured
# ~0.008, q4_0 ~0.08 (both quantize the weight; q8_0 the activations too).
_GGML_TOLERANCE = {"ggml-q8_0": 0.03, "ggml-q4_0": 0.25}

# Peak HBM bandwidth (bytes/s) by device kind substring.
_PEAK_HBM = {"H100": 3.35e12, "H200": 4.8e12}


def _formats(w):
    k = w.shape[0]
    return {
        "int8": quant.ArrayInt8.quantize(w, block_size=k),
        "int4": quant.ArrayInt4.quantize(w, 64),
        "nf4": quant.ArrayNF4.quantize(w, 64),
        "nf4-dq": quant.ArrayNF4.quantize(w, 64, double_quant=True),
    }


def _time(fns: dict, args: dict, reps: int) -> dict:
    """Median seconds per call of each jitted fn, interleaved across repetitions."""
    for name, fn in fns.items():
        jax.block_until_ready(fn(*args[name]))
    samples = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*args[name]))
            samples[name].append(time.perf_counter() - t0)
    return {name: statistics.median(s) for name, s in samples.items()}


def _peak(device, override_tbps):
    if override_tbps:
        return override_tbps * 1e12
    for kind, peak in _PEAK_HBM.items():
        if kind in device.device_kind:
            return peak
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=None, help="contracted size (default 4096)")
    parser.add_argument("--n", type=int, default=None, help="output columns (default 4096)")
    parser.add_argument(
        "--model-shape",
        action="store_true",
        help="K=4096, N=14336 (an MLP up-projection of a 7B-class model)",
    )
    parser.add_argument("--m", type=int, nargs="+", default=[1, 16, 256])
    parser.add_argument("--reps", type=int, default=None, help="default 50 (accelerator), 15 (CPU)")
    parser.add_argument("--peak-tbps", type=float, default=None)
    parser.add_argument(
        "--rotate-mb",
        type=float,
        default=None,
        help="CPU: weight bytes each contender rotates over (default: max(128, 4 x L3) MB)",
    )
    parser.add_argument(
        "--path",
        choices=["auto", "gemv", "gemm"],
        default="auto",
        help="CPU: the native kernel's path",
    )
    parser.add_argument(
        "--precision",
        choices=["float32", "int8", "both"],
        default="both",
        help="CPU: the native kernel's activation precision(s) to time "
        "(int8 = jaxcore_cpu's llama.cpp-style int8 activations)",
    )
    parser.add_argument(
        "--ort-block",
        type=int,
        default=32,
        help="CPU: rows per block of ONNX Runtime's MatMulNBits (16..256)",
    )
    parser.add_argument(
        "--no-reference", action="store_true", help="CPU: skip the (slow) portable reference kernel"
    )
    parser.add_argument(
        "--busy-core",
        action="store_true",
        help="CPU: keep one core busy with another process while timing, to "
        "see how each contender copes with a core it cannot have",
    )
    parser.add_argument(
        "--chain",
        type=int,
        default=8,
        help="CPU: matmuls (each by its own weight copy, in sequence) per timed jitted call; "
        "1 times single calls (their dispatch included)",
    )
    parser.add_argument(
        "--isa",
        default=None,
        help="CPU: pin the native kernels to this instruction set (portable, avx2, avxvnni, "
        "avx512, amx; aarch64: portable, dotprod; default: the best the CPU has), e.g. to compare "
        "AVX2 and AVX-512 on one machine",
    )
    plot_tables.add_plot_option(parser)
    args = parser.parse_args()
    plot_tables.check_plot_option(parser, args)
    if args.chain < 1:
        parser.error(f"--chain must be at least 1, got {args.chain}")
    if args.model_shape:
        args.k, args.n = args.k or 4096, args.n or 14336
    device = jax.devices()[0]
    if device.platform == "cpu":
        with _busy_core(args.busy_core):
            _cpu_main(args)
    else:
        _accelerator_main(args, device)


@contextlib.contextmanager
def _busy_core(enabled: bool):
    """Runs a process that spins on one core for the duration (when ``enabled``)."""
    if not enabled:
        yield
        return
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    print(f"one core kept busy by process {spinner.pid} while timing")
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def _accelerator_main(args, device):
    k = args.k or 4096
    n = args.n or 4096
    reps = args.reps or 50
    info = jaxcore.plugins.info()
    print(
        f"device: {device.device_kind} ({device.platform}); K={k} N={n}; "
        f"plugins for {', '.join(info.platforms) or 'none'}; median of {reps}"
    )

    w = jax.random.normal(jax.random.key(0), (k, n), jnp.float32) * 0.02
    weights = _formats(w)
    print("\nbytes per weight (codes + scales):")
    for name, q in weights.items():
        print(f"  {name:7s} {q.storage_nbytes / (k * n):.4f}   (bf16 dense: 2, f32 dense: 4)")

    act_dtype = jnp.bfloat16
    fused = jax.jit(lambda x, q: kernels.quantized_matmul(x, q))
    xla_dequant = jax.jit(
        lambda x, q: jnp.dot(
            x, q.materialize().astype(x.dtype), preferred_element_type=jnp.float32
        ).astype(x.dtype)
    )
    dense = jax.jit(
        lambda x, wd: jnp.dot(x, wd, preferred_element_type=jnp.float32).astype(x.dtype)
    )
    w_dense = w.astype(act_dtype)
    peak = _peak(device, args.peak_tbps)

    plotted: list[tuple[str, list[float | None]]] = []
    for m in args.m:
        x = jax.random.normal(jax.random.key(m), (m, k), act_dtype)
        # Every contender of this M in one interleaved timing run.
        fns, call_args = {"dense": dense}, {"dense": (x, w_dense)}
        for name, q in weights.items():
            fns[name], call_args[name] = fused, (x, q)
            fns[f"{name}/xla"], call_args[f"{name}/xla"] = xla_dequant, (x, q)
        t = _time(fns, call_args, reps)
        print(f"\nM = {m}: dense {act_dtype.__name__} matmul {t['dense'] * 1e3:.3f} ms")
        for name, q in weights.items():
            line = (
                f"  {name:7s} kernel {t[name] * 1e3:8.3f} ms   "
                f"kernel/dense {t[name] / t['dense']:6.2f}"
            )
            moved = q.storage_nbytes + x.nbytes + m * n * x.dtype.itemsize
            bw = moved / t[name]
            line += (
                f"   kernel/xla_dequant {t[name] / t[name + '/xla']:5.2f}   {bw / 1e12:5.2f} TB/s"
            )
            if peak:
                line += f" = {100 * bw / peak:5.1f} % of peak HBM"
            print(line)
        plotted.append((str(m), [t[name] / t["dense"] for name in weights]))
    if args.plot is not None:
        plot_tables.plot_ratios(
            args.plot,
            f"kernel / dense {act_dtype.__name__}, {device.device_kind}, K={k} N={n}",
            "M",
            list(weights),
            plotted,
        )


# ----------------------------------------------------------------------------- CPU


def _cpu_formats(w):
    k = w.shape[0]
    return {
        "int8": quant.ArrayInt8.quantize(w, block_size=k),
        "int8-b32": quant.ArrayInt8.quantize(w, block_size=32),
        "int8-b32-f16": quant.ArrayInt8.quantize(w, block_size=32, scale_dtype="float16"),
        "int4": quant.ArrayInt4.quantize(w, 64),
        "int4-f16": quant.ArrayInt4.quantize(w, 64, scale_dtype="float16"),
        "nf4": quant.ArrayNF4.quantize(w, 64),
        "nf4-dq": quant.ArrayNF4.quantize(w, 64, double_quant=True),
    }


def _l3_bytes() -> int | None:
    try:
        text = pathlib.Path("/sys/devices/system/cpu/cpu0/cache/index3/size").read_text().strip()
    except OSError:
        return None
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def _cpu_model() -> tuple[str, list[str]]:
    model, flags = platform.processor() or platform.machine(), []
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model in (
                "",
                platform.machine(),
                platform.processor(),
            ):
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                wanted = (
                    "avx2",
                    "fma",
                    "avx512f",
                    "avx512bw",
                    "avx512_vnni",
                    "avx_vnni",
                    "amx_tile",
                )
                flags = [f for f in wanted if f in value.split()]
    except OSError:
        pass
    return model, flags


def _native():
    """The jaxcore_cpu module with its library loaded, or (None, why not)."""
    try:
        import jaxcore_cpu
    except ImportError as e:
        return None, f"jaxcore_cpu is not importable ({e})"
    try:
        jaxcore_cpu.isa()
    except Exception as e:  # noqa: BLE001 - reported, then the benchmark goes on without it
        return None, str(e)
    return jaxcore_cpu, None


def _copies(tree, count):
    """``count`` copies of a pytree of arrays, each in its own buffers."""
    return [tree] + [
        jax.tree_util.tree_map(lambda a: jnp.array(a, copy=True), tree) for _ in range(count - 1)
    ]


def _copy_count(rotate: int, nbytes: int, chain: int) -> int:
    """Weight copies for ``chain``-matmul calls to cycle over ``rotate`` bytes: whole sets of
    ``chain`` distinct copies, at least two sets."""
    return chain * max(2, math.ceil(rotate / (chain * nbytes)))


def _sets(copies: list, chain: int) -> list:
    """The copies as consecutive sets of ``chain``."""
    return [copies[i : i + chain] for i in range(0, len(copies), chain)]


def _nbytes(tree) -> int:
    return sum(a.nbytes for a in jax.tree_util.tree_leaves(tree))


def _time_rotating(contenders: dict, reps: int, per_call: int = 1) -> dict:
    """Median seconds per call over ``per_call``; contender = (fn, [args for copy 0, 1, ...]).

    Each repetition calls every contender once, on its next weight copy (or set of copies),
    in an order shuffled afresh per repetition (a fixed seed, so runs are comparable): what
    runs just before a call shapes its time, and a fixed order would hand one contender the
    same neighbour every time. On the 2-vCPU Zen 4 VM the native call right after XLA's
    dense float32 matmul ran 10-30 % slower than the same call after another native one,
    so in a fixed order the first quantized format always paid that.
    """
    for fn, arg_sets in contenders.values():
        for args in arg_sets:  # compiles, and touches every copy once
            jax.block_until_ready(fn(*args))
    samples = {name: [] for name in contenders}
    order = list(contenders)
    shuffle = np.random.default_rng(0).shuffle
    for rep in range(reps):
        shuffle(order)
        for name in order:
            fn, arg_sets = contenders[name]
            args = arg_sets[rep % len(arg_sets)]
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*args))
            samples[name].append(time.perf_counter() - t0)
    return {name: statistics.median(s) / per_call for name, s in samples.items()}


def _ort_sessions(k, n, block, count, accuracy_level):
    """``count`` ONNX Runtime sessions of a 4-bit MatMulNBits (distinct weights each), and
    the stored bytes of one weight; or (None, reason)."""
    try:
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError as e:
        return None, f"ONNX Runtime MatMulNBits skipped: {e} (pip install onnxruntime onnx)"
    blocks = k // block
    rng = np.random.default_rng(0)
    options = ort.SessionOptions()
    options.intra_op_num_threads = _usable_cpus()
    options.inter_op_num_threads = 1
    # ORT's workers otherwise spin after each run, taking the cores from the next contender.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sessions, check = [], None
    for i in range(count):
        packed = rng.integers(0, 256, (n, blocks, block // 2), dtype=np.uint8)
        scales = rng.uniform(0.001, 0.01, (n, blocks)).astype(np.float32)
        node = helper.make_node(
            "MatMulNBits",
            ["A", "B", "scales"],
            ["Y"],
            domain="com.microsoft",
            K=k,
            N=n,
            bits=4,
            block_size=block,
            accuracy_level=accuracy_level,
        )
        graph = helper.make_graph(
            [node],
            "matmul_nbits",
            [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", k])],
            [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", n])],
            initializer=[
                numpy_helper.from_array(packed, "B"),
                numpy_helper.from_array(scales.reshape(-1), "scales"),
            ],
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
            # Opset 17's own IR version: a newer onnx would stamp one an older runtime refuses.
            ir_version=8,
        )
        try:
            sessions.append(
                ort.InferenceSession(
                    model.SerializeToString(), options, providers=["CPUExecutionProvider"]
                )
            )
        except Exception as e:  # onnxruntime raises its own (pybind) exception types
            return None, f"ONNX Runtime MatMulNBits skipped: onnxruntime {ort.__version__}: {e}"
        if i == 0:
            check = (packed, scales)
    # One correctness check: q = nibble - 8 (no zero points given), element 2j in the low
    # nibble of byte j of its block.
    packed, scales = check
    nibbles = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(n, k).astype(np.float64) - 8
    w = (nibbles * np.repeat(scales.astype(np.float64), block, axis=1)).T  # (K, N)
    x = rng.standard_normal((2, k)).astype(np.float32)
    got = sessions[0].run(None, {"A": x})[0]
    want = x.astype(np.float64) @ w
    err = np.max(np.abs(got - want)) / np.max(np.abs(x) @ np.abs(w))
    if err > 1e-2:
        return None, f"ONNX Runtime MatMulNBits skipped: its result is off by {err:.2g}"
    version = f"onnxruntime {ort.__version__} (onnx {onnx.__version__})"
    return (sessions, packed.nbytes + scales.nbytes, version), None


def _native_matmul(native, x, q, *, path, prec):
    """The native kernel as ``x @ q`` runs it: double-quantized scales go in compressed."""
    if getattr(q, "double_quant", False):
        return native.quantized_matmul_dq(
            x,
            q.qvalue,
            q.scale,
            q.scale_group_scale,
            q.scale_offset,
            fmt=q.fmt,
            block_size=q.block_size,
            path=path,
            precision=prec,
        )
    return native.quantized_matmul(
        x, q.qvalue, q.block_scales(), fmt=q.fmt, block_size=q.block_size, path=path, precision=prec
    )


def _usable_cpus() -> int:
    """Logical CPUs this process may run on (``taskset`` narrows it; XLA's pool follows)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _cpu_main(args):
    k, n = args.k or 4096, args.n or 4096
    reps = args.reps or 15
    chain = args.chain
    l3 = _l3_bytes()
    rotate = int((args.rotate_mb or max(128, 4 * (l3 or 0) / 2**20)) * 2**20)
    model, flags = _cpu_model()
    native, why_not = _native()
    if native is not None and args.isa:
        native.set_isa(args.isa)  # raises, naming the choices, where the CPU lacks it
    info = jaxcore.plugins.info()
    cpus = f"{_usable_cpus()} of {os.cpu_count()} logical CPUs usable"
    print(
        f"machine: {model}; {cpus}; {', '.join(flags) or 'no AVX2'}; L3 {l3 / 2**20:.0f} MB"
        if l3
        else f"machine: {model}; {cpus}"
    )
    if native is not None:
        serves = kernels.registered_kernels("quantized_matmul").get("cpu") is native.IMPLS["cpu"]
        isa = native.isa()
        if isa == "avxvnni" and "avx_vnni" not in flags:
            isa += " in its AVX-512 encoding (this CPU has no AVX-VNNI)"
        print(
            f"native kernels: ISA {isa} (CPU supports {native.detected_isa()}), "
            f"path {args.path}; {native.library_path()}"
            f"{'' if serves else ' (loaded here; jaxcore itself is not using it)'}"
        )
    else:
        print(f"native kernels: unavailable ({why_not})")
    print(
        f"jax {jax.__version__}, plugins for {', '.join(info.platforms) or 'none'}; "
        f"K={k} N={n}, float32 activations; each contender rotates over >= "
        f"{rotate / 2**20:.0f} MB of weights; median of {reps} interleaved repetitions; "
        + (
            f"{chain} matmuls in sequence per timed jitted call, time per matmul = call / {chain}"
            if chain > 1
            else "one matmul per timed call"
        )
    )

    w = jax.random.normal(jax.random.key(0), (k, n), jnp.float32) * 0.02
    weights = _cpu_formats(w)
    dense_copies = _copies(w, _copy_count(rotate, w.nbytes, chain))
    copies = {
        name: _copies(q, _copy_count(rotate, q.storage_nbytes, chain))
        for name, q in weights.items()
    }
    print("\nweights (codes + scales): bytes per weight, copies rotated")
    print(f"  {'dense f32':12s} 4.0000  x{len(dense_copies)}")
    for name, q in weights.items():
        print(f"  {name:12s} {q.storage_nbytes / (k * n):.4f}  x{len(copies[name])}")

    ort_runs, ort_note = {}, None
    ort_copies = _copy_count(rotate, k * n // 2 + k // args.ort_block * n * 4, chain)
    for level, suffix in [(0, ""), (4, "-i8")]:
        made, ort_note = _ort_sessions(k, n, args.ort_block, ort_copies, level)
        if made is None:
            break
        sessions, nbytes, version = made
        ort_runs[f"ort-q4-b{args.ort_block}{suffix}"] = (sessions, nbytes)
    if ort_runs:
        print(f"  ONNX Runtime MatMulNBits ({version}; -i8: accuracy_level=4, int8 activations)")
    elif ort_note:
        print(f"  {ort_note}")

    ggml_runs = {}
    ggml, ggml_note = _ggml.load()
    if ggml is not None:
        w_np = np.asarray(w)
        for fmt in _ggml.FORMATS:
            count = _copy_count(rotate, _ggml.stored_bytes(ggml, fmt, k, n), chain)
            c = _ggml.Contender(ggml, fmt, w_np, count, chain, _usable_cpus())
            ggml_runs[f"ggml-{fmt}"] = c
            print(
                f"  {'ggml-' + fmt:12s} {c.nbytes / (k * n):.4f}  x{count}"
                f"   ({ggml_note}; int8 activations)"
            )
    else:
        print(f"  {ggml_note}")

    dense = _chain.chained(jnp.dot, chain)
    ref = _chain.chained(
        lambda x, q: kernels.reference_quantized_matmul(
            x, q.qvalue, q.block_scales(), fmt=q.fmt, block_size=q.block_size
        ),
        chain,
    )
    precisions = ["float32", "int8"] if args.precision == "both" else [args.precision]
    nat = {}
    if native is not None:
        for prec in precisions:
            nat[prec] = _chain.chained(
                functools.partial(_native_matmul, native, path=args.path, prec=prec), chain
            )
    suffix = {"float32": "", "int8": " i8"}

    summary = {}
    for m in args.m:
        x = jax.random.normal(jax.random.key(m), (m, k), jnp.float32)
        x_np = np.asarray(x)
        contenders = {"dense": (dense, [(x, ws) for ws in _sets(dense_copies, chain)])}
        for name in weights:
            sets = [(x, qs) for qs in _sets(copies[name], chain)]
            for prec, fn in nat.items():
                contenders[name + suffix[prec]] = (fn, sets)
            if not args.no_reference:
                contenders[f"{name}/ref"] = (ref, sets)
        for name, (sessions, _) in ort_runs.items():
            contenders[name] = (
                lambda group, a: [s.run(None, {"A": a})[0] for s in group],
                [(group, x_np) for group in _sets(sessions, chain)],
            )
        for name, c in list(ggml_runs.items()):
            try:
                c.check(x_np, w_np, _GGML_TOLERANCE[name])
            except RuntimeError as e:  # a wrong product is no contender: say so, time the rest
                print(f"  {name} skipped from M = {m} on: {e}")
                c.close()
                del ggml_runs[name]
                continue
            contenders[name] = c.contender(x_np)
        t = _time_rotating(contenders, reps, per_call=chain)
        base = t["dense"]
        print(
            f"\nM = {m}: dense f32 {base * 1e3:.3f} ms, {w.nbytes / base / 1e9:.1f} GB/s of weight"
        )
        print(
            f"  {'format':12s} {'native ms':>10s} {'x dense':>8s} {'GB/s':>6s}"
            f"   {'int8-act ms':>11s} {'x dense':>8s} {'GB/s':>6s}"
            f"   {'reference ms':>12s} {'x dense':>8s} {'GB/s':>6s}"
        )
        for name, q in weights.items():
            cells = []
            for key in (name, f"{name} i8", f"{name}/ref"):
                if key in t:
                    cells.append(
                        f"{t[key] * 1e3:10.3f} {t[key] / base:8.3f} "
                        f"{q.storage_nbytes / t[key] / 1e9:6.1f}"
                    )
                else:
                    cells.append(f"{'-':>10s} {'-':>8s} {'-':>6s}")
            print(f"  {name:12s} {cells[0]}   {cells[1]}   {cells[2]:>29s}")
            for prec in precisions:
                summary.setdefault(m, {})[name + suffix[prec]] = t.get(name + suffix[prec])
        others = [(name, nbytes, "ONNX Runtime") for name, (_, nbytes) in ort_runs.items()]
        others += [(name, c.nbytes, "ggml, llama.cpp's library") for name, c in ggml_runs.items()]
        for name, nbytes, source in others:
            print(
                f"  {name:13s} {t[name] * 1e3:7.3f} {t[name] / base:8.3f} "
                f"{nbytes / t[name] / 1e9:6.1f}   ({source})"
            )
            summary.setdefault(m, {})[name] = t[name]
        for name in summary.get(m, {}):
            if summary[m][name] is not None:
                summary[m][name] /= base

    for c in ggml_runs.values():
        c.close()
    if native is not None or ort_runs or ggml_runs:
        names = [c + suffix[p] for p in precisions for c in weights] + list(ort_runs)
        names += list(ggml_runs)
        names = [c for c in names if any(summary[m].get(c) is not None for m in summary)]
        print(
            f"\nratio to dense f32 (native kernel, float32 activations; 'i8': int8 "
            f"activations; ONNX Runtime and ggml where named), K={k} N={n}:"
        )
        print("  | M | " + " | ".join(names) + " |")
        print("  |---|" + "---|" * len(names))
        for m in args.m:
            print(
                f"  | {m} | "
                + " | ".join(
                    f"{summary[m][c]:.2f}x" if summary[m].get(c) is not None else "-" for c in names
                )
                + " |"
            )
        if args.plot is not None:
            plot_tables.plot_ratios(
                args.plot,
                f"ratio to dense f32 on CPU, K={k} N={n}",
                "M",
                names,
                [(str(m), [summary[m].get(c) for c in names]) for m in args.m],
            )
    elif args.plot is not None:
        print("plot: nothing to draw (no native kernel, ONNX Runtime or ggml contender)")


if __name__ == "__main__":
    main()

"""Weight-only quantized matmul: what the fused kernels buy, measured side by side.

For each format (int8 per-channel, int4 / NF4 in 64-row blocks, NF4 with double-quantised
absmax) and each M in --m it prints, all measured in the same run on the same device:

* bytes per weight of the stored format (codes + scales, from the arrays themselves);
* on CPU: the portable reference kernel (what ``jaxcore.kernels.quantized_matmul`` runs on
  CPU) against a dense float32 matmul of the same shape, as a time ratio;
* on a GPU / TPU: the plugin kernel (Pallas Triton / Mosaic, via the same registry call)
  against XLA's dequantise-then-matmul and against a dense bf16 matmul, as time ratios,
  plus the achieved HBM bandwidth (weight + activation + output bytes / time) as a
  fraction of the device's peak (H100 SXM 3.35 TB/s, H200 4.8 TB/s; others: --peak-tbps).
  Goal at M <= 16: >= 80 % of peak for int8 and >= 75 % for int4 / NF4.

Timings are medians of --reps interleaved repetitions (each repetition times every
contender once, so drift hits all of them alike) after a compile-and-warm-up call.

Usage: python3 benchmarks/quantized_matmul.py [--k 4096] [--n 4096] [--m 1 16 256]
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

# Run from a checkout without installing jaxcore.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax
import jax.numpy as jnp

import jaxcore
from jaxcore import kernels, quant

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
    parser.add_argument("--k", type=int, default=None, help="contracted size (default 4096 on "
                        "accelerators, 2048 on CPU)")
    parser.add_argument("--n", type=int, default=None, help="output columns (same defaults)")
    parser.add_argument("--m", type=int, nargs="+", default=[1, 16, 256])
    parser.add_argument("--reps", type=int, default=None, help="default 50 (accelerator), 9 (CPU)")
    parser.add_argument("--peak-tbps", type=float, default=None)
    args = parser.parse_args()

    device = jax.devices()[0]
    on_cpu = device.platform == "cpu"
    k = args.k or (2048 if on_cpu else 4096)
    n = args.n or (2048 if on_cpu else 4096)
    reps = args.reps or (9 if on_cpu else 50)
    info = jaxcore.plugins.info()
    print(f"device: {device.device_kind} ({device.platform}); K={k} N={n}; "
          f"plugins for {', '.join(info.platforms) or 'none'}; median of {reps}")

    w = jax.random.normal(jax.random.key(0), (k, n), jnp.float32) * 0.02
    weights = _formats(w)
    print("\nbytes per weight (codes + scales):")
    for name, q in weights.items():
        print(f"  {name:7s} {q.storage_nbytes / (k * n):.4f}   (bf16 dense: 2, f32 dense: 4)")

    act_dtype = jnp.float32 if on_cpu else jnp.bfloat16
    fused = jax.jit(lambda x, q: kernels.quantized_matmul(x, q))
    xla_dequant = jax.jit(lambda x, q: jnp.dot(x, q.materialize().astype(x.dtype),
                                               preferred_element_type=jnp.float32).astype(x.dtype))
    dense = jax.jit(lambda x, wd: jnp.dot(x, wd, preferred_element_type=jnp.float32).astype(x.dtype))
    w_dense = w.astype(act_dtype)
    peak = _peak(device, args.peak_tbps)

    for m in args.m:
        x = jax.random.normal(jax.random.key(m), (m, k), act_dtype)
        # Every contender of this M in one interleaved timing run.
        fns, call_args = {"dense": dense}, {"dense": (x, w_dense)}
        for name, q in weights.items():
            fns[name], call_args[name] = fused, (x, q)
            if not on_cpu:
                fns[f"{name}/xla"], call_args[f"{name}/xla"] = xla_dequant, (x, q)
        t = _time(fns, call_args, reps)
        print(f"\nM = {m}: dense {act_dtype.__name__} matmul {t['dense'] * 1e3:.3f} ms")
        for name, q in weights.items():
            line = (f"  {name:7s} kernel {t[name] * 1e3:8.3f} ms   "
                    f"kernel/dense {t[name] / t['dense']:6.2f}")
            if not on_cpu:
                moved = q.storage_nbytes + x.nbytes + m * n * x.dtype.itemsize
                bw = moved / t[name]
                line += (f"   kernel/xla_dequant {t[name] / t[name + '/xla']:5.2f}"
                         f"   {bw / 1e12:5.2f} TB/s")
                if peak:
                    line += f" = {100 * bw / peak:5.1f} % of peak HBM"
            print(line)


if __name__ == "__main__":
    main()

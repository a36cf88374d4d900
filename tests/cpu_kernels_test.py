"""jaxcore_cpu: the native CPU quantized-matmul kernels against a float64 reference.

Every format (int8 per-channel and blocked, int4, NF4, NF4 with double-quantized scales,
and blocks that are not a multiple of any SIMD width) x path (GEMV, GEMM, auto) x
activation dtype x result dtype x odd sizes, on every instruction set this CPU has (the
portable fallback included), against ``x @ dequantize(W)`` computed in float64 NumPy;
then the registry path (``jaxcore.kernels.quantized_matmul`` and ``x @ w``) under ``jit``,
``vmap``, ``grad`` and ``jvp``, and the FFI target's own errors for malformed calls.

The module needs ``libjaxcore_cpu_kernels.so``: Bazel provides it (``//jaxcore_cpu`` is a
dependency of the test target, which also sets ``JAXCORE_CPU_KERNELS_REQUIRED=1`` so a
missing library fails instead of skipping); pytest from a checkout finds Bazel's build
under ``bazel-bin/``, and skips the module when nothing was built.
"""

import functools
import os
import pathlib
import re
import threading
import time

import jax
import jax.numpy as jnp
import kernel_test_util
import numpy as np
import pytest
from cpu_kernel_cases import CASES, Weight, random_weight

import jaxcore_cpu
from jaxcore import implicit, kernels, plugins, quant

kernel_test_util.require_native_cpu_kernels()

TARGET = "jaxcore_cpu_quantized_matmul"
ISAS = jaxcore_cpu.available_isas()
DTYPES = {"f32": jnp.float32, "bf16": jnp.bfloat16}

# ----------------------------------------------------------------------------- helpers


np_dequant = kernel_test_util.numpy_dense  # independent float64 decoding of the layout
assert_int8_close = kernel_test_util.assert_int8_close


as64 = kernel_test_util.as64


def assert_matches(got, x, w64, out_dtype, what):
    """``got`` against ``x @ w64`` in float64, relative to the sum of |x||w| per entry."""
    x64 = as64(x)
    want = x64 @ w64
    bound = 2e-5 * (np.abs(x64) @ np.abs(w64)) + 1e-30
    if np.dtype(out_dtype) == np.dtype(jnp.bfloat16):
        bound = bound + 1e-2 * np.abs(want)
    assert got.shape == want.shape and got.dtype == np.dtype(out_dtype), (
        what,
        got.shape,
        got.dtype,
    )
    err = np.abs(as64(got) - want)
    bad = err > bound
    assert not bad.any(), (
        f"{what}: {int(bad.sum())} of {bad.size} entries off, first at "
        f"{np.argwhere(bad)[0].tolist()}; max error / bound {float(np.max(err / bound)):.3g}"
    )


# (M, N): M around the GEMV/GEMM boundaries (8 with AVX2, 16 with AVX-512) and past the
# GEMM row tile, N not a multiple of any SIMD width or column tile; plus N wider than a GEMV
# column task (8192 columns at M <= 2, 2048 beyond).
MN = [
    (1, 1),
    (3, 7),
    (4, 65),
    (5, 130),
    (9, 100),
    (16, 200),
    (17, 33),
    (33, 130),
    (2, 8300),
    (5, 2100),
]


def shapes(ks):
    """(M, N, K) triples: every (M, N) pair once, cycling through the K values."""
    return [(m, n, ks[i % len(ks)]) for i, (m, n) in enumerate(MN)]


# ----------------------------------------------------------------------------- the kernels


@pytest.mark.parametrize("out_name", list(DTYPES))
@pytest.mark.parametrize("x_name", list(DTYPES))
@pytest.mark.parametrize("path", ["gemv", "gemm", "auto"])
@pytest.mark.parametrize("case", list(CASES))
def test_formats_paths_dtypes_sizes_isas(case, path, x_name, out_name):
    make, ks = CASES[case]
    rng = np.random.default_rng(sum(map(ord, case + path)))
    for m, n, k in shapes(ks):
        w = make(rng, k, n)
        x = jnp.asarray(rng.standard_normal((m, k)), DTYPES[x_name])
        fn = jax.jit(
            functools.partial(
                jaxcore_cpu.quantized_matmul,
                fmt=w.fmt,
                block_size=w.block_size,
                out_dtype=DTYPES[out_name],
                path=path,
            )
        )
        dense = w.dense
        for isa in ISAS:  # the ISA is read at run time: one compiled function serves all
            with jaxcore_cpu.set_isa(isa):
                got = np.asarray(fn(x, w.qvalue, w.scale))
            assert_matches(
                got, x, dense, DTYPES[out_name], f"{case} {path} {isa} M={m} N={n} K={k}"
            )


def test_large_blocked_problem_splits_across_tasks():
    """Sizes past every task and panel size of both paths (K and N split several ways)."""
    rng = np.random.default_rng(7)
    w = random_weight(rng, "int4", 1088, 2200, 64)
    for m, path in [(1, "gemv"), (3, "auto"), (70, "gemm")]:
        x = jnp.asarray(rng.standard_normal((m, 1088)), jnp.float32)
        fn = jax.jit(
            functools.partial(jaxcore_cpu.quantized_matmul, fmt="int4", block_size=64, path=path)
        )
        for isa in ISAS:
            with jaxcore_cpu.set_isa(isa):
                got = np.asarray(fn(x, w.qvalue, w.scale))
            assert_matches(got, x, w.dense, jnp.float32, f"{path} {isa} M={m}")


def test_concurrent_calls_from_threads_match_lone_calls():
    """Calls from several threads at once: each its own pool state, helpers that start late
    (after their call has ended) kept out of the next call; results bit-identical to lone
    calls (a plan's partial sums are added in a fixed order whatever the schedule)."""
    rng = np.random.default_rng(11)
    w = random_weight(rng, "int4", 512, 700, 64)
    calls = []
    for m, path, precision in [
        (1, "gemv", "float32"),
        (2, "auto", "int8"),
        (5, "auto", "int8"),
        (16, "auto", "float32"),
        (40, "gemm", "float32"),
        (3, "gemv", "float32"),
    ]:
        x = jnp.asarray(rng.standard_normal((m, 512)), jnp.float32)
        fn = jax.jit(
            functools.partial(
                jaxcore_cpu.quantized_matmul,
                fmt="int4",
                block_size=64,
                path=path,
                precision=precision,
            )
        )
        calls.append((fn, x, np.asarray(fn(x, w.qvalue, w.scale)), precision))
    mismatches = []

    def run(index):
        fn, x, want, _ = calls[index % len(calls)]
        for _ in range(25):
            got = np.asarray(fn(x, w.qvalue, w.scale))
            if not np.array_equal(got, want):
                mismatches.append(index)
                return

    threads = [threading.Thread(target=run, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not mismatches, f"threads {sorted(set(mismatches))} saw results differ"
    for _, x, want, precision in calls:  # and the lone results are right
        if precision == "float32":
            assert_matches(want, x, w.dense, jnp.float32, f"lone call M={x.shape[0]}")
        else:
            assert_int8_close(want, x, w.dense, f"lone int8-activation call M={x.shape[0]}")


def _thread_affinities():
    """Each thread of this process (by id) and the CPUs it may run on."""
    out = {}
    for task in pathlib.Path("/proc/self/task").iterdir():
        try:
            out[task.name] = os.sched_getaffinity(int(task.name))
        except OSError:  # the thread ended while we looked
            continue
    return out


@pytest.mark.skipif(
    not pathlib.Path("/proc/self/task").is_dir() or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux's /proc and two usable CPUs",
)
def test_pool_threads_keep_their_cpu_affinity():
    """A pool thread that lands on a CPU where another worker of its call runs moves itself
    to a free CPU for the call (placement.h) and must get its affinity back: after many
    contended calls (three Python threads at once, each call using XLA's pool), every thread
    of the process may still run on every CPU the process may."""
    allowed = os.sched_getaffinity(0)
    rng = np.random.default_rng(13)
    w = random_weight(rng, "int4", 1024, 1024, 64)
    fn = jax.jit(
        functools.partial(jaxcore_cpu.quantized_matmul, fmt="int4", block_size=64, precision="int8")
    )
    x = jnp.asarray(rng.standard_normal((16, 1024)), jnp.float32)
    want = np.asarray(fn(x, w.qvalue, w.scale))

    mismatches = []

    def run():
        for _ in range(60):
            if not np.array_equal(np.asarray(fn(x, w.qvalue, w.scale)), want):
                mismatches.append(1)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not mismatches, f"{len(mismatches)} contended calls differed from a lone call"
    # A pool task that joined a call late may still be on its way out (restoring its
    # affinity) when the call's caller has returned: give it a moment, not forever.
    deadline = time.monotonic() + 2.0
    while True:
        narrowed = {tid: cpus for tid, cpus in _thread_affinities().items() if cpus != allowed}
        if not narrowed or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert not narrowed, f"threads left with narrowed affinity {narrowed} (process: {allowed})"


def test_other_dtypes_are_converted():
    """float16 / float64 activations and scales, float16 results: converted around the call."""
    rng = np.random.default_rng(3)
    w = random_weight(rng, "nf4", 128, 9, 64)
    x = rng.standard_normal((3, 128)).astype(np.float16)
    got = jax.jit(
        functools.partial(
            jaxcore_cpu.quantized_matmul, fmt="nf4", block_size=64, out_dtype=jnp.float16
        )
    )(x, w.qvalue, w.scale.astype(np.float16))
    assert got.dtype == jnp.float16
    dense = np_dequant("nf4", w.qvalue, w.scale.astype(np.float16), 64)
    want = x.astype(np.float64) @ dense
    np.testing.assert_allclose(
        np.asarray(got, np.float64), want, rtol=2e-3, atol=2e-3 * np.abs(want).max()
    )
    # Default result dtype: the activations'.
    got = jaxcore_cpu.quantized_matmul(
        jnp.asarray(x, jnp.bfloat16), w.qvalue, w.scale, fmt="nf4", block_size=64
    )
    assert got.dtype == jnp.bfloat16


@pytest.mark.parametrize("m,n,k", [(0, 5, 64), (3, 0, 64), (3, 5, 0), (0, 0, 0)])
@pytest.mark.parametrize("fmt", ["int8", "nf4"])
def test_zero_sizes(fmt, m, n, k):
    rng = np.random.default_rng(0)
    w = (
        random_weight(rng, fmt, k, n, 2)
        if k
        else Weight(
            fmt,
            2,
            np.zeros((0, n), np.int8 if fmt == "int8" else np.uint8),
            np.zeros((0, n), np.float32),
        )
    )
    x = jnp.ones((m, k), jnp.bfloat16)
    for path in jaxcore_cpu.PATHS:
        got = jax.jit(
            functools.partial(
                jaxcore_cpu.quantized_matmul,
                fmt=fmt,
                block_size=2,
                out_dtype=jnp.float32,
                path=path,
            )
        )(x, w.qvalue, w.scale)
        assert got.shape == (m, n) and got.dtype == jnp.float32
        np.testing.assert_array_equal(np.asarray(got), np.zeros((m, n)))


def test_vmap_of_the_kernel_folds_the_batch_into_m():
    rng = np.random.default_rng(4)
    w = random_weight(rng, "int8", 64, 10, 32)
    x = jnp.asarray(rng.standard_normal((4, 3, 64)), jnp.float32)
    fn = functools.partial(jaxcore_cpu.quantized_matmul, fmt="int8", block_size=32, path="gemm")
    got = jax.jit(jax.vmap(lambda xb: fn(xb, w.qvalue, w.scale)))(x)
    assert_matches(np.asarray(got).reshape(12, 10), x.reshape(12, 64), w.dense, jnp.float32, "vmap")


def test_python_side_checks():
    w = random_weight(np.random.default_rng(0), "int4", 64, 8, 32)
    x = np.ones((2, 64), np.float32)
    with pytest.raises(
        ValueError, match=r"unknown kernel path 'simd'; expected one of \('auto', 'gemv', 'gemm'\)"
    ):
        jaxcore_cpu.quantized_matmul(x, w.qvalue, w.scale, fmt="int4", block_size=32, path="simd")
    with pytest.raises(
        ValueError, match=r"int4 qvalue for x of shape \(2, 62\) must have shape \(31, 8\)"
    ):
        jaxcore_cpu.quantized_matmul(x[:, :62], w.qvalue, w.scale, fmt="int4", block_size=31 * 2)
    with pytest.raises(TypeError, match="int4 qvalue must be uint8, got int8"):
        jaxcore_cpu.quantized_matmul(
            x, w.qvalue.astype(np.int8), w.scale, fmt="int4", block_size=32
        )


# ----------------------------------------------------------------------------- through jaxcore


@pytest.fixture
def native_cpu_kernel(monkeypatch):
    """The native kernel serves CPU (whatever JAXCORE_PLUGINS said); accelerator kernels
    are taken out so that jit traces one branch; the registry is restored afterwards."""
    monkeypatch.delenv(kernels.INTERPRET_ENV_VAR, raising=False)
    with kernel_test_util.registry_restored("quantized_matmul", "quantized_matmul_dq"):
        jaxcore_cpu.initialize()
        yield


def quantized_arrays(w):
    k = w.shape[0]
    return (
        {
            "int8-channel": quant.ArrayInt8.quantize(w),
            "int8-b32": quant.ArrayInt8.quantize(w, block_size=32),
            "int4": quant.ArrayInt4.quantize(w, 64),
            "nf4": quant.ArrayNF4.quantize(w, 64),
            "nf4-dq": quant.ArrayNF4.quantize(w, 64, double_quant=True),
        }
        if k % 64 == 0
        else {}
    )


def dense_of(q):
    return np_dequant(q.fmt, q.qvalue, q.block_scales(), q.block_size)


def test_plugin_registers_the_native_kernel(native_cpu_kernel):
    assert kernels.registered_kernels("quantized_matmul")["cpu"] is jaxcore_cpu.IMPLS["cpu"]
    assert (
        jaxcore_cpu.PLATFORMS == ("cpu",)
        and jaxcore_cpu.__version__ == plugins.info().jaxcore_version
    )
    status = [p for p in plugins.info().plugins if p.module == "jaxcore_cpu"]
    if status and status[0].loaded:  # unless JAXCORE_PLUGINS deselected it
        assert status[0].platforms == ("cpu",)
        assert f"ISA {jaxcore_cpu.isa()}" in status[0].detail
        assert jaxcore_cpu.library_path() in plugins.info().format()


@pytest.mark.parametrize("x_name", list(DTYPES))
def test_registry_path_and_matmul_operator(native_cpu_kernel, x_name):
    rng = np.random.default_rng(11)
    w = jnp.asarray(rng.standard_normal((192, 65)), jnp.float32)
    x = jnp.asarray(rng.standard_normal((3, 5, 192)), DTYPES[x_name])
    for name, q in quantized_arrays(w).items():
        dense = dense_of(q)
        lowered = jax.jit(kernels.quantized_matmul).lower(x, q).as_text()
        # The native kernel runs; double-quantized scales go to its own target, compressed.
        target = f"{TARGET}_dq" if name == "nf4-dq" else TARGET
        assert re.search(rf"custom_call @{target}\b", lowered), name
        got = jax.jit(kernels.quantized_matmul)(x, q)
        assert got.dtype == x.dtype
        assert_matches(np.asarray(got).reshape(15, 65), x.reshape(15, 192), dense, x.dtype, name)
        got = jax.jit(implicit.implicit(lambda x, q: x @ q))(x, q)  # dtypes promote, as for jnp
        assert_matches(
            np.asarray(got).reshape(15, 65),
            x.reshape(15, 192),
            dense,
            jnp.promote_types(x.dtype, q.dtype),
            f"{name} x @ q",
        )
        got = x[0] @ q  # eager, without implicit: the array's __rmatmul__
        assert_matches(np.asarray(got), x[0], dense, got.dtype, f"{name} eager x @ q")
        got = jax.jit(
            functools.partial(kernels.quantized_matmul, preferred_element_type=jnp.float32)
        )(x[1], q)
        assert_matches(np.asarray(got), x[1], dense, jnp.float32, f"{name} f32 result")


def test_registry_zero_rows_and_columns(native_cpu_kernel):
    q = quant.ArrayInt8.quantize(jnp.ones((64, 3)))
    assert kernels.quantized_matmul(jnp.ones((0, 64)), q).shape == (0, 3)
    q0 = quant.ArrayNF4.quantize(jnp.ones((64, 0)), 64)
    assert kernels.quantized_matmul(jnp.ones((2, 64)), q0).shape == (2, 0)


def test_vmap_over_activations_and_over_stacked_weights(native_cpu_kernel):
    rng = np.random.default_rng(12)
    ws = [jnp.asarray(rng.standard_normal((128, 33)), jnp.float32) for _ in range(3)]
    qs = [quant.ArrayInt4.quantize(w, 64) for w in ws]
    x = jnp.asarray(rng.standard_normal((3, 2, 128)), jnp.float32)
    got = jax.jit(jax.vmap(kernels.quantized_matmul, in_axes=(0, None)))(x, qs[0])
    for b in range(3):
        assert_matches(np.asarray(got[b]), x[b], dense_of(qs[0]), jnp.float32, f"vmap x[{b}]")
    stacked = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *qs)
    got = jax.jit(jax.vmap(kernels.quantized_matmul))(x, stacked)
    for b in range(3):
        assert_matches(np.asarray(got[b]), x[b], dense_of(qs[b]), jnp.float32, f"vmap layer {b}")


@pytest.mark.parametrize("case", ["int8-b32", "int4-b64", "nf4-dq", "int8-channel"])
def test_grad_and_jvp_match_the_reference(native_cpu_kernel, case):
    make, ks = CASES[case]
    rng = np.random.default_rng(13)
    k, m, n = ks[-1], 3, 17
    w = make(rng, k, n)
    x = jnp.asarray(rng.standard_normal((m, k)), jnp.float32)
    ct = rng.standard_normal((m, n))
    scale = jnp.asarray(w.scale)

    def loss(x, s):
        q = Weight(w.fmt, w.block_size, w.qvalue, s)
        return jnp.sum(kernels.quantized_matmul(x, q) * ct)

    gx, gs = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, scale)
    x64, dense = as64(x), w.dense
    unscaled = np_dequant(w.fmt, w.qvalue, np.ones_like(w.scale), w.block_size)
    want_gx = ct @ dense.T
    pair = (x64.T @ ct) * unscaled  # d loss / d W[k, n] per unit scale
    want_gs = pair.reshape(k // w.block_size, w.block_size, n).sum(axis=1)
    bound_x = np.abs(ct) @ np.abs(dense.T)
    bound_s = (
        (np.abs(x64.T) @ np.abs(ct) * np.abs(unscaled)).reshape(want_gs.shape[0], -1, n).sum(axis=1)
    )
    assert np.all(np.abs(as64(gx) - want_gx) <= 2e-5 * bound_x + 1e-30)
    assert np.all(np.abs(as64(gs) - want_gs) <= 2e-5 * bound_s + 1e-30)

    dx = jnp.asarray(rng.standard_normal((m, k)), jnp.float32)
    ds = jnp.asarray(rng.standard_normal(w.scale.shape), jnp.float32)

    def forward(x, s):
        return kernels.quantized_matmul(x, Weight(w.fmt, w.block_size, w.qvalue, s))

    out, tangent = jax.jit(lambda *a: jax.jvp(forward, a[:2], a[2:]))(x, scale, dx, ds)
    assert_matches(np.asarray(out), x, dense, jnp.float32, f"{case} jvp primal")
    dense_ds = np_dequant(w.fmt, w.qvalue, np.asarray(ds), w.block_size)
    want_t = as64(dx) @ dense + x64 @ dense_ds
    bound_t = np.abs(as64(dx)) @ np.abs(dense) + np.abs(x64) @ np.abs(dense_ds)
    assert np.all(np.abs(as64(tangent) - want_t) <= 2e-5 * bound_t + 1e-30)


def test_export_stays_portable(native_cpu_kernel):
    """A jax.export artifact carries the reference kernel, not the library's custom call."""
    rng = np.random.default_rng(14)
    q = quant.ArrayNF4.quantize(jnp.asarray(rng.standard_normal((128, 16)), jnp.float32), 64)
    x = jnp.asarray(rng.standard_normal((2, 128)), jnp.float32)
    exported = jax.export.export(jax.jit(kernels.quantized_matmul), platforms=["cpu"])(x, q)
    call = f"custom_call @{TARGET}"  # (the name may also appear in source locations)
    assert call not in exported.mlir_module()
    assert_matches(np.asarray(exported.call(x, q)), x, dense_of(q), jnp.float32, "exported")
    assert call in jax.jit(kernels.quantized_matmul).lower(x, q).as_text()


# ----------------------------------------------------------------------------- FFI errors


def raw_call(x, qvalue, scale, out_shape, *, fmt=0, block_size=64, path=0, out_dtype=jnp.float32):
    """The FFI target called directly, bypassing every Python-side check."""
    call = jax.ffi.ffi_call(TARGET, jax.ShapeDtypeStruct(out_shape, out_dtype))
    attrs = dict(fmt=np.int32(fmt), block_size=np.int64(block_size), path=np.int32(path))
    return jax.block_until_ready(jax.jit(lambda *a: call(*a, **attrs))(x, qvalue, scale))


F32 = np.ones((2, 64), np.float32)
I8 = np.ones((64, 8), np.int8)
U8 = np.ones((32, 8), np.uint8)
S = np.ones((1, 8), np.float32)

BAD_CALLS = {
    "scale rows": (
        dict(x=F32, qvalue=I8, scale=np.ones((2, 8), np.float32), out_shape=(2, 8)),
        r"scale must have shape \(K // block_size, N\) = \(1, 8\), got \(2, 8\)",
    ),
    "scale columns": (
        dict(x=F32, qvalue=I8, scale=np.ones((1, 7), np.float32), out_shape=(2, 8)),
        r"scale must have shape .* = \(1, 8\), got \(1, 7\)",
    ),
    "scale dtype": (
        dict(x=F32, qvalue=I8, scale=np.ones((1, 8), np.int16), out_shape=(2, 8)),
        r"scale must be float32, float16 or bfloat16",
    ),
    "qvalue dtype": (
        dict(x=F32, qvalue=I8.astype(np.float32), scale=S, out_shape=(2, 8)),
        r"int8 qvalue must be int8",
    ),
    "int4 qvalue int8": (
        dict(x=F32, qvalue=U8.astype(np.int8), scale=S, out_shape=(2, 8), fmt=1),
        r"int4 qvalue must be uint8",
    ),
    "nf4 qvalue rows": (
        dict(x=F32, qvalue=I8.view(np.uint8), scale=S, out_shape=(2, 8), fmt=2),
        r"x \(2, 64\) has K=64 but nf4 qvalue \(64, 8\) holds 128 rows of K",
    ),
    "K mismatch": (
        dict(x=np.ones((2, 32), np.float32), qvalue=I8, scale=S, out_shape=(2, 8)),
        r"has K=32 but int8 qvalue \(64, 8\) holds 64 rows",
    ),
    "block_size divides K": (
        dict(x=F32, qvalue=I8, scale=S, out_shape=(2, 8), block_size=48),
        r"block_size=48 must be a positive divisor of K=64",
    ),
    "odd 4-bit block": (
        dict(
            x=F32,
            qvalue=U8,
            scale=np.ones((64, 8), np.float32),
            out_shape=(2, 8),
            fmt=2,
            block_size=1,
        ),
        r"4-bit formats need an even block_size, got 1",
    ),
    "zero block": (
        dict(x=F32, qvalue=I8, scale=S, out_shape=(2, 8), block_size=0),
        r"block_size=0 must be a positive divisor",
    ),
    "x dtype": (
        dict(x=F32.astype(np.float16), qvalue=I8, scale=S, out_shape=(2, 8)),
        r"x must be float32 or bfloat16",
    ),
    "x rank": (
        dict(x=np.ones((1, 2, 64), np.float32), qvalue=I8, scale=S, out_shape=(2, 8)),
        r"must all be 2-D; got x \(1, 2, 64\)",
    ),
    "result shape": (
        dict(x=F32, qvalue=I8, scale=S, out_shape=(2, 9)),
        r"the result must have shape \(M, N\) = \(2, 8\), got \(2, 9\)",
    ),
    "result dtype": (
        dict(x=F32, qvalue=I8, scale=S, out_shape=(2, 8), out_dtype=jnp.float16),
        r"the result must be float32 or bfloat16",
    ),
    "format code": (dict(x=F32, qvalue=I8, scale=S, out_shape=(2, 8), fmt=7), r"unknown fmt 7"),
    "path code": (dict(x=F32, qvalue=I8, scale=S, out_shape=(2, 8), path=9), r"unknown path 9"),
}


@pytest.mark.parametrize("name", list(BAD_CALLS))
def test_ffi_rejects_malformed_calls(name):
    kwargs, message = BAD_CALLS[name]
    with pytest.raises(jax.errors.JaxRuntimeError, match=message):
        raw_call(**kwargs)
    # The process is fine afterwards: a good call still works.
    got = raw_call(F32, I8, S * 0.5, (2, 8))
    np.testing.assert_allclose(np.asarray(got), np.full((2, 8), 32.0))


# ----------------------------------------------------------------- precision setting


def test_set_precision_swaps_the_registered_kernel(native_cpu_kernel):
    rng = np.random.default_rng(31)
    w = jnp.asarray(rng.standard_normal((128, 40)), jnp.float32)
    x = jnp.asarray(rng.standard_normal((2, 128)), jnp.float32)
    q = quant.ArrayInt4.quantize(w, 64)
    dense = dense_of(q)
    assert jaxcore_cpu.precision() == "float32"
    exact = jax.jit(lambda x, q: x @ q)(x, q)
    assert_matches(exact, x, dense, jnp.float32, "float32 default")
    with jaxcore_cpu.set_precision("int8") as setting:
        assert (setting.previous, setting.current) == ("float32", "int8")
        assert jaxcore_cpu.precision() == "int8"
        assert kernels.registered_kernels("quantized_matmul")["cpu"].__name__.endswith("int8")
        fast = jax.jit(lambda x, q: x @ q)(x, q)  # a new trace picks the int8 kernel
        grad = jax.grad(lambda x: (x @ q).sum())(x)  # derivatives keep working
    assert jaxcore_cpu.precision() == "float32"
    assert kernels.registered_kernels("quantized_matmul")["cpu"] is jaxcore_cpu.IMPLS["cpu"]
    assert_int8_close(fast, x, dense, "int8 through x @ q")
    assert np.abs(as64(fast) - as64(exact)).max() > 0
    np.testing.assert_allclose(as64(grad), np.ones((2, 40)) @ dense.T, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="unknown precision 'int4'"):
        jaxcore_cpu.set_precision("int4")
    with pytest.raises(ValueError, match="unknown precision 'fp16'"):
        jaxcore_cpu.quantized_matmul(
            x, q.qvalue, q.block_scales(), fmt="int4", block_size=64, precision="fp16"
        )


def test_ffi_rejects_an_unknown_precision_code():
    rng = np.random.default_rng(37)
    w = random_weight(rng, "int8", 64, 8, 32)
    call = jax.ffi.ffi_call(TARGET, jax.ShapeDtypeStruct((2, 8), jnp.float32))
    with pytest.raises(Exception, match=re.escape("unknown precision 7 (0=float32, 1=int8)")):
        call(
            np.ones((2, 64), np.float32),
            w.qvalue,
            w.scale,
            fmt=np.int32(0),
            block_size=np.int64(32),
            precision=np.int32(7),
        ).block_until_ready()

"""Set-up shared by the plugin kernel tests, tests/gpu_kernels_test.py and tpu_kernels_test.py.

Not a test file (pytest collects ``*_test.py`` only): random operands covering every code
value, an independent float64 NumPy dequantization of the layout contract, the tolerance
check of a kernel's result against it and against
``jaxcore.kernels.reference_quantized_matmul``, and the checks that every plugin's kernel
and ``jaxcore.kernels`` entry point must pass. Tolerances follow from the compute dtype: with
float32 activations only the summation order differs from the float64 reference, and with
bfloat16 / float16 activations each product carries at most one rounding of 2**-9 / 2**-12
relative to |x| @ |W|.
"""

import contextlib
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcore import kernels
from jaxcore.kernels import plugin_api

REL_TOL = {jnp.float32: 2e-6, jnp.bfloat16: 2.0**-8, jnp.float16: 2.0**-11}
"""Tolerance per compute dtype, relative to |x| @ |W|."""


def make(fmt, m, k, n, block_size, dtype, seed=0):
    """Random activations and quantized weights covering every code value."""
    rng = np.random.default_rng(seed)
    if fmt == "int8":
        qvalue = rng.integers(-127, 128, (k, n), dtype=np.int8)
    else:
        qvalue = rng.integers(0, 256, (k // 2, n), dtype=np.uint8)
    scale = rng.uniform(0.01, 0.1, (k // block_size, n)).astype(np.float32)
    x = rng.standard_normal((m, k)).astype(np.float32)
    return jnp.asarray(x, dtype), jnp.asarray(qvalue), jnp.asarray(scale)


def numpy_dense(fmt, qvalue, scale, block_size):
    """Independent float64 dequantization of the layout contract."""
    q = np.asarray(qvalue)
    if fmt == "int8":
        values = q.astype(np.float64)
    else:
        idx = np.empty((2 * q.shape[0], q.shape[1]), np.int64)
        idx[0::2], idx[1::2] = q & 0xF, q >> 4
        values = idx - 8.0 if fmt == "int4" else np.asarray(kernels.NF4_CODE, np.float64)[idx]
    return values * np.repeat(np.asarray(scale, np.float64), block_size, axis=0)


def as64(a):
    """``a`` (any float dtype, JAX or NumPy) as a float64 NumPy array, through float32."""
    return np.asarray(jnp.asarray(a).astype(jnp.float32), np.float64)


def assert_int8_close(got, x, w64, what):
    """int8 activations: ``got`` within 2e-2 of sum |x||w| of ``x @ w64`` per entry (about
    1e-3 typical), in float64."""
    x64, got64 = as64(x), as64(got)
    err = np.abs(got64 - x64 @ w64)
    bound = 2e-2 * (np.abs(x64) @ np.abs(w64)) + 1e-30
    assert (err <= bound).all(), (what, float(np.max(err / bound)))


def check(out, x, qvalue, scale, fmt, block_size, compute_dtype):
    """``out`` equals x @ W within the ``compute_dtype`` tolerance (NumPy and jaxcore refs)."""
    x64 = np.asarray(x.astype(jnp.float32), np.float64)
    w = numpy_dense(fmt, qvalue, scale, block_size)
    atol = REL_TOL[compute_dtype] * (np.abs(x64) @ np.abs(w)) + 1e-6
    ref = x64 @ w
    out64 = np.asarray(out.astype(jnp.float32), np.float64)
    assert out64.shape == ref.shape
    assert np.all(np.abs(out64 - ref) <= atol), np.max(np.abs(out64 - ref) - atol)
    jref = kernels.reference_quantized_matmul(
        x, qvalue, scale, fmt=fmt, block_size=block_size, out_dtype=jnp.float32
    )
    assert np.all(np.abs(out64 - np.asarray(jref, np.float64)) <= atol)


def check_interpret_matches_reference(plugin, fmt, m, k, n, block_size, dtype, overrides):
    """``plugin.quantized_matmul`` in interpret mode, under ``plugin.block_config(**overrides)``."""
    x, qvalue, scale = make(fmt, m, k, n, block_size, dtype)
    with plugin.block_config(**overrides):
        out = plugin.quantized_matmul(
            x, qvalue, scale, fmt=fmt, block_size=block_size, interpret=True
        )
    assert out.dtype == dtype
    check(out, x, qvalue, scale, fmt, block_size, dtype)


def check_accepts_reference_inputs(kernel, fmt, m, k, n, block_size, empty_out_dtype=None):
    """Every platform's branch is traced on every platform, so ``kernel`` must take the
    reference's inputs: bfloat16 scales, zero rows (in ``empty_out_dtype``, default the
    activation dtype), float64 activations (XLA path)."""
    x, qvalue, scale = make(fmt, m, k, n, block_size, jnp.float32)
    scale16 = scale.astype(jnp.bfloat16)
    out = kernel(x, qvalue, scale16, fmt=fmt, block_size=block_size, interpret=True)
    check(out, x, qvalue, scale16.astype(jnp.float32), fmt, block_size, jnp.float32)
    empty = kernel(x[:0], qvalue, scale, fmt=fmt, block_size=block_size, out_dtype=empty_out_dtype)
    assert empty.shape == (0, n) and empty.dtype == (empty_out_dtype or jnp.float32)
    with jax.enable_x64(True):
        x64 = jnp.asarray(np.asarray(x), jnp.float64)
        out64 = kernel(x64, qvalue, scale, fmt=fmt, block_size=block_size)
        assert out64.dtype == jnp.float64
        want = np.asarray(x64) @ numpy_dense(fmt, qvalue, scale, block_size)
        np.testing.assert_allclose(np.asarray(out64), want, rtol=1e-10, atol=1e-12)


def check_entry_point_in_interpret_mode(impl, k, n):
    """A registered entry point run interpreted: NF4 weights, bfloat16 x, float32 result."""
    x, qvalue, scale = make("nf4", 2, k, n, 64, jnp.bfloat16)
    out = impl(x, qvalue, scale, fmt="nf4", block_size=64, out_dtype=jnp.float32, interpret=True)
    assert out.dtype == jnp.float32
    check(out, x, qvalue, scale, "nf4", 64, jnp.bfloat16)


def check_binds_platform_primitive(entry_point, primitive_name):
    """Outside interpret mode ``entry_point`` binds ``primitive_name``, which lowers the kernel
    only for its accelerator (so multi-platform export works); elsewhere, e.g. on this CPU,
    it lowers to XLA's dequantize-then-dot. Eager calls and both vmap forms go through it."""
    impl = functools.partial(entry_point, fmt="int4", block_size=32, out_dtype=jnp.float32)
    x, qvalue, scale = make("int4", 4, 128, 48, 32, jnp.float32)
    assert primitive_name in str(jax.make_jaxpr(impl)(x, qvalue, scale))
    check(impl(x, qvalue, scale), x, qvalue, scale, "int4", 32, jnp.float32)
    members = [make("int4", 4, 128, 48, 32, jnp.float32, seed=s) for s in (1, 2, 3)]
    xs, qs, ss = (jnp.stack(parts) for parts in zip(*members))
    shared = jax.vmap(impl, in_axes=(0, None, None))(xs, qvalue, scale)  # folded into M
    own = jax.vmap(impl, in_axes=(None, 0, 0))(x, qs, ss)  # one call each
    for i, (xi, qi, si) in enumerate(members):
        check(shared[i], xi, qvalue, scale, "int4", 32, jnp.float32)
        check(own[i], x, qi, si, "int4", 32, jnp.float32)


def check_dispatch_matches_dense(x, q, out_shape=None):
    """``jax.jit(kernels.quantized_matmul)(x, q)`` equals x @ q.materialize() (float32 tolerance).

    The jitted function is a fresh one on each call: the interpret flag is read at trace time.
    """

    def model(x, q):
        return kernels.quantized_matmul(x, q)

    out = np.asarray(jax.jit(model)(x, q), np.float64)
    x64, w64 = np.asarray(x, np.float64), np.asarray(q.materialize(), np.float64)
    atol = REL_TOL[jnp.float32] * (np.abs(x64) @ np.abs(w64)) + 1e-6
    if out_shape is not None:
        assert out.shape == out_shape
    assert np.all(np.abs(out - x64 @ w64) <= atol)


def check_argument_error(kernel, fmt, mutate, error, match):
    """``kernel`` raises ``error`` (message matching ``match``) on bad arguments.

    ``mutate`` maps the keyword arguments of a valid call (``x``, ``qvalue``, ``scale``, ``fmt``,
    ``block_size``: M=2, K=64, N=16 in 32-row blocks) to the ones passed instead.
    """
    x, qvalue, scale = make(fmt, 2, 64, 16, 32, jnp.float32)
    a = mutate(dict(x=x, qvalue=qvalue, scale=scale, fmt=fmt, block_size=32))
    with pytest.raises(error, match=match):
        kernel(a["x"], a["qvalue"], a["scale"], fmt=a["fmt"], block_size=a["block_size"])


def check_bad_override_fails_when_traced(plugin, entry_point, n, fields, match):
    """A tile override that breaks a rule fails when ``entry_point`` is traced, on any platform."""
    x, qvalue, scale = make("int8", 2, 256, n, 256, jnp.float32)
    with plugin.block_config(**fields), pytest.raises(ValueError, match=match):
        jax.jit(functools.partial(entry_point, fmt="int8", block_size=256, out_dtype=jnp.float32))(
            x, qvalue, scale
        )


def require_native_cpu_kernels() -> None:
    """Skips the calling test module unless jaxcore_cpu's native library loads on a CPU backend.

    A missing library fails instead of skipping under ``JAXCORE_CPU_KERNELS_REQUIRED=1``
    (Bazel's CPU kernel targets set it, and depend on the library). Loading it registers
    the FFI targets the tests call directly.
    """
    import jaxcore_cpu  # the callers' dependency, not this library's

    try:
        jaxcore_cpu.isa()
    except jaxcore_cpu.LibraryNotFoundError as e:
        if os.environ.get("JAXCORE_CPU_KERNELS_REQUIRED", "") not in ("", "0"):
            raise
        pytest.skip(f"native CPU kernel library not available: {e}", allow_module_level=True)
    if jax.default_backend() != "cpu":
        pytest.skip("the native kernels serve the CPU backend", allow_module_level=True)


@contextlib.contextmanager
def registry_restored(*names):
    """Empties ``jaxcore.kernels``' registrations of kernels ``names`` for the body and puts
    back exactly what was registered before (the tests register their own)."""
    saved = {name: kernels.registered_kernels(name) for name in names}
    for name, impls in saved.items():
        for platform in impls:
            kernels.unregister_kernel(name, platform)
    try:
        yield
    finally:
        for name, impls in saved.items():
            for platform in kernels.registered_kernels(name):
                kernels.unregister_kernel(name, platform)
            for platform, impl in impls.items():
                kernels.register_kernel(name, platform, impl)


def dq_dense64(q) -> np.ndarray:
    """An NF4 double-quant weight in float64 from its stored codes, group scales and offset,
    independently of jaxcore's decoders."""
    codes = np.asarray(q.scale, np.float64).reshape(-1)
    group = np.asarray(q.scale_group_scale, np.float64)[np.arange(codes.size) // 256]
    absmax = (codes * group + float(q.scale_offset)).reshape(q.scale.shape)
    return numpy_dense("nf4", q.qvalue, absmax, q.block_size)


@contextlib.contextmanager
def dq_stand_in(monkeypatch, record):
    """Registers a ``jax.numpy`` kernel for ``quantized_matmul_dq`` on cpu for the body (the
    registry is restored afterwards); each trace appends ``record(x2d, codes, group_scale)``
    to the list it yields."""
    monkeypatch.delenv(kernels.INTERPRET_ENV_VAR, raising=False)
    calls = []

    def impl(x2d, qvalue, codes, group_scale, offset, *, fmt, block_size, out_dtype):
        calls.append(record(x2d, codes, group_scale))
        scale = plugin_api.expand_dq_scales(codes, group_scale, offset)
        return kernels.reference_quantized_matmul(
            x2d, qvalue, scale, fmt=fmt, block_size=block_size, out_dtype=out_dtype
        )

    with registry_restored(plugin_api.DQ_KERNEL_NAME):
        kernels.register_kernel(plugin_api.DQ_KERNEL_NAME, "cpu", impl)
        yield calls

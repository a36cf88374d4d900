"""jaxcore_cpu's transposed product: ``x @ W.T`` over the stored rows of a (K, N) weight.

``jaxcore_cpu.quantized_matmul_transposed`` (FFI target ``jaxcore_cpu_quantized_matmul`` with
``transposed=1``) is what the gradient of ``x @ w`` with respect to ``x`` and
``jaxcore.kernels.quantized_matmul_transposed`` run on CPU once the plugin is loaded. Its
result must equal the dequantized matrix's product on every format, instruction set, dtype
and odd size; gradients through ``x @ w`` (double-quantized NF4 included) must compile to it
and agree with the dense gradient; both paths (rows of W, the GEMM over transposed panels)
agree at any M, and every M runs the native kernel with SIMD kernels; export stays portable;
bad operands are refused with errors that name them.

Needs ``libjaxcore_cpu_kernels.so`` as ``cpu_kernels_test`` does.
"""

import platform

import jax
import jax.numpy as jnp
import kernel_test_util
import numpy as np
import pytest

import jaxcore_cpu
from jaxcore import kernels, quant
from jaxcore.kernels import plugin_api

kernel_test_util.require_native_cpu_kernels()

TARGET = "jaxcore_cpu_quantized_matmul"
ARM64 = platform.machine().lower() in ("aarch64", "arm64")
KERNELS = ("quantized_matmul", plugin_api.DQ_KERNEL_NAME, plugin_api.TRANSPOSED_KERNEL_NAME)
FORMATS = {
    "int8": lambda w, b: quant.ArrayInt8.quantize(w, block_size=b),
    "int8-channel": lambda w, b: quant.ArrayInt8.quantize(w),
    "int4": lambda w, b: quant.ArrayInt4.quantize(w, b),
    "nf4": lambda w, b: quant.ArrayNF4.quantize(w, b),
}


@pytest.fixture
def native_cpu_kernels(monkeypatch):
    """The plugin's kernels serve CPU; the registry is restored afterwards."""
    monkeypatch.delenv(kernels.INTERPRET_ENV_VAR, raising=False)
    with kernel_test_util.registry_restored(*KERNELS):
        jaxcore_cpu.initialize()
        yield


def _weight(rng, fmt, k, n, block):
    w = jnp.asarray(rng.standard_normal((k, n)), jnp.float32)
    return FORMATS[fmt](w, block)


def _dense(q):
    return np.asarray(q.materialize(), np.float64)


def _close(got, want, rtol=2e-5):
    got = np.asarray(got, np.float64)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(np.abs(want).max(), 1.0))


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_equals_the_dequantized_product_on_every_isa(fmt):
    rng = np.random.default_rng(0)
    # M across the activation tiles and passes of 16 rows; K across the four-row tiles and
    # tasks; N across the SIMD widths (4, 8, 16) and the column chunks.
    for m, k, n, block in [(1, 64, 33, 32), (3, 130, 300, 26), (17, 96, 1100, 32), (5, 18, 7, 6)]:
        if fmt != "int8" and block % 2:
            continue
        q = _weight(rng, fmt, k, n, block)
        x = jnp.asarray(rng.standard_normal((m, n)), jnp.float32)
        want = np.asarray(x, np.float64) @ _dense(q).T
        for isa in jaxcore_cpu.available_isas():
            with jaxcore_cpu.set_isa(isa):
                got = jaxcore_cpu.quantized_matmul_transposed(
                    x, q.qvalue, q.block_scales(), fmt=q.fmt, block_size=q.block_size
                )
            assert got.shape == (m, k) and got.dtype == jnp.float32
            _close(got, want)


@pytest.mark.parametrize("x_dtype", [jnp.bfloat16, jnp.float16])
def test_low_precision_activations_and_results(x_dtype):
    rng = np.random.default_rng(1)
    q = _weight(rng, "nf4", 128, 70, 64)
    x = jnp.asarray(rng.standard_normal((4, 70)), x_dtype)
    want = np.asarray(x.astype(jnp.float32), np.float64) @ _dense(q).T
    call = jaxcore_cpu.quantized_matmul_transposed
    got = call(x, q.qvalue, q.block_scales(), fmt="nf4", block_size=64)
    assert got.dtype == x_dtype
    _close(got, want, rtol=1e-2)
    got32 = call(x, q.qvalue, q.block_scales(), fmt="nf4", block_size=64, out_dtype=jnp.float32)
    assert got32.dtype == jnp.float32
    _close(got32, want)


def test_gradient_of_x_at_w_compiles_to_the_transposed_call(native_cpu_kernels):
    rng = np.random.default_rng(2)
    q = _weight(rng, "int4", 256, 200, 64)
    x = jnp.asarray(rng.standard_normal((3, 256)), jnp.float32)
    dy = jnp.asarray(rng.standard_normal((3, 200)), jnp.float32)
    grad = jax.jit(jax.grad(lambda x: jnp.sum((x @ q) * dy)))
    hlo = grad.lower(x).compile().as_text()
    assert hlo.count(f'custom_call_target="{TARGET}"') == 1, "x @ W.T runs the native kernel"
    assert "transposed=1" in hlo.replace(" ", "") or "transposed = 1" in hlo
    _close(grad(x), np.asarray(dy, np.float64) @ _dense(q).T, rtol=1e-4)


def test_kernels_entry_point_and_vmap(native_cpu_kernels):
    rng = np.random.default_rng(3)
    q = _weight(rng, "int8", 96, 40, 32)
    x = jnp.asarray(rng.standard_normal((2, 5, 40)), jnp.float32)
    want = np.asarray(x, np.float64) @ _dense(q).T
    _close(jax.jit(kernels.quantized_matmul_transposed)(x, q), want)
    _close(jax.vmap(kernels.quantized_matmul_transposed, in_axes=(0, None))(x, q), want)


def test_double_quant_gradient_matches_dense(native_cpu_kernels):
    # QLoRA's backward pass: the gradient through a frozen double-quantized NF4 weight.
    rng = np.random.default_rng(4)
    w = jnp.asarray(rng.standard_normal((128, 96)), jnp.float32)
    q = quant.ArrayNF4.quantize(w, 64, double_quant=True)
    x = jnp.asarray(rng.standard_normal((8, 128)), jnp.bfloat16)
    loss = lambda x, w: jnp.sum(jnp.tanh((x @ w).astype(jnp.float32)))  # noqa: E731
    got = jax.jit(jax.grad(loss))(x, q)
    want = jax.grad(loss)(x.astype(jnp.float32), jnp.asarray(q.materialize(), jnp.float32))
    _close(got.astype(jnp.float32), np.asarray(want, np.float64), rtol=2e-2)


def test_every_m_runs_the_native_kernel_with_simd(native_cpu_kernels):
    rng = np.random.default_rng(5)
    q = _weight(rng, "nf4", 64, 32, 32)
    f = jax.jit(kernels.quantized_matmul_transposed)
    for m in (1, 30, 130):  # the rows path, and the GEMM (several row blocks)
        x = jnp.asarray(rng.standard_normal((m, 32)), jnp.float32)
        native = TARGET in f.lower(x, q).compile().as_text()
        simd = jaxcore_cpu.detected_isa() in jaxcore_cpu._matmul.SIMD_ISAS
        assert native == (simd or m == 1 and ARM64), m
        _close(f(x, q), np.asarray(x, np.float64) @ _dense(q).T)


@pytest.mark.parametrize("path", ["gemv", "gemm"])
def test_both_paths_agree_at_any_m(path):
    rng = np.random.default_rng(11)
    q = _weight(rng, "int4", 192, 600, 64)
    for m in (1, 13, 100):
        x = jnp.asarray(rng.standard_normal((m, 600)), jnp.float32)
        got = jaxcore_cpu.quantized_matmul_transposed(
            x, q.qvalue, q.block_scales(), fmt="int4", block_size=64, path=path
        )
        _close(got, np.asarray(x, np.float64) @ _dense(q).T)


def test_portable_kernels_serve_one_row_but_not_x86_nf4(monkeypatch):
    monkeypatch.setattr(jaxcore_cpu._library, "detected_isa", lambda: "portable")
    serves = jaxcore_cpu._matmul._transposed_native_serves
    assert serves(1, "int8") and serves(1, "int4")
    assert not serves(2, "int8")
    monkeypatch.setattr(jaxcore_cpu._matmul.platform, "machine", lambda: "x86_64")
    assert not serves(1, "nf4")
    monkeypatch.setattr(jaxcore_cpu._matmul.platform, "machine", lambda: "aarch64")
    assert serves(1, "nf4")
    # sdot adds no float32 kernel: x @ W.T (float32 only) stays as with the portable kernels.
    monkeypatch.setattr(jaxcore_cpu._library, "detected_isa", lambda: "dotprod")
    assert serves(1, "nf4") and not serves(2, "int8")
    monkeypatch.setattr(jaxcore_cpu._library, "detected_isa", lambda: "avx2")
    assert serves(4096, "nf4")


def test_export_stays_portable(native_cpu_kernels):
    rng = np.random.default_rng(6)
    q = _weight(rng, "int8", 64, 48, 32)
    x = jnp.asarray(rng.standard_normal((2, 48)), jnp.float32)
    f = jax.jit(kernels.quantized_matmul_transposed)
    exported = jax.export.export(f, platforms=["cpu"])(x, q)
    assert f"custom_call @{TARGET}" not in exported.mlir_module()
    _close(exported.call(x, q), np.asarray(x, np.float64) @ _dense(q).T)


def test_empty_operands_give_zeros():
    rng = np.random.default_rng(7)
    q = _weight(rng, "int4", 32, 16, 32)
    call = jaxcore_cpu.quantized_matmul_transposed
    out = call(jnp.ones((0, 16)), q.qvalue, q.block_scales(), fmt="int4", block_size=32)
    assert out.shape == (0, 32)
    empty = quant.ArrayInt8.quantize(jnp.ones((8, 0), jnp.float32), block_size=8)
    out = call(jnp.ones((3, 0)), empty.qvalue, empty.block_scales(), fmt="int8", block_size=8)
    assert out.shape == (3, 8) and not np.asarray(out).any()


def test_python_side_checks_name_the_operand():
    rng = np.random.default_rng(8)
    q = _weight(rng, "nf4", 64, 40, 32)
    call = jaxcore_cpu.quantized_matmul_transposed
    with pytest.raises(ValueError, match=r"x @ W.T: x \(2, 64\) must have N=40 columns"):
        call(jnp.ones((2, 64)), q.qvalue, q.block_scales(), fmt="nf4", block_size=32)
    with pytest.raises(ValueError, match=r"unknown kernel path 'fast'"):
        call(jnp.ones((2, 40)), q.qvalue, q.block_scales(), fmt="nf4", block_size=32, path="fast")
    with pytest.raises(ValueError, match=r"x @ W.T: x must be 2-D"):
        call(jnp.ones((40,)), q.qvalue, q.block_scales(), fmt="nf4", block_size=32)
    with pytest.raises(ValueError, match=r"scale must have shape \(K // block_size, N\)"):
        call(jnp.ones((2, 40)), q.qvalue, q.block_scales()[:1], fmt="nf4", block_size=32)
    with pytest.raises(TypeError, match=r"nf4 qvalue must be uint8"):
        call(
            jnp.ones((2, 40)), q.qvalue.astype(jnp.int8), q.block_scales(), fmt="nf4", block_size=32
        )


def _raw(x, qvalue, scale, out_shape, **attrs):
    call = jax.ffi.ffi_call(TARGET, jax.ShapeDtypeStruct(out_shape, jnp.float32))
    attrs = dict(dict(fmt=np.int32(1), block_size=np.int64(32), transposed=np.int32(1)), **attrs)
    return jax.block_until_ready(jax.jit(lambda *a: call(*a, **attrs))(x, qvalue, scale))


@pytest.mark.parametrize(
    "what, x_shape, out_shape, attrs, message",
    [
        ("x columns", (2, 64), (2, 64), {}, r"x @ W.T: x \(2, 64\) has 64 columns .* N=40"),
        ("result shape", (2, 40), (2, 40), {}, r"result must have shape \(M, K\) = \(2, 64\)"),
        ("flag", (2, 40), (2, 64), dict(transposed=np.int32(2)), r"transposed must be 0 .* got 2"),
    ],
)
def test_ffi_target_refuses_malformed_operands(what, x_shape, out_shape, attrs, message):
    qvalue = np.ones((32, 40), np.uint8)
    scale = np.ones((2, 40), np.float32)
    with pytest.raises(jax.errors.JaxRuntimeError, match=message):
        _raw(np.ones(x_shape, np.float32), qvalue, scale, out_shape, **attrs)
    good = _raw(np.ones((2, 40), np.float32), qvalue, scale, (2, 64))
    assert np.isfinite(np.asarray(good)).all(), what

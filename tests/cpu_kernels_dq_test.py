"""jaxcore_cpu's double-quant kernel: NF4 with QLoRA's compressed scales read as stored.

``jaxcore_cpu.quantized_matmul_dq`` (FFI target ``jaxcore_cpu_quantized_matmul_dq``) takes
the int8 scale codes, group scales and offset and expands them inside the call. Its result
must equal the float32-scale kernel's on the expanded scales (same kernels after the same
expansion), on every instruction set, path and precision; ``x @ w`` with a double-quantized
``ArrayNF4`` must compile to that one custom call; bad operands are refused with errors that
name them, from Python and from the FFI target itself.

Needs ``libjaxcore_cpu_kernels.so`` as ``cpu_kernels_test`` does.
"""

import jax
import jax.numpy as jnp
import kernel_test_util
import numpy as np
import pytest

import jaxcore_cpu
from jaxcore import kernels, quant
from jaxcore.kernels import plugin_api

kernel_test_util.require_native_cpu_kernels()

DQ_TARGET = "jaxcore_cpu_quantized_matmul_dq"
KERNELS = ("quantized_matmul", plugin_api.DQ_KERNEL_NAME)


@pytest.fixture
def native_cpu_kernels(monkeypatch):
    """The plugin's kernels serve CPU; the registry is restored afterwards."""
    monkeypatch.delenv(kernels.INTERPRET_ENV_VAR, raising=False)
    with kernel_test_util.registry_restored(*KERNELS):
        jaxcore_cpu.initialize()
        yield


def _weight(rng, k, n, block=64):
    w = jnp.asarray(rng.standard_normal((k, n)), jnp.float32)
    return quant.ArrayNF4.quantize(w, block, double_quant=True)


def _parts(q):
    return q.qvalue, q.scale, q.scale_group_scale, q.scale_offset


@pytest.mark.parametrize("precision", ["float32", "int8"])
@pytest.mark.parametrize("path", ["auto", "gemv", "gemm"])
def test_equals_the_float32_scale_kernel_on_every_isa(precision, path):
    rng = np.random.default_rng(0)
    # N = 300: groups of 256 codes straddle scale rows; M = 70 takes int8 only with AVX-512.
    for m, k, n in [(1, 256, 300), (16, 512, 300), (70, 128, 33)]:
        q = _weight(rng, k, n)
        qvalue, codes, group_scale, offset = _parts(q)
        scale = plugin_api.expand_dq_scales(codes, group_scale, offset)
        x = jnp.asarray(rng.standard_normal((m, k)), jnp.float32)
        for isa in jaxcore_cpu.available_isas():
            with jaxcore_cpu.set_isa(isa):
                want = jaxcore_cpu.quantized_matmul(
                    x, qvalue, scale, fmt="nf4", block_size=64, path=path, precision=precision
                )
                got = jaxcore_cpu.quantized_matmul_dq(
                    x,
                    qvalue,
                    codes,
                    group_scale,
                    offset,
                    block_size=64,
                    path=path,
                    precision=precision,
                )
            np.testing.assert_allclose(
                np.asarray(got),
                np.asarray(want),
                rtol=1e-6,
                atol=1e-6 * np.abs(want).max(),
                err_msg=f"{isa} m={m} k={k} n={n}",
            )


def test_bfloat16_activations_and_result():
    rng = np.random.default_rng(1)
    q = _weight(rng, 128, 96)
    qvalue, codes, group_scale, offset = _parts(q)
    x = jnp.asarray(rng.standard_normal((5, 128)), jnp.bfloat16)
    got = jaxcore_cpu.quantized_matmul_dq(x, qvalue, codes, group_scale, offset, block_size=64)
    assert got.dtype == jnp.bfloat16
    want = np.asarray(x, np.float64) @ np.asarray(q.materialize(), np.float64)
    np.testing.assert_allclose(
        np.asarray(got, np.float64), want, rtol=2e-2, atol=2e-2 * np.abs(want).max()
    )


def test_matmul_operator_compiles_to_the_dq_custom_call(native_cpu_kernels):
    rng = np.random.default_rng(2)
    q = _weight(rng, 256, 200)
    x = jnp.asarray(rng.standard_normal((3, 256)), jnp.float32)
    f = jax.jit(lambda x, q: x @ q)
    hlo = f.lower(x, q).compile().as_text()
    assert DQ_TARGET in hlo
    assert "fusion" not in hlo  # no scale expansion by XLA around it
    want = np.asarray(x, np.float64) @ np.asarray(q.materialize(), np.float64)
    np.testing.assert_allclose(np.asarray(f(x, q)), want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    # Gradients go through the plugin too (x) and through the expanded scales (group scales).
    g = jax.grad(lambda x: jnp.sum(x @ q))(x)
    np.testing.assert_allclose(
        np.asarray(g),
        np.ones((3, 200)) @ np.asarray(q.materialize(), np.float64).T,
        rtol=1e-4,
        atol=1e-3,
    )


def test_precision_setting_swaps_the_dq_kernel_too(native_cpu_kernels):
    registered = kernels.registered_kernels(plugin_api.DQ_KERNEL_NAME)
    assert registered["cpu"] is jaxcore_cpu.DQ_IMPLS["cpu"]
    with jaxcore_cpu.set_precision("int8"):
        now = kernels.registered_kernels(plugin_api.DQ_KERNEL_NAME)["cpu"]
        assert now.__name__ == "quantized_matmul_dq_impl_int8"
    assert kernels.registered_kernels(plugin_api.DQ_KERNEL_NAME)["cpu"] is registered["cpu"]


def test_export_stays_portable(native_cpu_kernels):
    rng = np.random.default_rng(3)
    q = _weight(rng, 128, 64)
    x = jnp.asarray(rng.standard_normal((2, 128)), jnp.float32)
    exported = jax.export.export(jax.jit(lambda x, q: x @ q), platforms=["cpu"])(x, q)
    call = f"custom_call @{DQ_TARGET}"  # (the name also appears in source locations)
    assert call not in exported.mlir_module()
    assert call in jax.jit(lambda x, q: x @ q).lower(x, q).as_text()
    np.testing.assert_allclose(
        np.asarray(exported.call(x, q)),
        np.asarray(jax.jit(lambda x, q: x @ q)(x, q)),
        rtol=1e-5,
        atol=1e-4,
    )


def test_python_side_checks_name_the_operand():
    rng = np.random.default_rng(4)
    q = _weight(rng, 128, 64)
    qvalue, codes, group_scale, offset = _parts(q)
    x = jnp.ones((2, 128), jnp.float32)
    call = jaxcore_cpu.quantized_matmul_dq
    with pytest.raises(TypeError, match=r"scale codes must be a 2-D int8 array"):
        call(x, qvalue, codes.astype(jnp.float32), group_scale, offset, block_size=64)
    with pytest.raises(ValueError, match=r"group_scale must be a floating \(1,\) array"):
        call(x, qvalue, codes, jnp.ones((2,), jnp.float32), offset, block_size=64)
    with pytest.raises(ValueError, match=r"offset must be one floating value"):
        call(x, qvalue, codes, group_scale, jnp.ones((2,), jnp.float32), block_size=64)
    with pytest.raises(ValueError, match=r"scale must have shape \(K // block_size, N\)"):
        call(x, qvalue, codes[:1], group_scale, offset, block_size=64)


def _raw(x, qvalue, codes, group_scale, offset, dq_group=256):
    call = jax.ffi.ffi_call(
        DQ_TARGET, jax.ShapeDtypeStruct((x.shape[0], qvalue.shape[1]), jnp.float32)
    )
    attrs = dict(fmt=np.int32(2), block_size=np.int64(64), dq_group=np.int64(dq_group))
    return jax.block_until_ready(
        jax.jit(lambda *a: call(*a, **attrs))(x, qvalue, codes, group_scale, offset)
    )


@pytest.mark.parametrize(
    "what, edit, message",
    [
        (
            "group count",
            dict(group_scale=np.ones((3,), np.float32)),
            r"group_scale must hold .* = 1 entries, got 3",
        ),
        (
            "group dtype",
            dict(group_scale=np.ones((1,), np.float16)),
            r"group_scale must be a 1-D float32 array",
        ),
        ("codes dtype", dict(codes=np.ones((2, 64), np.uint8)), r"scale codes must be int8"),
        (
            "codes shape",
            dict(codes=np.ones((1, 64), np.int8)),
            r"scale codes must have shape \(K // block_size, N\) = \(2, 64\), got \(1, 64\)",
        ),
        (
            "offset shape",
            dict(offset=np.ones((2,), np.float32)),
            r"the scale offset must be one float32",
        ),
        ("group size", dict(dq_group=0), r"double-quant group size must be positive"),
    ],
)
def test_ffi_target_refuses_malformed_operands(what, edit, message):
    args = dict(
        x=np.ones((2, 128), np.float32),
        qvalue=np.ones((64, 64), np.uint8),
        codes=np.ones((2, 64), np.int8),
        group_scale=np.ones((1,), np.float32),
        offset=np.float32(0.5),
        dq_group=256,
    )
    args.update(edit)
    with pytest.raises(jax.errors.JaxRuntimeError, match=message):
        _raw(**args)
    good = _raw(
        np.ones((2, 128), np.float32),
        args["qvalue"],
        np.ones((2, 64), np.int8),
        np.ones((1,), np.float32),
        np.float32(0.5),
    )
    assert np.isfinite(np.asarray(good)).all(), what


def test_x_at_w_under_disable_jit(native_cpu_kernels):
    # With jit disabled the product still compiles to the plugin's kernels (the double-quant
    # one for x @ w, the reference for the transposed gradient) instead of recursing.
    rng = np.random.default_rng(9)
    q = _weight(rng, 128, 40)
    x = jnp.asarray(rng.standard_normal((3, 128)), jnp.float32)
    w = np.asarray(q.materialize(), np.float64)
    with jax.disable_jit():
        y = x @ q
        gx = jax.grad(lambda x: jnp.sum(x @ q))(x)
    np.testing.assert_allclose(y, np.asarray(x, np.float64) @ w, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(gx, np.ones((3, 40)) @ w.T, rtol=1e-5, atol=1e-4)


def test_direct_calls_under_disable_jit(native_cpu_kernels):
    rng = np.random.default_rng(10)
    q = _weight(rng, 128, 40)
    qvalue, codes, group_scale, offset = _parts(q)
    scale = plugin_api.expand_dq_scales(codes, group_scale, offset)
    x = jnp.asarray(rng.standard_normal((2, 128)), jnp.float32)
    want = np.asarray(x, np.float64) @ np.asarray(q.materialize(), np.float64)
    with jax.disable_jit():
        y = jaxcore_cpu.quantized_matmul(x, qvalue, scale, fmt="nf4", block_size=64)
        ydq = jaxcore_cpu.quantized_matmul_dq(
            x, qvalue, codes, group_scale, offset, fmt="nf4", block_size=64
        )
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(ydq, want, rtol=1e-5, atol=1e-4)

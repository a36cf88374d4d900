"""jaxcore_cpu with 16-bit block scales (float16, as llama.cpp stores them, and bfloat16).

The kernels read such scales as stored and convert them in cache, a task's blocks at a time,
so the weight's scales cost half the bytes from memory. Checked here: every format x path x
precision x instruction set against ``x @ dequantize(W)`` in float64 NumPy (the scales
converted by NumPy); that the custom call takes the 16-bit array itself (no float32 copy in
the program); exact conversion of subnormal, infinite and NaN float16 scales; the quantized
arrays' ``scale_dtype`` through ``x @ w`` under ``jit``, ``vmap`` and ``grad``; the
transposed product (both paths) and a ``scan`` over a stack; and the FFI's errors.
"""

import re

import jax
import jax.numpy as jnp
import kernel_test_util
import numpy as np
import pytest

import jaxcore_cpu
from jaxcore import kernels, quant

kernel_test_util.require_native_cpu_kernels()

TARGET = "jaxcore_cpu_quantized_matmul"
ISAS = jaxcore_cpu.available_isas()
HALF = {"f16": jnp.float16, "bf16": jnp.bfloat16}
np_dequant = kernel_test_util.numpy_dense


as64 = kernel_test_util.as64


def weight(fmt, k, n, block_size, half, seed):
    """Random codes and 16-bit scales, and the float64 dense matrix they stand for."""
    rng = np.random.default_rng(seed)
    if fmt == "int8":
        qvalue = rng.integers(-127, 128, (k, n), dtype=np.int8)
    else:
        qvalue = rng.integers(0, 256, (k // 2, n), dtype=np.uint8)
    scale = jnp.asarray(rng.uniform(0.001, 0.1, (k // block_size, n)), HALF[half])
    return jnp.asarray(qvalue), scale, np_dequant(fmt, qvalue, as64(scale), block_size)


def assert_float32_close(got, x, w64, what):
    x64 = as64(x)
    err = np.abs(as64(got) - x64 @ w64)
    bound = 2e-5 * (np.abs(x64) @ np.abs(w64)) + 1e-30
    assert (err <= bound).all(), (what, float(np.max(err / bound)))


CASES = [("int8", 32), ("int8", 96), ("int4", 64), ("nf4", 64), ("nf4", 128)]


@pytest.mark.parametrize("fmt,block_size", CASES)
@pytest.mark.parametrize("half", sorted(HALF))
@pytest.mark.parametrize("path", ["gemv", "gemm", "auto"])
def test_formats_paths_precisions_isas(fmt, block_size, half, path):
    for m, k, n in [(1, 384, 72), (5, 384, 131), (17, 768, 40)]:
        qvalue, scale, w64 = weight(fmt, k, n, block_size, half, seed=m + n)
        x = jnp.asarray(np.random.default_rng(m).standard_normal((m, k)), jnp.float32)
        for isa in ISAS:
            with jaxcore_cpu.set_isa(isa):
                for precision in ("float32", "int8"):
                    got = jaxcore_cpu.quantized_matmul(
                        x,
                        qvalue,
                        scale,
                        fmt=fmt,
                        block_size=block_size,
                        path=path,
                        precision=precision,
                    )
                    what = f"{fmt} b{block_size} {half} {path} {isa} {precision} M={m} N={n}"
                    assert got.shape == (m, n) and got.dtype == jnp.float32, what
                    if precision == "float32" or block_size % 32:
                        assert_float32_close(got, x, w64, what)
                    else:
                        kernel_test_util.assert_int8_close(got, x, w64, what)


def test_the_call_reads_the_16_bit_scales_as_stored():
    qvalue, scale, _ = weight("int4", 256, 64, 64, "f16", seed=1)
    x = jnp.ones((1, 256), jnp.float32)
    f = jax.jit(lambda x, q, s: jaxcore_cpu.quantized_matmul(x, q, s, fmt="int4", block_size=64))
    assert f"custom_call @{TARGET}" in f.lower(x, qvalue, scale).as_text()
    assert not reads_a_float32_copy(f.lower(x, qvalue, scale).compile().as_text())


def reads_a_float32_copy(hlo: str) -> bool:
    """Whether a compiled program (float32 activations) converts anything, or its custom
    call reads no 16-bit operand (the scales)."""
    call = re.search(r"custom-call\(.*operand_layout_constraints=\{(.*?)\}, api_version", hlo)
    return "convert(" in hlo or call is None or re.search(r"\bb?f16\[", call.group(1)) is None


@pytest.mark.parametrize("path", ["gemv", "gemm"])
def test_special_float16_scales_convert_exactly(path):
    """Subnormal scales keep their value; an infinite or NaN scale makes its block's sums
    non-finite, as the float32 reference's do."""
    k, n, bs = 128, 24, 32
    qvalue, scale, _ = weight("int8", k, n, bs, "f16", seed=3)
    special = np.asarray(scale).copy()
    special[0, :8] = np.float16(2.0**-24) * np.arange(1, 9)  # subnormals
    special[1, 8] = np.inf
    special[2, 9] = np.nan
    special[3, 10] = 0.0
    scale = jnp.asarray(special)
    x = jnp.asarray(np.random.default_rng(4).standard_normal((3, k)), jnp.float32)
    got = as64(jaxcore_cpu.quantized_matmul(x, qvalue, scale, fmt="int8", block_size=bs, path=path))
    want = as64(
        kernels.reference_quantized_matmul(
            x, qvalue, scale.astype(jnp.float32), fmt="int8", block_size=bs
        )
    )
    finite = np.isfinite(want)
    assert not finite[:, 8:10].any() and finite[:, :8].all() and finite[:, 10:].all()
    np.testing.assert_array_equal(np.isfinite(got), finite)
    w64 = np_dequant("int8", qvalue, special.astype(np.float64), bs)
    keep = np.ones(n, bool)
    keep[8:10] = False
    assert_float32_close(got[:, keep], x, w64[:, keep], f"special {path}")


@pytest.mark.parametrize("cls", [quant.ArrayInt8, quant.ArrayInt4, quant.ArrayNF4])
@pytest.mark.parametrize("scale_dtype", ["float16", "bfloat16"])
def test_quantized_arrays_with_16_bit_scales(cls, scale_dtype):
    """``x @ w`` with the CPU plugin under jit, vmap and grad equals the dense product of
    ``w.materialize()``, and never converts the stored scales."""
    rng = np.random.default_rng(5)
    w = jnp.asarray(rng.standard_normal((256, 96)) * 0.05, jnp.float32)
    kw = {"block_size": 32} if cls is quant.ArrayInt8 else {}
    q = cls.quantize(w, scale_dtype=scale_dtype, **kw)
    assert q.scale.dtype == jnp.dtype(scale_dtype)
    dense = as64(q.materialize())
    x = jnp.asarray(rng.standard_normal((4, 256)), jnp.float32)
    assert_float32_close(jax.jit(lambda x, q: x @ q)(x, q), x, dense, "jit")
    got = jax.vmap(lambda r: r @ q)(x)
    assert_float32_close(got, x, dense, "vmap")
    g = jax.jit(jax.grad(lambda x: jnp.sum(jnp.sin(x @ q))))(x)
    want = np.cos(as64(x) @ dense) @ dense.T
    np.testing.assert_allclose(as64(g), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    lowered = jax.jit(lambda x, q: x @ q).lower(x, q)
    assert f"custom_call @{TARGET}" in lowered.as_text()
    assert not reads_a_float32_copy(lowered.compile().as_text())


@pytest.mark.parametrize("path", ["gemv", "gemm"])
@pytest.mark.parametrize("half", sorted(HALF))
def test_transposed_product_reads_16_bit_scales(path, half):
    for fmt, block_size in CASES:
        qvalue, scale, w64 = weight(fmt, 384, 72, block_size, half, seed=block_size)
        for m in (1, 3, 20):
            y = jnp.asarray(np.random.default_rng(m).standard_normal((m, 72)), jnp.float32)
            for isa in ISAS:
                with jaxcore_cpu.set_isa(isa):
                    got = jaxcore_cpu.quantized_matmul_transposed(
                        y, qvalue, scale, fmt=fmt, block_size=block_size, path=path
                    )
                assert_float32_close(got, y, w64.T, f"{fmt} b{block_size} {half} {isa} M={m}")


def test_transposed_and_stacked_products_with_16_bit_scales():
    rng = np.random.default_rng(6)
    stack = jnp.asarray(rng.standard_normal((3, 128, 64)) * 0.05, jnp.float32)
    qs = jax.vmap(lambda w: quant.ArrayInt4.quantize(w, 32, scale_dtype="float16"))(stack)
    layer = lambda i: jax.tree_util.tree_map(lambda a: a[i], qs)  # noqa: E731
    dense = [as64(layer(i).materialize()) for i in range(3)]
    x = jnp.asarray(rng.standard_normal((2, 128)), jnp.float32)
    y = jnp.asarray(rng.standard_normal((2, 64)), jnp.float32)

    def layers(x, y):
        def body(carry, layer):
            a, b = carry
            return (a, b), (a @ layer, b @ layer.T)

        return jax.lax.scan(body, (x, y), qs)[1]

    fwd, tr = jax.jit(layers)(x, y)
    for i in range(3):
        assert_float32_close(fwd[i], x, dense[i], f"stacked x @ W[{i}]")
        assert_float32_close(tr[i], y, dense[i].T, f"stacked y @ W[{i}].T")
    single = layer(1)
    transposed = jax.jit(lambda y, q: y @ q.T)
    assert_float32_close(transposed(y, single), y, dense[1].T, "x @ W.T")
    assert not reads_a_float32_copy(transposed.lower(y, single).compile().as_text())


def raw_call(x, qvalue, scale):
    call = jax.ffi.ffi_call(
        TARGET, jax.ShapeDtypeStruct((x.shape[0], qvalue.shape[1]), jnp.float32)
    )
    attrs = dict(fmt=np.int32(0), block_size=np.int64(32), path=np.int32(0))
    return jax.block_until_ready(jax.jit(lambda *a: call(*a, **attrs))(x, qvalue, scale))


def test_ffi_reads_16_bit_scales_and_rejects_other_dtypes():
    qvalue, scale, w64 = weight("int8", 64, 8, 32, "bf16", seed=7)
    x = jnp.asarray(np.random.default_rng(7).standard_normal((2, 64)), jnp.float32)
    assert_float32_close(raw_call(x, qvalue, scale), x, w64, "raw bf16")
    with pytest.raises(Exception, match="scale must be float32, float16 or bfloat16"):
        raw_call(x, qvalue, scale.astype(jnp.int16))
    with pytest.raises(Exception, match=r"scale must have shape .* = \(2, 8\)"):
        raw_call(x, qvalue, scale[:1])

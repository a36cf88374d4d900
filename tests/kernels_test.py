"""Tests for jaxcore.kernels: NF4 table, layout, reference kernels, registry and dispatch."""

import re
from statistics import NormalDist

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcore import kernels
from jaxcore.kernels import _reference

# ----------------------------------------------------------------------------- helpers


def np_unpack(packed):
    out = np.empty((2 * packed.shape[0], packed.shape[1]), np.uint8)
    out[0::2] = packed & 0x0F
    out[1::2] = packed >> 4
    return out


def np_dequant(fmt, qvalue, scale, block_size):
    """Independent NumPy decoding of the documented layout (float64)."""
    qvalue = np.asarray(qvalue)
    if fmt == "int8":
        values = qvalue.astype(np.float64)
    elif fmt == "int4":
        values = np_unpack(qvalue).astype(np.float64) - 8
    else:
        values = np.asarray(kernels.NF4_CODE, np.float64)[np_unpack(qvalue)]
    return values * np.repeat(np.asarray(scale, np.float64), block_size, axis=0)


def random_layout(rng, fmt, k, n, block_size):
    if fmt == "int8":
        qvalue = rng.integers(-127, 128, (k, n)).astype(np.int8)
    else:
        qvalue = rng.integers(0, 256, (k // 2, n)).astype(np.uint8)
    scale = rng.uniform(0.01, 0.2, (k // block_size, n)).astype(np.float32)
    return qvalue, scale


class FakeQuant:
    """Minimal object with the quantized-array protocol (no jaxcore.quant dependency)."""

    def __init__(self, fmt, qvalue, scale, block_size, axis=0):
        self.fmt, self.qvalue, self._scale, self.block_size, self.axis = (
            fmt,
            qvalue,
            scale,
            block_size,
            axis,
        )

    def block_scales(self):
        return self._scale


@pytest.fixture
def isolated_registry(monkeypatch):
    """Leaves only the reference on CPU for the test, and restores the registry after."""
    monkeypatch.delenv(kernels.INTERPRET_ENV_VAR, raising=False)
    saved = kernels.registered_kernels("quantized_matmul")
    for platform in saved:
        kernels.unregister_kernel("quantized_matmul", platform)
    kernels.register_kernel("quantized_matmul", "cpu", kernels.reference_quantized_matmul)
    yield
    for platform in kernels.registered_kernels("quantized_matmul"):
        kernels.unregister_kernel("quantized_matmul", platform)
    for platform, impl in saved.items():
        kernels.register_kernel("quantized_matmul", platform, impl)


FORMATS = ["int8", "int4", "nf4"]

# Tests that assert which platform_dependent branch runs: with stand-in accelerator kernels
# registered, a GPU/TPU test process would (correctly) run those instead of the reference.
cpu_only = pytest.mark.skipif(
    jax.default_backend() != "cpu", reason="asserts that the CPU branch of the dispatch runs"
)

# ----------------------------------------------------------------------------- NF4 table


def test_nf4_code_matches_normal_quantile_construction():
    # QLoRA's construction: 8 positive and 7 negative normal quantiles, zero, scaled to [-1, 1].
    offset = 0.9677083
    dist = NormalDist()
    positive = [dist.inv_cdf(p) for p in np.linspace(offset, 0.5, 9)[:-1]]
    negative = [-dist.inv_cdf(p) for p in np.linspace(offset, 0.5, 8)[:-1]]
    derived = np.sort(np.array(positive + [0.0] + negative))
    derived /= derived.max()
    code = kernels.NF4_CODE
    assert code.dtype == np.float32 and code.shape == (16,)
    np.testing.assert_allclose(code, derived, atol=1e-6)
    assert code[0] == -1.0 and code[7] == 0.0 and code[15] == 1.0
    assert np.all(np.diff(code) > 0)
    with pytest.raises(ValueError):
        code[0] = 2.0  # read-only


# ----------------------------------------------------------------------------- layout


def test_pack_unpack_nibble_order():
    rng = np.random.default_rng(0)
    nib = rng.integers(0, 16, (8, 5)).astype(np.uint8)
    packed = np.asarray(kernels.pack_nibbles(nib))
    np.testing.assert_array_equal(packed, nib[0::2] | (nib[1::2] << 4))
    np.testing.assert_array_equal(np.asarray(kernels.unpack_nibbles(packed)), nib)


@pytest.mark.parametrize("fmt", FORMATS)
def test_dequantize_matches_numpy(fmt):
    rng = np.random.default_rng(1)
    qvalue, scale = random_layout(rng, fmt, 128, 12, 32)
    np.testing.assert_allclose(
        kernels.dequantize(fmt, qvalue, scale, 32), np_dequant(fmt, qvalue, scale, 32), rtol=1e-6
    )


@pytest.mark.parametrize(
    "fmt, qvalue, scale, block_size, message",
    [
        (
            "int2",
            np.zeros((4, 4), np.int8),
            np.ones((1, 4), np.float32),
            4,
            "unknown quantization format",
        ),
        ("int8", np.zeros((4, 4, 1), np.int8), np.ones((1, 4), np.float32), 4, "must be 2-D"),
        ("int8", np.zeros((4, 4), np.uint8), np.ones((1, 4), np.float32), 4, "dtype int8"),
        ("nf4", np.zeros((4, 4), np.int8), np.ones((1, 4), np.float32), 4, "dtype uint8"),
        (
            "int8",
            np.zeros((6, 4), np.int8),
            np.ones((1, 4), np.float32),
            4,
            "positive divisor of K=6",
        ),
        ("int8", np.zeros((6, 4), np.int8), np.ones((1, 4), np.float32), 0, "positive divisor"),
        ("int4", np.zeros((3, 4), np.uint8), np.ones((2, 4), np.float32), 3, "even block_size"),
        ("int8", np.zeros((8, 4), np.int8), np.ones((1, 4), np.float32), 4, r"\(2, 4\)"),
        ("int8", np.zeros((8, 4), np.int8), np.ones((2, 4), np.int32), 4, "floating point"),
    ],
)
def test_layout_errors(fmt, qvalue, scale, block_size, message):
    with pytest.raises(ValueError, match=message):
        kernels.dequantize(fmt, qvalue, scale, block_size)


# ----------------------------------------------------------------------------- reference kernels


@pytest.mark.parametrize(
    "fmt, m, k, n, block_size",
    [
        ("int8", 1, 256, 24, 64),
        ("int8", 5, 1024, 16, 1024),  # per-channel: steps are divisors of one large block
        ("int8", 3, 67, 9, 67),  # prime K: the whole block in one step
        ("int4", 7, 192, 10, 32),
        ("int4", 1, 1536, 8, 768),
        ("nf4", 4, 256, 33, 64),
        ("nf4", 2, 2048, 8, 64),
    ],
)
def test_reference_matmul_and_transposed_match_numpy(fmt, m, k, n, block_size):
    rng = np.random.default_rng(2)
    qvalue, scale = random_layout(rng, fmt, k, n, block_size)
    w = np_dequant(fmt, qvalue, scale, block_size)
    x = rng.standard_normal((m, k)).astype(np.float32)
    y = kernels.reference_quantized_matmul(x, qvalue, scale, fmt=fmt, block_size=block_size)
    assert y.shape == (m, n) and y.dtype == jnp.float32
    np.testing.assert_allclose(y, x.astype(np.float64) @ w, rtol=1e-5, atol=1e-4)
    xt = rng.standard_normal((m, n)).astype(np.float32)
    yt = kernels.reference_quantized_matmul_transposed(
        xt, qvalue, scale, fmt=fmt, block_size=block_size
    )
    assert yt.shape == (m, k)
    np.testing.assert_allclose(yt, xt.astype(np.float64) @ w.T, rtol=1e-5, atol=1e-4)


def test_step_rows_choices():
    assert _reference.step_rows("nf4", 4096, 64) == 512  # 8 blocks per step
    assert _reference.step_rows("nf4", 192, 64) == 192
    assert _reference.step_rows("int8", 4096, 4096) == 512  # a divisor of the one block
    assert _reference.step_rows("int4", 1536, 768) == 384  # even divisor
    assert _reference.step_rows("int8", 67, 67) == 67  # no useful divisor: whole block
    for fmt, k, bs in [("int8", 4096, 64), ("int4", 1536, 768), ("int8", 1000, 1000)]:
        step = _reference.step_rows(fmt, k, bs)
        assert k % step == 0 and (step % bs == 0 or bs % step == 0)


@pytest.mark.parametrize("fmt, block_size", [("int8", 256), ("int4", 32), ("nf4", 64)])
def test_reference_scale_gradient_matches_autodiff(fmt, block_size):
    rng = np.random.default_rng(3)
    k, n, m = 256, 6, 3
    qvalue, scale = random_layout(rng, fmt, k, n, block_size)
    unscaled = np_dequant(fmt, qvalue, np.ones_like(scale), block_size).astype(np.float32)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((m, n)).astype(np.float32)

    def dense(s):
        return jnp.sum(b * (a @ (unscaled * jnp.repeat(s, block_size, axis=0))))

    expected = jax.grad(dense)(jnp.asarray(scale))
    got = kernels.reference_scale_gradient(a, b, qvalue, scale, fmt=fmt, block_size=block_size)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_reference_operand_errors():
    qvalue, scale = random_layout(np.random.default_rng(0), "int8", 16, 4, 8)
    with pytest.raises(ValueError, match=r"shape \(M, 16\).*got \(2, 15\)"):
        kernels.reference_quantized_matmul(
            np.ones((2, 15), np.float32), qvalue, scale, fmt="int8", block_size=8
        )
    with pytest.raises(TypeError, match="floating point, got dtype int32"):
        kernels.reference_quantized_matmul(
            np.ones((2, 16), np.int32), qvalue, scale, fmt="int8", block_size=8
        )
    with pytest.raises(ValueError, match=r"output size N"):
        kernels.reference_quantized_matmul_transposed(
            np.ones((2, 5), np.float32), qvalue, scale, fmt="int8", block_size=8
        )


# ----------------------------------------------------------------------------- quantized_matmul


@pytest.mark.parametrize("fmt", FORMATS)
def test_quantized_matmul_leading_dims_and_dtypes(fmt, isolated_registry):
    rng = np.random.default_rng(4)
    qvalue, scale = random_layout(rng, fmt, 128, 20, 64)
    q = FakeQuant(fmt, qvalue, scale, 64)
    w = np_dequant(fmt, qvalue, scale, 64)
    x = rng.standard_normal((2, 3, 128)).astype(np.float32)
    y = kernels.quantized_matmul(x, q)
    assert y.shape == (2, 3, 20) and y.dtype == jnp.float32
    np.testing.assert_allclose(y, x.astype(np.float64) @ w, rtol=1e-5, atol=1e-4)
    xb = jnp.asarray(x, jnp.bfloat16)
    yb = kernels.quantized_matmul(xb, q)
    assert yb.dtype == jnp.bfloat16
    y32 = kernels.quantized_matmul(xb, q, preferred_element_type=jnp.float32)
    assert y32.dtype == jnp.float32
    np.testing.assert_allclose(y32, np.asarray(xb, np.float64) @ w, rtol=1e-4, atol=1e-3)
    xt = rng.standard_normal((4, 20)).astype(np.float32)
    np.testing.assert_allclose(
        kernels.quantized_matmul_transposed(xt, q),
        xt.astype(np.float64) @ w.T,
        rtol=1e-5,
        atol=1e-4,
    )


def _check_empty_products(q, k, n):
    for lead in [(0,), (2, 0), (0, 3)]:
        x = jnp.ones((*lead, k), jnp.bfloat16)
        y = jax.jit(lambda x: kernels.quantized_matmul(x, q))(x)
        assert y.shape == (*lead, n) and y.dtype == jnp.bfloat16
        np.testing.assert_array_equal(y, jnp.dot(x, jnp.ones((k, n), jnp.bfloat16)))
        yt = kernels.quantized_matmul_transposed(jnp.ones((*lead, n)), q)
        assert yt.shape == (*lead, k) and yt.dtype == jnp.float32 and not np.any(yt)
    gx = jax.grad(lambda x: jnp.sum(kernels.quantized_matmul(x, q)))(jnp.ones((0, k)))
    assert gx.shape == (0, k)
    yv = jax.vmap(lambda x: kernels.quantized_matmul(x, q))(jnp.ones((3, 0, k)))
    assert yv.shape == (3, 0, n)


@pytest.mark.parametrize("fmt", FORMATS)
def test_empty_products_are_zeros_and_reach_no_kernel(fmt, isolated_registry):
    rng = np.random.default_rng(12)
    qvalue, scale = random_layout(rng, fmt, 64, 8, 32)
    q = FakeQuant(fmt, qvalue, scale, 32)
    cpu, tpu = RecordingKernel(100.0), RecordingKernel(200.0)
    kernels.register_kernel("quantized_matmul", "cpu", cpu)
    kernels.register_kernel("quantized_matmul", "tpu", tpu)
    _check_empty_products(q, 64, 8)
    assert cpu.calls == [] and tpu.calls == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_empty_products_with_the_installed_kernels(fmt):
    # Every installed plugin's kernel is a branch of the dispatch, traced whatever the
    # platform: an empty batch once reached the TPU kernel's tile choice (block_m=0) and
    # raised on CPU.
    rng = np.random.default_rng(13)
    qvalue, scale = random_layout(rng, fmt, 64, 8, 32)
    _check_empty_products(FakeQuant(fmt, qvalue, scale, 32), 64, 8)


@pytest.mark.parametrize("fmt", FORMATS)
def test_quantized_matmul_under_disable_jit(fmt):
    # The primitives' eager implementation is a jitted bind: with jit disabled it must still
    # compile (as JAX's own primitives do), not run the bind eagerly and recurse.
    rng = np.random.default_rng(14)
    qvalue, scale = random_layout(rng, fmt, 64, 8, 32)
    q = FakeQuant(fmt, qvalue, scale, 32)
    w = np_dequant(fmt, qvalue, scale, 32)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    xt = rng.standard_normal((3, 8)).astype(np.float32)
    with jax.disable_jit():
        y = kernels.quantized_matmul(x, q)
        yt = kernels.quantized_matmul_transposed(xt, q)
        gx = jax.grad(lambda x: jnp.sum(kernels.quantized_matmul(x, q)))(x)
        yv = jax.vmap(lambda x: kernels.quantized_matmul(x, q))(x[:, None])
    np.testing.assert_allclose(y, x.astype(np.float64) @ w, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(yt, xt.astype(np.float64) @ w.T, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(gx, np.ones((3, 8)) @ w.T, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(yv[:, 0], y, rtol=1e-6, atol=1e-6)


def test_quantized_matmul_axis1_storage_swaps_kernels(isolated_registry):
    rng = np.random.default_rng(5)
    qvalue, scale = random_layout(rng, "int8", 64, 12, 64)
    q = FakeQuant("int8", qvalue, scale, 64, axis=1)  # logical weight is the stored one transposed
    w = np_dequant("int8", qvalue, scale, 64).T  # (12, 64)
    x = rng.standard_normal((3, 12)).astype(np.float32)
    np.testing.assert_allclose(kernels.quantized_matmul(x, q), x @ w, rtol=1e-5, atol=1e-4)
    x2 = rng.standard_normal((3, 64)).astype(np.float32)
    np.testing.assert_allclose(
        kernels.quantized_matmul_transposed(x2, q), x2 @ w.T, rtol=1e-5, atol=1e-4
    )


@pytest.mark.parametrize("fmt", FORMATS)
def test_quantized_matmul_transforms(fmt, isolated_registry):
    rng = np.random.default_rng(6)
    k, n, bs = 128, 10, 32
    qvalue, scale = random_layout(rng, fmt, k, n, bs)
    unscaled = jnp.asarray(np_dequant(fmt, qvalue, np.ones_like(scale), bs), jnp.float32)
    x = jnp.asarray(rng.standard_normal((4, k)), jnp.float32)
    target = jnp.asarray(rng.standard_normal((4, n)), jnp.float32)

    def loss(x, s, matmul):
        return jnp.sum(jnp.tanh(matmul(x, s)) * target)

    def kernel_mm(x, s):
        return kernels.quantized_matmul(x, FakeQuant(fmt, qvalue, s, bs))

    def dense_mm(x, s):
        return jnp.dot(x, unscaled * jnp.repeat(s, bs, axis=0), precision="highest")

    gx, gs = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)(x, scale, kernel_mm)
    ex, es = jax.grad(loss, argnums=(0, 1))(x, scale, dense_mm)
    np.testing.assert_allclose(gx, ex, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gs, es, rtol=1e-4, atol=1e-4)

    # Second order through the custom VJPs (the backward of the backward).
    hx = jax.grad(lambda x: jnp.sum(jax.grad(loss)(x, scale, kernel_mm) ** 2))(x)
    ehx = jax.grad(lambda x: jnp.sum(jax.grad(loss)(x, scale, dense_mm) ** 2))(x)
    np.testing.assert_allclose(hx, ehx, rtol=1e-3, atol=1e-4)

    xs = jnp.asarray(rng.standard_normal((3, 2, k)), jnp.float32)
    np.testing.assert_allclose(
        jax.vmap(lambda xi: kernel_mm(xi, scale))(xs), dense_mm(xs, scale), rtol=1e-5, atol=1e-4
    )
    scales = jnp.asarray(rng.uniform(0.01, 0.2, (3,) + scale.shape), jnp.float32)
    np.testing.assert_allclose(
        jax.vmap(lambda s: kernel_mm(x, s))(scales),
        jax.vmap(lambda s: dense_mm(x, s))(scales),
        rtol=1e-5,
        atol=1e-4,
    )

    # Gradient of the transposed product, whose backward runs the dispatched kernel.
    xt = jnp.asarray(rng.standard_normal((4, n)), jnp.float32)
    tt = jnp.asarray(rng.standard_normal((4, k)), jnp.float32)
    gt = jax.grad(
        lambda v: jnp.sum(
            kernels.quantized_matmul_transposed(v, FakeQuant(fmt, qvalue, scale, bs)) * tt
        )
    )(xt)
    egt = jax.grad(lambda v: jnp.sum(dense_mm(jnp.eye(k), scale) @ v.T * tt.T))(xt)
    np.testing.assert_allclose(gt, egt, rtol=1e-4, atol=1e-4)


def test_quantized_matmul_errors(isolated_registry):
    qvalue, scale = random_layout(np.random.default_rng(0), "nf4", 64, 4, 32)
    q = FakeQuant("nf4", qvalue, scale, 32)
    with pytest.raises(TypeError, match=r"lacks \['fmt', 'block_size', 'qvalue', 'block_scales'\]"):
        kernels.quantized_matmul(np.ones((2, 64), np.float32), object())
    with pytest.raises(TypeError, match="x must be floating point"):
        kernels.quantized_matmul(np.ones((2, 64), np.int32), q)
    with pytest.raises(
        ValueError, match=r"x @ W: x's last axis must equal 64 .*\(64, 4\).*\(2, 63\)"
    ):
        kernels.quantized_matmul(np.ones((2, 63), np.float32), q)
    with pytest.raises(ValueError, match=r"x @ W.T: x's last axis must equal 4"):
        kernels.quantized_matmul_transposed(np.ones((2, 64), np.float32), q)
    with pytest.raises(ValueError, match="q.axis must be 0 or 1"):
        kernels.quantized_matmul(
            np.ones((2, 64), np.float32), FakeQuant("nf4", qvalue, scale, 32, axis=2)
        )
    with pytest.raises(ValueError, match="even block_size"):
        kernels.quantized_matmul(
            np.ones((2, 64), np.float32), FakeQuant("nf4", qvalue, np.ones((64, 4), np.float32), 1)
        )


# ----------------------------------------------------------------------------- memory (compiled HLO)

_FLOAT_BUFFER = re.compile(r"\b(f16|bf16|f32|f64)\[([0-9,]+)\]")


def _largest_float_buffer(hlo_text):
    sizes = [
        int(np.prod([int(d) for d in dims.split(",")]))
        for _, dims in _FLOAT_BUFFER.findall(hlo_text)
    ]
    return max(sizes)


def test_compiled_reference_never_holds_the_dense_weight(isolated_registry):
    k, n, bs = 2048, 64, 64
    qvalue, scale = random_layout(np.random.default_rng(7), "nf4", k, n, bs)
    x = jnp.ones((2, k), jnp.float32)

    def fused(x, qvalue, scale):
        return kernels.quantized_matmul(x, FakeQuant("nf4", qvalue, scale, bs))

    def dense(x, qvalue, scale):
        return x @ kernels.dequantize("nf4", qvalue, scale, bs)

    fused_hlo = jax.jit(fused).lower(x, qvalue, scale).compile().as_text()
    dense_hlo = jax.jit(dense).lower(x, qvalue, scale).compile().as_text()
    # The scan works: the materializing program does hold a (K, N) float buffer ...
    assert _largest_float_buffer(dense_hlo) >= k * n
    # ... and the kernel's program never holds a float buffer of the weight's size.
    assert _largest_float_buffer(fused_hlo) < k * n
    assert _largest_float_buffer(fused_hlo) <= 512 * n  # one dequantized step


# ----------------------------------------------------------------------------- registry and dispatch


def test_register_kernel_errors(isolated_registry):
    with pytest.raises(ValueError, match="unknown platform 'gpu'"):
        kernels.register_kernel("quantized_matmul", "gpu", kernels.reference_quantized_matmul)
    with pytest.raises(ValueError, match="non-empty string"):
        kernels.register_kernel("", "cpu", kernels.reference_quantized_matmul)
    with pytest.raises(TypeError, match="must be callable"):
        kernels.register_kernel("quantized_matmul", "cuda", 3)
    with pytest.raises(
        KeyError, match="no kernel 'quantized_matmul' registered for platform 'tpu'"
    ):
        kernels.unregister_kernel("quantized_matmul", "tpu")
    assert kernels.registered_kernels("quantized_matmul") == {
        "cpu": kernels.reference_quantized_matmul
    }
    assert kernels.registered_kernels("no_such_kernel") == {}


class RecordingKernel:
    """A stand-in accelerator kernel: dense dequantize-then-matmul plus a marker offset."""

    def __init__(self, marker):
        self.marker = marker
        self.calls = []

    def __call__(self, x2d, qvalue, scale, *, fmt, block_size, out_dtype, interpret=False):
        self.calls.append(interpret)
        w = kernels.dequantize(fmt, qvalue, scale, block_size)
        return (jnp.dot(x2d, w, precision="highest") + self.marker).astype(out_dtype)


def _setup_dispatch():
    rng = np.random.default_rng(8)
    qvalue, scale = random_layout(rng, "int4", 64, 8, 32)
    q = FakeQuant("int4", qvalue, scale, 32)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    return x, q, x.astype(np.float64) @ np_dequant("int4", qvalue, scale, 32)


@cpu_only
def test_cpu_runs_reference_even_with_accelerator_kernels(isolated_registry):
    x, q, expected = _setup_dispatch()
    cuda, tpu = RecordingKernel(100.0), RecordingKernel(200.0)
    kernels.register_kernel("quantized_matmul", "cuda", cuda)
    kernels.register_kernel("quantized_matmul", "tpu", tpu)
    np.testing.assert_allclose(kernels.quantized_matmul(x, q), expected, rtol=1e-5, atol=1e-4)
    # Every branch is staged out (not in interpret mode), and the CPU one runs.
    assert cuda.calls == [False] and tpu.calls == [False]

    def f(x, qvalue, scale):
        return kernels.quantized_matmul(x, FakeQuant("int4", qvalue, scale, 32))

    y = jax.jit(f)(x, q.qvalue, q.block_scales())
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-4)
    # The same configuration and shapes reuse the compiled program: no new trace.
    assert cuda.calls == [False] and tpu.calls == [False]
    kernels.quantized_matmul(x, q)
    assert cuda.calls == [False]
    # A newly registered kernel changes the configuration, so the next call traces again.
    rocm = RecordingKernel(300.0)
    kernels.register_kernel("quantized_matmul", "rocm", rocm)
    np.testing.assert_allclose(kernels.quantized_matmul(x, q), expected, rtol=1e-5, atol=1e-4)
    assert rocm.calls == [False]


@cpu_only
@pytest.mark.parametrize("value, marker", [("1", 100.0), ("cuda", 100.0), ("tpu", 200.0)])
def test_interpret_env_var_selects_cpu_branch(value, marker, isolated_registry, monkeypatch):
    x, q, expected = _setup_dispatch()
    kernels.register_kernel("quantized_matmul", "cuda", RecordingKernel(100.0))
    kernels.register_kernel("quantized_matmul", "tpu", RecordingKernel(200.0))
    monkeypatch.setenv(kernels.INTERPRET_ENV_VAR, value)
    y = kernels.quantized_matmul(x, q)
    np.testing.assert_allclose(y, expected + marker, rtol=1e-5, atol=1e-4)
    chosen = kernels.registered_kernels("quantized_matmul")["cuda" if marker == 100.0 else "tpu"]
    assert True in chosen.calls  # called with interpret=True for the cpu branch


def test_interpret_env_var_off_and_errors(isolated_registry, monkeypatch):
    x, q, expected = _setup_dispatch()
    monkeypatch.setenv(kernels.INTERPRET_ENV_VAR, "0")
    np.testing.assert_allclose(kernels.quantized_matmul(x, q), expected, rtol=1e-5, atol=1e-4)
    monkeypatch.setenv(kernels.INTERPRET_ENV_VAR, "1")
    with pytest.warns(RuntimeWarning, match="no non-CPU 'quantized_matmul' kernel is registered"):
        y = kernels.quantized_matmul(x, q)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-4)
    monkeypatch.setenv(kernels.INTERPRET_ENV_VAR, "rocm")
    with pytest.raises(RuntimeError, match="none is registered for 'rocm'"):
        kernels.quantized_matmul(x, q)
    monkeypatch.setenv(kernels.INTERPRET_ENV_VAR, "yes")
    with pytest.raises(ValueError, match="JAXCORE_PALLAS_INTERPRET='yes' is not understood"):
        kernels.quantized_matmul(x, q)


@cpu_only
def test_one_exported_program_serves_several_platforms(isolated_registry):
    x, q, expected = _setup_dispatch()
    cuda = RecordingKernel(100.0)
    kernels.register_kernel("quantized_matmul", "cuda", cuda)

    def f(x, qvalue, scale):
        return kernels.quantized_matmul(x, FakeQuant("int4", qvalue, scale, 32))

    exported = jax.export.export(jax.jit(f), platforms=["cpu", "cuda", "tpu"])(
        x, q.qvalue, q.block_scales()
    )
    assert exported.platforms == ("cpu", "cuda", "tpu")
    # The module dispatches on the platform index at run time (one program, three branches).
    assert "platform_index" in exported.mlir_module() or "stablehlo.case" in exported.mlir_module()
    np.testing.assert_allclose(
        exported.call(x, q.qvalue, q.block_scales()), expected, rtol=1e-5, atol=1e-4
    )

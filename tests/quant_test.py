"""Tests for jaxcore.quant: quantizers vs NumPy, matmuls under implicit, transforms, memory, QAT."""

import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcore import kernels
from jaxcore.implicit import MaterializationWarning, implicit, ste
from jaxcore.quant import ArrayInt4, ArrayInt8, ArrayNF4, fake_quantize

NF4 = np.asarray(kernels.NF4_CODE, np.float64)


def weight(k=256, n=24, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal((k, n)).astype(dtype)


def np_unpack(packed):
    out = np.empty((2 * packed.shape[0], packed.shape[1]), np.int64)
    out[0::2] = packed & 0x0F
    out[1::2] = packed >> 4
    return out


def np_block_absmax(w, bs):
    k, n = w.shape
    return np.abs(w.astype(np.float64)).reshape(k // bs, bs, n).max(axis=1)


@pytest.fixture(autouse=True)
def reference_kernel_only(monkeypatch):
    """Runs these tests against the portable reference alone, whatever plugins are installed.

    Plugin kernels are tested in their own files; here they would only be traced as extra
    `platform_dependent` branches, slowing every jit down without being run on CPU.
    """
    monkeypatch.delenv(kernels.INTERPRET_ENV_VAR, raising=False)
    saved = kernels.registered_kernels("quantized_matmul")
    for platform in saved:
        if platform != "cpu":
            kernels.unregister_kernel("quantized_matmul", platform)
    yield
    for platform, impl in saved.items():
        kernels.register_kernel("quantized_matmul", platform, impl)


@pytest.fixture
def no_materialize():
    """Turns a fallback materialization of a quantized array into a test failure."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", MaterializationWarning)
        yield


# ----------------------------------------------------------------------------- quantizers


@pytest.mark.parametrize("bs", [None, 32])
def test_int8_codes_scales_and_error_bound(bs):
    w = weight()
    q = ArrayInt8.quantize(w, block_size=bs)
    size = 256 if bs is None else bs
    absmax = np_block_absmax(w, size)
    assert q.qvalue.dtype == jnp.int8 and q.qvalue.shape == (256, 24)
    assert q.scale.shape == (256 // size, 24) and q.block_size == size and q.fmt == "int8"
    np.testing.assert_allclose(q.scale, absmax / 127, rtol=1e-6)
    codes = np.asarray(q.qvalue, np.int64)
    scale_rows = np.repeat(np.asarray(q.scale, np.float64), size, axis=0)
    # Each code is the nearest integer to w / scale, and each block's extreme hits +-127.
    assert np.all(np.abs(codes - w / scale_rows) <= 0.5 + 1e-4)
    assert np.all(np.abs(codes).reshape(256 // size, size, 24).max(axis=1) == 127)
    dense = np.asarray(q.materialize(), np.float64)
    np.testing.assert_allclose(dense, codes * scale_rows, rtol=1e-6)
    assert np.all(np.abs(dense - w) <= scale_rows / 2 * (1 + 1e-4))


def test_int8_axis1_scales_rows():
    w = weight(64, 96)
    q = ArrayInt8.quantize(w, axis=1)
    assert q.shape == (64, 96) and q.axis == 1
    assert q.qvalue.shape == (96, 64) and q.scale.shape == (1, 64)
    np.testing.assert_allclose(q.scale[0], np.abs(w).max(axis=1) / 127, rtol=1e-6)
    row_scale = np.asarray(q.scale[0], np.float64)[:, None]
    assert np.all(np.abs(np.asarray(q.materialize()) - w) <= row_scale / 2 * (1 + 1e-4))


def test_int4_packing_codes_and_error_bound():
    w = weight(128, 20, seed=1)
    q = ArrayInt4.quantize(w, block_size=32)
    assert q.qvalue.dtype == jnp.uint8 and q.qvalue.shape == (64, 20) and q.scale.shape == (4, 20)
    absmax = np_block_absmax(w, 32)
    np.testing.assert_allclose(q.scale, absmax / 7, rtol=1e-6)
    codes = np_unpack(np.asarray(q.qvalue)) - 8
    assert codes.min() >= -7 and codes.max() <= 7  # symmetric: nibble 0 (q = -8) unused
    scale_rows = np.repeat(np.asarray(q.scale, np.float64), 32, axis=0)
    assert np.all(np.abs(codes - w / scale_rows) <= 0.5 + 1e-4)
    dense = np.asarray(q.materialize(), np.float64)
    np.testing.assert_allclose(dense, codes * scale_rows, rtol=1e-6)
    assert np.all(np.abs(dense - w) <= scale_rows / 2 * (1 + 1e-4))


def test_nf4_nearest_code_and_spacing_bound():
    w = weight(256, 32, seed=2)
    q = ArrayNF4.quantize(w)  # block_size 64 by default
    assert q.block_size == 64 and q.qvalue.shape == (128, 32) and q.scale.shape == (4, 32)
    absmax = np_block_absmax(w, 64)
    np.testing.assert_allclose(q.block_scales(), absmax, rtol=1e-7)
    idx = np_unpack(np.asarray(q.qvalue))
    normalized = w / np.repeat(absmax, 64, axis=0)
    # Each index is a nearest code (up to float32 rounding of the normalized value).
    dist = np.abs(normalized[..., None] - NF4[None, None, :])
    assert np.all(
        dist[np.arange(256)[:, None], np.arange(32)[None, :], idx] <= dist.min(axis=-1) + 1e-6
    )
    # Round trip: the error is within half the NF4 code spacing around the chosen code.
    gaps = np.diff(NF4)
    spacing = np.maximum(np.r_[gaps[0], gaps], np.r_[gaps, gaps[-1]])
    dense = np.asarray(q.materialize(), np.float64)
    bound = 0.5 * spacing[idx] * np.repeat(absmax, 64, axis=0)
    assert np.all(np.abs(dense - w) <= bound * (1 + 1e-5) + 1e-7)
    # Each block's extreme is represented exactly (code +-1 times absmax).
    extremes = np.abs(w).reshape(4, 64, 32).argmax(axis=1)
    rows = extremes + 64 * np.arange(4)[:, None]
    np.testing.assert_allclose(np.abs(dense[rows, np.arange(32)]), absmax, rtol=1e-6)


def test_nf4_double_quant():
    w = weight(1024, 40, seed=3)  # 16 * 40 = 640 block scales -> 3 groups of 256
    plain = ArrayNF4.quantize(w)
    dq = ArrayNF4.quantize(w, double_quant=True)
    assert not plain.double_quant and dq.double_quant
    assert dq.scale.dtype == jnp.int8 and dq.scale_group_scale.shape == (3,)
    absmax = np_block_absmax(w, 64)
    flat = absmax.reshape(-1)
    offset = flat.mean()
    group = np.arange(flat.size) // 256
    group_max = np.array([np.abs(flat[group == g] - offset).max() for g in range(3)])
    np.testing.assert_allclose(dq.scale_offset, offset, rtol=1e-6)
    np.testing.assert_allclose(dq.scale_group_scale, group_max / 127, rtol=1e-5)
    err = np.abs(np.asarray(dq.block_scales(), np.float64) - absmax).reshape(-1)
    assert np.all(err <= (group_max / 127 / 2)[group] * (1 + 1e-4) + 1e-7)
    np.testing.assert_array_equal(dq.qvalue, plain.qvalue)
    assert dq.storage_nbytes < plain.storage_nbytes
    # The codes are unchanged, so the dense weights differ only by the scale error.
    diff = np.abs(
        np.asarray(dq.materialize(), np.float64) - np.asarray(plain.materialize(), np.float64)
    )
    assert np.all(diff <= np.repeat(err.reshape(absmax.shape), 64, axis=0) + 1e-6)


def test_storage_bytes_per_weight():
    w = weight(1024, 64)
    assert ArrayInt8.quantize(w).storage_nbytes == 1024 * 64 + 4 * 64
    assert ArrayInt4.quantize(w).storage_nbytes == 1024 * 64 // 2 + 4 * 16 * 64
    assert ArrayNF4.quantize(w).storage_nbytes == 1024 * 64 // 2 + 4 * 16 * 64
    assert (
        ArrayNF4.quantize(w, double_quant=True).storage_nbytes
        == 1024 * 64 // 2 + 16 * 64 + 4 * 4 + 4
    )


def test_bfloat16_weights_and_zero_blocks():
    w = weight(128, 8).astype(jnp.bfloat16)
    w = jnp.asarray(w).at[:64, 0].set(0)  # an all-zero block quantizes to exact zeros
    for cls in (ArrayInt8, ArrayInt4, ArrayNF4):
        q = cls.quantize(w, block_size=64)
        dense = q.materialize()
        assert dense.dtype == jnp.bfloat16 and q.dtype == jnp.bfloat16
        np.testing.assert_array_equal(np.asarray(dense[:64, 0], np.float32), 0)
        assert np.all(np.isfinite(np.asarray(dense, np.float32)))


def test_transpose_views_share_data():
    w = weight(128, 64)
    for q in (
        ArrayInt8.quantize(w),
        ArrayInt4.quantize(w),
        ArrayNF4.quantize(w, double_quant=True),
    ):
        t = q.T
        assert t.shape == (64, 128) and t.axis == 1 and t.qvalue is q.qvalue
        np.testing.assert_array_equal(t.materialize(), np.asarray(q.materialize()).T)
        assert t.T.axis == 0 and t.T.shape == (128, 64)


def test_pytree_round_trip_and_jit_argument():
    q = ArrayNF4.quantize(weight(128, 16), double_quant=True)
    leaves, treedef = jax.tree_util.tree_flatten(q)
    assert len(leaves) == 4
    back = jax.tree_util.tree_unflatten(treedef, leaves)
    assert type(back) is ArrayNF4 and back.block_size == 64 and back.double_quant
    np.testing.assert_allclose(jax.jit(lambda q: q.materialize())(q), q.materialize(), rtol=1e-6)


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "call, error, message",
    [
        (
            lambda: ArrayInt4.quantize(weight(96, 4), block_size=64),
            ValueError,
            r"block_size=64 must be a positive divisor of the blocked axis size 96",
        ),
        (
            lambda: ArrayNF4.quantize(weight(90, 4), block_size=45),
            ValueError,
            "block_size=45 must be even",
        ),
        (lambda: ArrayInt8.quantize(weight(96, 4), block_size=0), ValueError, "positive divisor"),
        (
            lambda: ArrayInt8.quantize(weight(96, 4), block_size=2.0),
            TypeError,
            "block_size must be an int",
        ),
        (
            lambda: ArrayInt8.quantize(weight(96, 4), axis=1, block_size=3),
            ValueError,
            r"axis 1 of \(96, 4\)",
        ),
        (
            lambda: ArrayInt8.quantize(np.ones((8, 8), np.int32)),
            TypeError,
            "unsupported dtype int32",
        ),
        (
            lambda: ArrayNF4.quantize(np.ones((8, 8), np.complex64)),
            TypeError,
            "unsupported dtype complex64",
        ),
        (
            lambda: ArrayNF4.quantize(np.ones((64,), np.float32)),
            ValueError,
            r"2-D \(K, N\) weight, got shape \(64,\)",
        ),
        (lambda: ArrayInt8.quantize(weight(8, 8), axis=2), ValueError, "axis must be 0 or 1"),
        (lambda: fake_quantize(weight(8, 8), "fp8"), ValueError, "unknown format 'fp8'"),
    ],
)
def test_quantize_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("cls", [ArrayInt8, ArrayInt4, ArrayNF4])
def test_non_finite_input_is_rejected_with_check_finite(cls, bad):
    w = weight(64, 8)
    w[5, 3] = bad
    with pytest.raises(
        ValueError, match=r"1 non-finite value\(s\) \(NaN/Inf\), first at index \(5, 3\)"
    ):
        cls.quantize(w, check_finite=True)


def test_non_finite_input_inside_jit_poisons_its_block():
    w = weight(128, 4)
    w[70, 1] = np.nan
    dense = jax.jit(lambda w: ArrayNF4.quantize(w).materialize())(w)
    assert np.all(
        np.isnan(np.asarray(dense)[64:, 1])
    )  # the whole block is NaN, not silently finite
    assert np.all(np.isfinite(np.asarray(dense)[:64])) and np.all(
        np.isfinite(np.asarray(dense)[:, [0, 2, 3]])
    )


# ----------------------------------------------------------------------------- matmuls


QUANTIZERS = {
    "int8": lambda w: ArrayInt8.quantize(w),
    "int8_block": lambda w: ArrayInt8.quantize(w, block_size=64),
    "int8_axis1": lambda w: ArrayInt8.quantize(w, axis=1, block_size=8),
    "int4": lambda w: ArrayInt4.quantize(w, block_size=32),
    "nf4": lambda w: ArrayNF4.quantize(w),
    "nf4_dq": lambda w: ArrayNF4.quantize(w, double_quant=True),
}


# Per-channel int8 and plain NF4 run the same contraction code as these; they are covered by
# the transform, kernel-call and bfloat16 tests below.
@pytest.mark.parametrize("name", ["int8_block", "int8_axis1", "int4", "nf4_dq"])
def test_contractions_under_implicit_match_materialized(name, no_materialize):
    rng = np.random.default_rng(4)
    q = QUANTIZERS[name](weight(128, 48, seed=5))
    w = np.asarray(q.materialize(), np.float64)
    x = rng.standard_normal((2, 3, 128)).astype(np.float32)
    y = rng.standard_normal((48, 5)).astype(np.float32)
    h = rng.standard_normal((4, 48)).astype(np.float32)
    cases = {
        "x @ q": (lambda x, y, h, q: x @ q, x @ w),
        "q @ y": (lambda x, y, h, q: q @ y, w @ y),
        "h @ q.T": (lambda x, y, h, q: h @ q.T, h @ w.T),
        "q.T @ x.T": (lambda x, y, h, q: q.T @ x[0].T, w.T @ x[0].T),
        "einsum kn,bsk->bns": (
            lambda x, y, h, q: jnp.einsum("kn,bsk->bns", q, x),
            np.einsum("kn,bsk->bns", w, x),
        ),
        "einsum mn,kn->km": (
            lambda x, y, h, q: jnp.einsum("mn,kn->km", h, q),
            np.einsum("mn,kn->km", h, w),
        ),
        "x[0, 0] @ q (vector)": (lambda x, y, h, q: x[0, 0] @ q, x[0, 0] @ w),
    }
    # One jitted program for all the cases keeps the test to a single compilation.
    got = jax.jit(implicit(lambda *args: {label: f(*args) for label, (f, _) in cases.items()}))(
        x, y, h, q
    )
    for label, (_, expected) in cases.items():
        np.testing.assert_allclose(got[label], expected, rtol=2e-5, atol=2e-4, err_msg=label)
    # Eagerly (no jit) the handler runs too.
    np.testing.assert_allclose(implicit(lambda x, q: x @ q)(x, q), x @ w, rtol=2e-5, atol=2e-4)


def test_handler_runs_the_registered_kernel(no_materialize):
    calls = []
    reference = kernels.registered_kernels("quantized_matmul")["cpu"]

    def recording(x2d, qvalue, scale, **kwargs):
        calls.append((x2d.shape, qvalue.shape, scale.shape, kwargs["fmt"], kwargs["block_size"]))
        return reference(x2d, qvalue, scale, **kwargs)

    kernels.register_kernel("quantized_matmul", "cpu", recording)
    try:
        q = ArrayNF4.quantize(weight(256, 16))
        implicit(lambda x, q: x @ q)(np.ones((2, 5, 256), np.float32), q)
    finally:
        kernels.register_kernel("quantized_matmul", "cpu", reference)
    assert calls == [((10, 256), (128, 16), (4, 16), "nf4", 64)]


def test_batch_dimension_contraction_falls_back_to_dense():
    q = ArrayInt8.quantize(weight(32, 6))
    z = np.random.default_rng(6).standard_normal((3, 32, 6)).astype(np.float32)
    # dot_general with the weight's N axis as a batch dimension: computed on the dense weight.
    got = implicit(lambda q, z: jnp.einsum("kn,mkn->nm", q, z))(q, z)
    np.testing.assert_allclose(
        got, np.einsum("kn,mkn->nm", np.asarray(q.materialize()), z), rtol=1e-5, atol=1e-5
    )


def test_matmul_operators_without_implicit():
    q = ArrayInt4.quantize(weight(64, 12))
    w = np.asarray(q.materialize(), np.float64)
    x = np.random.default_rng(7).standard_normal((3, 64)).astype(np.float32)
    np.testing.assert_allclose(x @ q, x @ w, rtol=1e-5, atol=1e-5)  # NumPy lhs defers to q
    np.testing.assert_allclose(jnp.asarray(x) @ q, x @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(q @ x.T[:12], w @ x.T[:12], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(q.T @ x[0], w.T @ x[0], rtol=1e-5, atol=1e-5)


def test_bfloat16_activations_keep_their_dtype(no_materialize):
    q = ArrayNF4.quantize(weight(128, 16).astype(jnp.bfloat16))
    x = jnp.asarray(np.random.default_rng(8).standard_normal((4, 128)), jnp.bfloat16)
    y = implicit(lambda x, q: x @ q)(x, q)
    assert y.dtype == jnp.bfloat16
    expected = np.asarray(x, np.float64) @ np.asarray(q.materialize(), np.float64)
    np.testing.assert_allclose(np.asarray(y, np.float64), expected, rtol=2e-2, atol=5e-2)


# ----------------------------------------------------------------------------- transforms


@pytest.mark.parametrize("name", ["int8", "int4", "nf4_dq"])
def test_jit_grad_vmap_match_materialized(name, no_materialize):
    rng = np.random.default_rng(9)
    q = QUANTIZERS[name](weight(128, 16, seed=10))
    w = jnp.asarray(q.materialize())
    x = jnp.asarray(rng.standard_normal((4, 128)), jnp.float32)

    def loss(x, q):
        return jnp.sum(jnp.tanh(x @ q) ** 2)

    def dense_loss(x):
        return jnp.sum(jnp.tanh(jnp.dot(x, w, precision="highest")) ** 2)

    value, gx = jax.jit(jax.value_and_grad(implicit(loss)))(x, q)
    dense_value, dense_gx = jax.jit(jax.value_and_grad(dense_loss))(x)
    np.testing.assert_allclose(value, dense_value, rtol=1e-5)
    np.testing.assert_allclose(gx, dense_gx, rtol=1e-4, atol=1e-5)

    xs = jnp.asarray(rng.standard_normal((3, 4, 128)), jnp.float32)
    batched = jax.jit(jax.vmap(implicit(lambda x, q: x @ q), in_axes=(0, None)))(xs, q)
    np.testing.assert_allclose(
        batched, jnp.einsum("bmk,kn->bmn", xs, w, precision="highest"), rtol=1e-5, atol=1e-4
    )
    # Gradients with respect to the stored float scales (e.g. learned scales) flow too,
    # and match autodiff of the materialized weight.
    gq = jax.jit(jax.grad(implicit(loss), argnums=1, allow_int=True))(x, q)
    eq = jax.jit(
        jax.grad(
            lambda x, q: jnp.sum(jnp.tanh(jnp.dot(x, q.materialize(), precision="highest")) ** 2),
            argnums=1,
            allow_int=True,
        )
    )(x, q)
    assert type(gq) is type(q)
    float_leaves = [
        (a, b)
        for a, b in zip(jax.tree_util.tree_leaves(gq), jax.tree_util.tree_leaves(eq))
        if a.dtype == jnp.float32
    ]
    assert float_leaves
    for got, expected in float_leaves:
        # A scale's gradient sums K products that can cancel: float32 summation order
        # (kernel versus XLA's dot) moves it by ~1e-6 of the largest entry.
        np.testing.assert_allclose(
            got, expected, rtol=1e-3, atol=1e-5 * float(np.abs(expected).max())
        )
        assert np.any(np.asarray(got) != 0)


def _scale_tangent(q, seed):
    """A tangent for ``q``: random for its float leaves (the scales), float0 for the codes."""
    rng = np.random.default_rng(seed)

    def leaf(x):
        if jnp.issubdtype(x.dtype, jnp.floating):
            return jnp.asarray(rng.standard_normal(x.shape), x.dtype)
        return np.zeros(x.shape, jax.dtypes.float0)

    return jax.tree_util.tree_map(leaf, q)


@pytest.mark.parametrize("name", ["int8", "int8_axis1", "int4", "nf4_dq"])
def test_forward_mode_and_second_order_match_materialized(name, no_materialize):
    rng = np.random.default_rng(12)
    q = QUANTIZERS[name](weight(128, 16, seed=13))
    w = jnp.asarray(q.materialize())
    # Small activations keep tanh off saturation, where float32's 1 - tanh^2 has few
    # correct digits and any two summation orders disagree.
    x = jnp.asarray(0.1 * rng.standard_normal((2, 128)), jnp.float32)
    v = jnp.asarray(rng.standard_normal((2, 128)), jnp.float32)
    y = jnp.asarray(rng.standard_normal((16, 3)), jnp.float32)

    def dense(x, w):
        return jnp.tanh(jnp.dot(x, w, precision="highest"))

    def model(x, q):
        return jnp.tanh(x @ q)

    # jvp in the activations, for x @ q and (through the transposed product) q @ y.
    out, tangent = jax.jit(lambda x, v: jax.jvp(lambda x: implicit(model)(x, q), (x,), (v,)))(x, v)
    dense_out, dense_tangent = jax.jvp(lambda x: dense(x, w), (x,), (v,))
    np.testing.assert_allclose(out, dense_out, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tangent, dense_tangent, rtol=1e-4, atol=1e-4)
    _, tangent_t = jax.jvp(lambda y: implicit(lambda q, y: q @ y)(q, y), (y,), (y * 0.5,))
    np.testing.assert_allclose(
        tangent_t, jnp.dot(w, y * 0.5, precision="highest"), rtol=1e-4, atol=1e-4
    )

    # jvp in the stored scales (learned scales), against the materialized weight's jvp.
    tq = _scale_tangent(q, seed=14)
    _, tangent_q = jax.jvp(lambda q: implicit(model)(x, q), (q,), (tq,))
    _, dense_tangent_q = jax.jvp(lambda q: dense(x, q.materialize()), (q,), (tq,))
    np.testing.assert_allclose(tangent_q, dense_tangent_q, rtol=1e-3, atol=1e-4)

    # Forward and reverse Jacobians agree with each other and with the dense one.
    jac_fwd = jax.jit(jax.jacfwd(lambda x: implicit(model)(x, q)))(x)
    jac_rev = jax.jit(jax.jacrev(lambda x: implicit(model)(x, q)))(x)
    jac_dense = jax.jacfwd(lambda x: dense(x, w))(x)
    np.testing.assert_allclose(jac_fwd, jac_dense, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(jac_rev, jac_dense, rtol=1e-4, atol=1e-5)

    # A Hessian-vector product (forward over reverse).
    def loss(x):
        return jnp.sum(implicit(model)(x, q) ** 2)

    hvp = jax.jit(lambda x, v: jax.jvp(jax.grad(loss), (x,), (v,))[1])(x, v)
    dense_hvp = jax.jvp(jax.grad(lambda x: jnp.sum(dense(x, w) ** 2)), (x,), (v,))[1]
    np.testing.assert_allclose(hvp, dense_hvp, rtol=1e-3, atol=1e-4)


def test_vmap_over_stacked_quantized_weights(no_materialize):
    ws = [weight(64, 8, seed=s) for s in range(3)]
    qs = [ArrayNF4.quantize(w, block_size=32) for w in ws]
    stacked = jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *qs)
    x = np.random.default_rng(11).standard_normal((3, 2, 64)).astype(np.float32)
    got = jax.vmap(implicit(lambda x, q: x @ q))(x, stacked)
    expected = np.stack([x[i] @ np.asarray(qs[i].materialize()) for i in range(3)])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)


# ----------------------------------------------------------------------------- memory

_FLOAT_BUFFER = re.compile(r"\b(f16|bf16|f32|f64)\[([0-9,]+)\]")


def largest_float_buffer(hlo_text):
    return max(
        int(np.prod([int(d) for d in dims.split(",")]))
        for _, dims in _FLOAT_BUFFER.findall(hlo_text)
    )


def test_jitted_nf4_matmul_holds_no_dense_weight(no_materialize):
    k, n = 2048, 64
    q = ArrayNF4.quantize(weight(k, n), double_quant=True)
    x = jnp.ones((4, k), jnp.float32)
    fused = jax.jit(implicit(lambda x, q: x @ q)).lower(x, q).compile().as_text()
    dense = jax.jit(lambda x, q: x @ q.materialize()).lower(x, q).compile().as_text()
    assert largest_float_buffer(dense) >= k * n  # the scan finds a materialized weight ...
    assert largest_float_buffer(fused) < k * n  # ... and the kernel's program has none
    # The backward pass (gradient with respect to x) works slab by slab as well.
    backward = (
        jax.jit(jax.grad(implicit(lambda x, q: jnp.sum(x @ q)))).lower(x, q).compile().as_text()
    )
    assert largest_float_buffer(backward) < k * n
    # So does forward mode (a jvp in the activations).
    forward = (
        jax.jit(lambda x, v, q: jax.jvp(lambda x: implicit(lambda x, q: x @ q)(x, q), (x,), (v,)))
        .lower(x, x, q)
        .compile()
        .as_text()
    )
    assert largest_float_buffer(forward) < k * n


# ----------------------------------------------------------------------------- QAT


@pytest.mark.parametrize(
    "fmt, options", [("int8", {}), ("int4", {"block_size": 32}), ("nf4", {"double_quant": True})]
)
def test_fake_quantize_straight_through_training(fmt, options):
    rng = np.random.default_rng(12)
    master = jnp.asarray(rng.standard_normal((64, 8)) * 0.5, jnp.float32)
    x = jnp.asarray(rng.standard_normal((32, 64)), jnp.float32)
    target = x @ jnp.asarray(rng.standard_normal((64, 8)), jnp.float32)
    cls = {"int8": ArrayInt8, "int4": ArrayInt4, "nf4": ArrayNF4}[fmt]

    forward = fake_quantize(master, fmt, **options)
    np.testing.assert_array_equal(forward, cls.quantize(master, **options).materialize())

    def loss(w):
        return jnp.mean((x @ fake_quantize(w, fmt, **options) - target) ** 2)

    loss_and_grad = jax.jit(jax.value_and_grad(loss))
    first_loss, grad = loss_and_grad(master)
    # Straight through: the gradient is the dense one, evaluated at the quantized weight.
    wq = cls.quantize(master, **options).materialize()
    expected = 2 * x.T @ (x @ wq - target) / target.size
    np.testing.assert_allclose(grad, expected, rtol=1e-4, atol=1e-6)

    # A few steps of gradient descent on the master weights reduce the quantized loss.
    for _ in range(5):
        master = master - 0.05 * loss_and_grad(master)[1]
    assert loss_and_grad(master)[0] < 0.8 * first_loss


def test_ste_of_quantized_array_output_passes_the_gradient_straight_through():
    w = weight(64, 8)
    x = np.ones((2, 64), np.float32)
    expected = np.repeat(x.sum(axis=0)[:, None], 8, axis=1)
    # ste of the quantized array itself: the forward pass keeps the quantized weight
    # (tests/qat_test.py covers every format and use), the gradient reaches w.
    quantize = ste(lambda w: ArrayNF4.quantize(w))
    g = jax.grad(implicit(lambda w: jnp.sum(x @ quantize(w))))(w)
    np.testing.assert_allclose(g, expected, rtol=1e-6)
    # ste of the materialized weight gives the same gradient, with a dense forward pass.
    through = ste(lambda w: ArrayNF4.quantize(w).materialize())
    g = jax.grad(lambda w: jnp.sum(x @ through(w)))(w)
    np.testing.assert_allclose(g, expected, rtol=1e-6)


def test_cotangent_of_quantized_array_refuses_to_materialize():
    q = ArrayNF4.quantize(weight(64, 8))
    cotangent = jax.grad(lambda q: jnp.sum(q.materialize()), allow_int=True)(q)
    assert cotangent.qvalue.dtype == jax.dtypes.float0
    with pytest.raises(
        TypeError, match=r"cannot materialize a cotangent of ArrayNF4 .*fake_quantize"
    ):
        cotangent.materialize()


def test_with_axis_rejects_bad_axis():
    q = ArrayInt4.quantize(weight(64, 8))
    assert q.with_axis(-1).axis == 1 and q.with_axis(0) is not q
    with pytest.raises(ValueError, match="ArrayInt4: axis must be 0 or 1 for a 2-D weight, got 3"):
        q.with_axis(3)


def test_stacked_weights_scan_experts_and_transposes(no_materialize):
    rng = np.random.default_rng(13)
    layers = [ArrayNF4.quantize(weight(64, 64, seed=20 + i), double_quant=True) for i in range(3)]
    stacked = jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *layers)
    assert stacked.shape == (3, 64, 64) and stacked.T.shape == (3, 64, 64)
    dense = np.stack([np.asarray(q.materialize(), np.float64) for q in layers])
    np.testing.assert_allclose(stacked.materialize(), dense, rtol=1e-6)

    # A model that scans over its stacked quantized layers.
    def model(h, stacked):
        return jax.lax.scan(lambda h, q: (jnp.tanh(h @ q), None), h, stacked)[0]

    h = rng.standard_normal((2, 64)).astype(np.float32)
    expected = h.astype(np.float64)
    for w in dense:
        expected = np.tanh(expected @ w)
    np.testing.assert_allclose(jax.jit(implicit(model))(h, stacked), expected, rtol=1e-4, atol=1e-5)

    # Leading dimensions as dot_general batch dimensions (one matrix per expert).
    x = rng.standard_normal((3, 5, 64)).astype(np.float32)
    cases = {
        "emk,ekn->emn": lambda x, q: jnp.einsum("emk,ekn->emn", x, q),
        "ekn,emn->ekm": lambda x, q: jnp.einsum("ekn,emn->ekm", q, x),
        "swapaxes": lambda x, q: jnp.swapaxes(q, 1, 2) @ jnp.swapaxes(x, 1, 2),
    }
    references = {
        "emk,ekn->emn": np.einsum("emk,ekn->emn", x, dense),
        "ekn,emn->ekm": np.einsum("ekn,emn->ekm", dense, x),
        "swapaxes": np.swapaxes(dense, 1, 2) @ np.swapaxes(x, 1, 2),
    }
    got = jax.jit(implicit(lambda x, q: {k: f(x, q) for k, f in cases.items()}))(x, stacked)
    for label, expected in references.items():
        np.testing.assert_allclose(got[label], expected, rtol=1e-5, atol=1e-4, err_msg=label)


def test_transpose_of_stacking_axis_falls_back_to_dense():
    stacked = jax.tree_util.tree_map(
        lambda *leaves: jnp.stack(leaves),
        *[ArrayInt8.quantize(weight(16, 8, seed=s)) for s in range(2)],
    )
    got = implicit(lambda q: jnp.transpose(q, (1, 0, 2)))(stacked)
    np.testing.assert_allclose(got, np.transpose(np.asarray(stacked.materialize()), (1, 0, 2)))

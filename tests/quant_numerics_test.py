"""Numerics of jaxcore.quant at the edges: NaN/Inf, huge values, empty weights, options.

Each test is a regression test of the hardening issue (items 7-10): on the code before the
fix, NaN became a finite value under jit (XLA:CPU's max reduction dropped it), NF4 turned
weights above ~8.5e37 into zeros, empty int4/NF4 weights raised ZeroDivisionError and
``fake_quantize(block_size=[32])`` raised ``unhashable type``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcore import kernels
from jaxcore.quant import ArrayInt4, ArrayInt8, ArrayNF4, fake_quantize

QUANTIZERS = {
    "int8": lambda w, **kw: ArrayInt8.quantize(w, block_size=64, **kw),
    "int4": lambda w, **kw: ArrayInt4.quantize(w, 64, **kw),
    "nf4": lambda w, **kw: ArrayNF4.quantize(w, 64, **kw),
}
F32_MAX = float(np.finfo(np.float32).max)


def _weight(k, n, seed=0):
    return np.random.default_rng(seed).standard_normal((k, n)).astype(np.float32)


def _eager_and_jit(name, w):
    quantize = QUANTIZERS[name]
    eager = np.asarray(quantize(w).materialize())
    jitted = np.asarray(jax.jit(lambda w: quantize(w).materialize())(w))
    return eager, jitted


# Shapes where XLA:CPU's vectorized max reduction dropped the NaN (the wide ones), and narrow.
@pytest.mark.parametrize("shape", [(256, 16), (64, 256), (128, 3)])
@pytest.mark.parametrize("name", sorted(QUANTIZERS))
def test_nan_poisons_its_block_identically_in_eager_and_jit(name, shape):
    w = _weight(*shape)
    rng = np.random.default_rng(1)
    spots = {(int(rng.integers(shape[0])), int(rng.integers(shape[1]))) for _ in range(5)}
    for i, j in spots:
        w[i, j] = np.nan
    eager, jitted = _eager_and_jit(name, w)
    np.testing.assert_array_equal(eager, jitted)  # bit for bit, NaN where NaN
    clean = np.asarray(QUANTIZERS[name](np.nan_to_num(w)).materialize())
    poisoned = np.zeros(shape, bool)
    for i, j in spots:
        poisoned[i // 64 * 64 : (i // 64 + 1) * 64, j] = True
    assert np.isnan(eager[poisoned]).all()
    np.testing.assert_array_equal(eager[~poisoned], clean[~poisoned])


@pytest.mark.parametrize("name", sorted(QUANTIZERS))
def test_infinities_keep_their_sign_and_their_block_is_not_finite(name):
    w = _weight(128, 8)
    w[3, 1], w[70, 2], w[5, 4], w[9, 4] = np.inf, -np.inf, np.inf, -np.inf
    eager, jitted = _eager_and_jit(name, w)
    np.testing.assert_array_equal(eager, jitted)
    assert eager[3, 1] == np.inf and eager[70, 2] == -np.inf
    assert eager[5, 4] == np.inf and eager[9, 4] == -np.inf
    assert not np.isfinite(eager[:64, 1]).any() and not np.isfinite(eager[64:, 2]).any()
    assert np.isfinite(eager[:, [0, 3, 5, 6, 7]]).all()
    assert np.isfinite(eager[64:, 1]).all() and np.isfinite(eager[:64, 2]).all()


def test_nan_survives_double_quantization_in_its_group_only():
    w = _weight(128, 600)
    w[3, 5] = np.nan
    eager = np.asarray(ArrayNF4.quantize(w, double_quant=True).materialize())
    jitted = np.asarray(jax.jit(lambda w: ArrayNF4.quantize(w, double_quant=True).materialize())(w))
    np.testing.assert_array_equal(eager, jitted)
    assert np.isnan(eager[:64, 5]).all()
    # One group of 256 blocks (row-major over the (2, 600) scales) is lost, nothing else.
    assert np.isnan(eager).sum() == 256 * 64


@pytest.mark.parametrize("name", sorted(QUANTIZERS))
def test_nan_weight_gives_nan_matmul_output(name):
    w = _weight(128, 8)
    w[100, 6] = np.nan
    q = QUANTIZERS[name](w)
    x = jnp.ones((2, 128), jnp.float32)
    out = np.asarray(jax.jit(kernels.quantized_matmul)(x, q))
    assert np.isnan(out[:, 6]).all() and np.isfinite(np.delete(out, 6, axis=1)).all()


@pytest.mark.parametrize("fmt", ["int8", "int4", "nf4"])
def test_fake_quantize_keeps_nan_in_eager_and_jit(fmt):
    w = _weight(64, 4)
    w[7, 2] = np.nan
    eager = np.asarray(fake_quantize(jnp.asarray(w), fmt))
    jitted = np.asarray(jax.jit(lambda w: fake_quantize(w, fmt))(jnp.asarray(w)))
    np.testing.assert_array_equal(eager, jitted)
    assert np.isnan(eager[:, 2]).all() and np.isfinite(eager[:, [0, 1, 3]]).all()


@pytest.mark.parametrize("name", sorted(QUANTIZERS))
def test_check_finite_raises_eagerly_and_explains_itself_under_jit(name):
    w = _weight(64, 4)
    w[1, 1] = np.inf
    with pytest.raises(
        ValueError, match=r"non-finite value\(s\) \(NaN/Inf\), first at index \(1, 1\)"
    ):
        QUANTIZERS[name](w, check_finite=True)
    with pytest.raises(ValueError, match="check_finite=True needs the weight's values"):
        jax.jit(lambda w: QUANTIZERS[name](w, check_finite=True).materialize())(w)
    QUANTIZERS[name](_weight(64, 4), check_finite=True)  # finite: fine
    with pytest.raises(ValueError, match="non-finite"):
        fake_quantize(jnp.asarray(w), "int4", check_finite=True)


# ----------------------------------------------------------------------- huge values


@pytest.mark.parametrize("name", sorted(QUANTIZERS))
@pytest.mark.parametrize("peak", [9e37, 1e38, 2e38, F32_MAX])
@pytest.mark.parametrize("k", [64, 128])
def test_huge_weights_quantize_like_scaled_down_ones(name, peak, k):
    """Quantization commutes with scaling by a power of two: huge weights lose nothing.

    K=64 is one block per column: XLA then divided by the broadcast absmax through its
    reciprocal, which is subnormal above ~8.5e37 and flushed to zero.
    """
    w = _weight(k, 8)
    w = w / np.abs(w).max() * np.float32(peak)
    w[:, 0] = np.abs(w[:, 0])  # an all-positive column
    w[:, 1] = np.float32(peak) * np.where(np.arange(k) % 2, 0.5, 1.0)  # NF4 gave all zeros
    small = (w * np.float32(2.0**-100)).astype(np.float32)
    got = np.asarray(QUANTIZERS[name](w).materialize(), np.float64)
    want = np.asarray(QUANTIZERS[name](small).materialize(), np.float64) * 2.0**100
    np.testing.assert_array_equal(got, want)
    assert np.isfinite(got).all() and (np.abs(got).max(axis=0) > 0).all()


@pytest.mark.parametrize("name", sorted(QUANTIZERS))
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_dtype_max_round_trips(name, dtype):
    w = jnp.full((64, 2), jnp.finfo(dtype).max, dtype).at[1::2].multiply(-1)
    got = QUANTIZERS[name](w).materialize()
    assert got.dtype == dtype
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(w, np.float32))


@pytest.mark.parametrize("name", sorted(QUANTIZERS))
def test_float64_beyond_float32_range_is_a_clear_error(name):
    w = _weight(64, 4).astype(np.float64)
    w[2, 3] = 1e300
    with pytest.raises(ValueError, match=r"beyond float32's range .* first at index \(2, 3\)"):
        QUANTIZERS[name](w)
    w[2, 3] = F32_MAX  # the largest float32 still quantizes
    assert np.isfinite(np.asarray(QUANTIZERS[name](w).materialize())).all()


# ----------------------------------------------------------------------- empty weights


@pytest.mark.parametrize("shape", [(0, 4), (64, 0), (0, 0)])
@pytest.mark.parametrize(
    "quantize",
    [
        lambda w: ArrayInt8.quantize(w),
        lambda w: ArrayInt8.quantize(w, axis=1),
        lambda w: ArrayInt4.quantize(w),
        lambda w: ArrayInt4.quantize(w, 2, axis=1),
        lambda w: ArrayNF4.quantize(w),
        lambda w: ArrayNF4.quantize(w, double_quant=True),
    ],
    ids=["int8", "int8-axis1", "int4", "int4-axis1", "nf4", "nf4-double"],
)
def test_empty_in_empty_out(quantize, shape):
    w = np.zeros(shape, np.float32)
    eager = quantize(w).materialize()
    jitted = jax.jit(lambda w: quantize(w).materialize())(w)
    assert eager.shape == jitted.shape == shape and eager.dtype == np.float32


# ----------------------------------------------------------------------- options


@pytest.mark.parametrize("block_size", [[32], (32,)])
def test_fake_quantize_takes_a_block_size_sequence(block_size):
    w = jnp.asarray(_weight(64, 4))
    np.testing.assert_array_equal(
        fake_quantize(w, "int4", block_size=block_size), fake_quantize(w, "int4", block_size=32)
    )


def test_fake_quantize_rejects_a_sequence_of_several_block_sizes():
    with pytest.raises(
        ValueError, match=r"block_size=\[32, 32\]: a sequence must hold exactly one"
    ):
        fake_quantize(jnp.asarray(_weight(64, 4)), "int4", block_size=[32, 32])


def test_fake_quantize_with_an_unhashable_option_gives_the_format_error():
    with pytest.raises(TypeError, match="block_size must be an int"):
        fake_quantize(jnp.asarray(_weight(64, 4)), "int4", block_size={"rows": 32})

"""``scale_dtype``: quantized arrays whose block scales are stored as float16 or bfloat16.

Checked against NumPy: the stored codes times the stored scales (converted exactly) are what
``materialize`` returns, every weight lies within half a code step of its grid point, eager
and jitted quantization agree bit for bit, ``x @ w`` is the dense product of the
materialized weight, and the errors (unsupported dtype, double quantization, float16's
range) name the problem.
"""

import jax
import jax.numpy as jnp
import kernel_test_util
import numpy as np
import pytest

from jaxcore import quant

CLASSES = {
    "int8": (quant.ArrayInt8, {"block_size": 32}, 127),
    "int8-channel": (quant.ArrayInt8, {}, 127),
    "int8-tensor": (quant.ArrayInt8, {"axis": (0, 1)}, 127),
    "int4": (quant.ArrayInt4, {}, 7),
    "nf4": (quant.ArrayNF4, {"block_size": 32}, None),
}


def weight(seed=0, shape=(128, 48)):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape) * 0.03, jnp.float32)


def dense64(q):
    return kernel_test_util.numpy_dense(
        q.fmt, q.qvalue, np.asarray(q.scale.astype(jnp.float32), np.float64), q.block_size
    )


@pytest.mark.parametrize("name", sorted(CLASSES))
@pytest.mark.parametrize("scale_dtype", ["float16", "bfloat16", jnp.float16, np.dtype("bfloat16")])
def test_stored_dtype_and_materialize(name, scale_dtype):
    cls, kw, qmax = CLASSES[name]
    w = weight()
    q = cls.quantize(w, scale_dtype=scale_dtype, **kw)
    assert q.scale.dtype == np.dtype(scale_dtype)
    want = dense64(q)
    np.testing.assert_array_equal(np.asarray(q.materialize(), np.float64), want.astype(np.float32))
    if qmax is not None:  # within half a step of the (rounded) scale
        step = np.repeat(np.asarray(q.scale.astype(jnp.float32), np.float64), q.block_size, 0)
        assert np.all(np.abs(np.asarray(w, np.float64) - want) <= 0.5 * step * (1 + 1e-6))
    jitted = jax.jit(lambda w: cls.quantize(w, scale_dtype=scale_dtype, **kw))(w)
    for a, b in zip(jax.tree_util.tree_leaves(q), jax.tree_util.tree_leaves(jitted)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_error_close_to_float32_scales(name):
    """Rounding the scales adds little to the quantization error (float16: ~5e-4 of a scale)."""
    cls, kw, _ = CLASSES[name]
    w = np.asarray(weight(1), np.float64)
    err32 = np.abs(dense64(cls.quantize(w.astype(np.float32), **kw)) - w).mean()
    err16 = np.abs(dense64(cls.quantize(w.astype(np.float32), scale_dtype="float16", **kw)) - w)
    assert err16.mean() <= 1.01 * err32


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_matmul_is_the_dense_product(name):
    cls, kw, _ = CLASSES[name]
    q = cls.quantize(weight(2), scale_dtype="bfloat16", **kw)
    x = jnp.asarray(np.random.default_rng(3).standard_normal((3, 128)), jnp.float32)
    want = np.asarray(x, np.float64) @ dense64(q)
    for got in (x @ q, jax.jit(lambda x, q: x @ q)(x, q)):
        np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-5, atol=1e-5)


def test_unsupported_scale_dtype_names_the_choices():
    with pytest.raises(
        TypeError,
        match=r"scale_dtype='int8' is not supported; expected one "
        r"of \['float32', 'float16', 'bfloat16'\]",
    ):
        quant.ArrayInt4.quantize(weight(), scale_dtype="int8")
    with pytest.raises(TypeError, match="scale_dtype"):
        quant.ArrayInt8.quantize(weight(), scale_dtype="not a dtype")


def test_double_quant_keeps_float32_group_scales():
    with pytest.raises(ValueError, match="double_quant=True .* scale_dtype='float16'"):
        quant.ArrayNF4.quantize(weight(), double_quant=True, scale_dtype="float16")


@pytest.mark.parametrize(
    "cls,limit", [(quant.ArrayInt8, 65504 * 127), (quant.ArrayInt4, 65504 * 7)]
)
def test_float16_range(cls, limit):
    """Eagerly, a weight whose scale overflows float16 is an error naming the limit; inside
    jit its block comes back non-finite; bfloat16 covers float32's range."""
    w = np.array(weight(4), np.float32)
    w[5, 3] = 1.01 * limit
    with pytest.raises(ValueError, match=r"float16 scales hold at most 65504.*\+-"):
        cls.quantize(jnp.asarray(w), scale_dtype="float16")
    q = jax.jit(lambda w: cls.quantize(w, scale_dtype="float16"))(jnp.asarray(w))
    dense = np.asarray(q.materialize())
    assert not np.isfinite(dense[:, 3][: q.block_size]).any()
    assert np.isfinite(np.delete(dense, 3, axis=1)).all()
    q = cls.quantize(jnp.asarray(w), scale_dtype="bfloat16")
    assert np.isfinite(np.asarray(q.materialize())).all()
    w[5, 3] = 0.98 * limit  # within range: no error
    cls.quantize(jnp.asarray(w), scale_dtype="float16")


def test_checkpoint_round_trip(tmp_path):
    """16-bit scales save and load with their dtype (safetensors), as float32 ones do."""
    pytest.importorskip("safetensors")
    from jaxcore import io

    tree = {
        "int4": quant.ArrayInt4.quantize(weight(5), scale_dtype="float16"),
        "nf4": quant.ArrayNF4.quantize(weight(6), scale_dtype="bfloat16"),
    }
    io.save(tmp_path / "w.safetensors", tree)
    loaded = io.load(tmp_path / "w.safetensors", tree)
    for name in tree:
        assert loaded[name].scale.dtype == tree[name].scale.dtype
        np.testing.assert_array_equal(
            np.asarray(loaded[name].materialize()), np.asarray(tree[name].materialize())
        )

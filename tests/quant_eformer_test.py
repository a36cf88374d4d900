"""eformer's quantization API on jaxcore.quant: tuple axes, eformer's field names,
the ternary `Array1B` format and `nf4xf32_to_f32`, checked against NumPy references."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcore.implicit import implicit
from jaxcore.quant import Array1B, ArrayInt4, ArrayInt8, ArrayNF4, nf4xf32_to_f32

# The NF4 table (QLoRA, appendix E), written out independently of jaxcore.kernels.
_NF4 = np.array(
    [
        -1.0,
        -0.6961928009986877,
        -0.5250730514526367,
        -0.39491748809814453,
        -0.28444138169288635,
        -0.18477343022823334,
        -0.09105003625154495,
        0.0,
        0.07958029955625534,
        0.16093020141124725,
        0.24611230194568634,
        0.33791524171829224,
        0.44070982933044434,
        0.5626170039176941,
        0.7229568362236023,
        1.0,
    ],
    np.float32,
)


def _weight(shape=(64, 24), seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------------------
# quantize(..., axis=tuple)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [(0, 1), (1, 0), (-1, -2), [0, 1]])
def test_int8_axis_tuple_of_both_axes_is_one_scale_per_matrix(axis):
    w = _weight()
    q = ArrayInt8.quantize(w, axis=axis)
    scale = np.abs(w).max() / 127  # the per-tensor reference
    ref = np.clip(np.round(w / scale), -127, 127) * scale
    np.testing.assert_allclose(np.asarray(q.materialize()), ref, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(q.weight), np.round(w / scale).astype(np.int8))
    assert q.shape == w.shape and q.weight is q.qvalue
    x = np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(x @ q), x @ ref, rtol=1e-5, atol=1e-4)  # kernel path
    np.testing.assert_allclose(np.asarray(q.T.materialize()), ref.T, rtol=0, atol=1e-6)
    jitted = jax.jit(lambda v: ArrayInt8.quantize(v, axis=(0, 1)).materialize())(w)
    np.testing.assert_allclose(np.asarray(jitted), ref, rtol=0, atol=1e-6)


@pytest.mark.parametrize("axis, equivalent", [((0,), 0), ((1,), 1), ((-1,), 1)])
def test_one_element_axis_tuples_equal_the_plain_axis(axis, equivalent):
    w = _weight()
    for cls, kwargs in (
        (ArrayInt8, {}),
        (ArrayInt4, {"block_size": 8}),
        (ArrayNF4, {"block_size": 8}),
    ):
        a = cls.quantize(w, axis=axis, **kwargs)
        b = cls.quantize(w, axis=equivalent, **kwargs)
        np.testing.assert_array_equal(np.asarray(a.materialize()), np.asarray(b.materialize()))
        assert a.axis == b.axis


def test_axis_tuple_errors():
    w = _weight()
    with pytest.raises(
        ValueError, match=r"ArrayNF4.quantize: axis=\(0, 1\) reduces over both axes"
    ):
        ArrayNF4.quantize(w, axis=(0, 1))
    with pytest.raises(
        ValueError, match=r"ArrayInt4.quantize: axis=\(0, 1\) reduces over both axes"
    ):
        ArrayInt4.quantize(w, axis=(0, 1))
    with pytest.raises(
        ValueError,
        match=r"axis=\(0, 1\) gives one scale for the whole \(64, 24\) matrix; block_size=8",
    ):
        ArrayInt8.quantize(w, axis=(0, 1), block_size=8)
    with pytest.raises(ValueError, match="axis must be 0 or 1"):
        ArrayInt8.quantize(w, axis=(0, 2))
    with pytest.raises(ValueError, match="axis must be 0 or 1"):
        ArrayInt8.quantize(w, axis=())


# ---------------------------------------------------------------------------
# eformer's names on ArrayNF4 / ArrayInt8
# ---------------------------------------------------------------------------


def test_nf4_packed_and_absmax_aliases():
    w = _weight()
    q = ArrayNF4.quantize(w, block_size=16)
    assert q.packed is q.qvalue
    ref_absmax = np.abs(w.reshape(4, 16, 24)).max(axis=1)
    np.testing.assert_allclose(np.asarray(q.absmax), ref_absmax, rtol=0, atol=0)
    np.testing.assert_array_equal(np.asarray(q.dequantize()), np.asarray(q.materialize()))
    # Decoding the aliases by hand (low nibble = even row) gives the dequantized matrix.
    packed = np.asarray(q.packed)
    codes = np.empty((64, 24), np.int64)
    codes[0::2], codes[1::2] = packed & 0xF, packed >> 4
    manual = _NF4[codes] * np.repeat(np.asarray(q.absmax), 16, axis=0)
    np.testing.assert_allclose(manual, np.asarray(q.materialize()), rtol=0, atol=1e-7)


def test_nf4_absmax_is_the_float_absmax_with_double_quantization():
    w = _weight((512, 8))
    q = ArrayNF4.quantize(w, block_size=16, double_quant=True)
    assert q.scale.dtype == jnp.int8  # the stored codes
    ref = np.abs(w.reshape(32, 16, 8)).max(axis=1)
    np.testing.assert_allclose(np.asarray(q.absmax), ref, rtol=0.02, atol=0.02)
    assert q.absmax.dtype == jnp.float32


# ---------------------------------------------------------------------------
# nf4xf32_to_f32
# ---------------------------------------------------------------------------


def test_nf4xf32_to_f32_gives_the_table_values():
    codes = np.array([[0, 7, 15], [3, 8, 12]])
    np.testing.assert_array_equal(np.asarray(nf4xf32_to_f32(codes)), _NF4[codes])
    np.testing.assert_array_equal(np.asarray(nf4xf32_to_f32(jnp.arange(16.0))), _NF4)
    out = jax.jit(nf4xf32_to_f32)(jnp.arange(16, dtype=jnp.uint8))
    assert out.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(out), _NF4)


# ---------------------------------------------------------------------------
# Array1B
# ---------------------------------------------------------------------------


def _ternary(shape=(12, 5), seed=0):
    return np.random.default_rng(seed).integers(-1, 2, shape).astype(np.int8)


def _pack_reference(t):
    """eformer's documented layout: quarter j of the rows at bit offset 2j, value + 1."""
    k = t.shape[0] // 4
    out = np.zeros((k,) + t.shape[1:], np.uint8)
    for j in range(4):
        out |= (t[j * k : (j + 1) * k] + 1).astype(np.uint8) << (2 * j)
    return out


@pytest.mark.parametrize("shape", [(12, 5), (8,), (4, 3, 2)])
def test_array1b_round_trip_and_layout(shape):
    t = _ternary(shape)
    a = Array1B.quantize(t)
    assert a.shape == t.shape and a.dtype == jnp.int8
    np.testing.assert_array_equal(np.asarray(a.weight), _pack_reference(t))
    np.testing.assert_array_equal(np.asarray(a.materialize()), t)
    np.testing.assert_array_equal(np.asarray(a.dequantize()), t)
    assert a.storage_nbytes == t.size // 4
    f = Array1B.quantize(t.astype(np.float32), dtype=jnp.bfloat16)
    assert f.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(f.materialize(), np.float32), t)


def test_array1b_matmul_through_implicit_and_jit():
    t = _ternary((16, 6))
    w = Array1B.quantize(t, dtype=jnp.float32)
    x = np.random.default_rng(2).standard_normal((3, 16)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # materializing is Array1B's only path: no warning
        out = jax.jit(implicit(lambda x, w: x @ w))(x, w)
    np.testing.assert_allclose(np.asarray(out), x @ t.astype(np.float32), rtol=1e-5, atol=1e-5)
    traced = jax.jit(lambda v: Array1B.quantize(v).materialize())(t.astype(np.float32) * 1.2)
    np.testing.assert_array_equal(np.asarray(traced), t)  # rounded and clipped inside jit


def test_array1b_errors():
    with pytest.raises(
        ValueError, match=r"first axis \(size 6 of shape \(6, 2\)\) must be a multiple of 4"
    ):
        Array1B.quantize(np.zeros((6, 2), np.int8))
    with pytest.raises(
        ValueError, match=r"values must be -1, 0 or \+1 .* 1 entries .* first at index \(1, 0\): 2"
    ):
        Array1B.quantize(np.array([[0], [2], [1], [-1]], np.int8))
    with pytest.raises(ValueError, match="got a scalar"):
        Array1B.quantize(np.int8(1))
    with pytest.raises(ValueError, match=r"packed along axis 0; axis=1"):
        Array1B.quantize(np.zeros((4, 4), np.int8), axis=1)
    with pytest.raises(TypeError, match="integer or float values, got dtype bool"):
        Array1B.quantize(np.zeros((4,), bool))


# ---------------------------------------------------------------------------
# with_mesh_and_axis on one device (the multi-device cases are in quant_sharding_test)
# ---------------------------------------------------------------------------


def test_with_mesh_and_axis_on_a_one_device_mesh_and_errors():
    mesh = jax.make_mesh((1,), ("tp",), axis_types=(jax.sharding.AxisType.Auto,))
    q = ArrayNF4.quantize(_weight(), block_size=16)
    placed = q.with_mesh_and_axis((mesh, ("tp", None)))
    assert type(placed) is ArrayNF4
    np.testing.assert_array_equal(np.asarray(placed.materialize()), np.asarray(q.materialize()))
    assert placed.with_sharding(None) is placed
    with pytest.raises(TypeError, match=r"expects a \(mesh, axis_spec\) pair"):
        q.with_mesh_and_axis(mesh)
    with pytest.raises(TypeError, match="must be a jax.sharding.Mesh"):
        q.with_mesh_and_axis(("tp", None))
    with pytest.raises(ValueError, match=r"spec .* has 3 entries but the weight has 2 axes"):
        q.with_mesh_and_axis((mesh, ("tp", None, None)))
    with pytest.raises(TypeError, match="expects a NamedSharding, a PartitionSpec or None"):
        q.with_sharding("tp")

"""``jaxcore.named.take``: out-of-range indices raise, or follow ``mode=`` as ``jnp.take`` does."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcore.named as hax

B = hax.Axis("b", 4)
H = hax.Axis("h", 3)
IDX_AXIS = hax.Axis("i", 4)
RAW = np.arange(12.0, dtype=np.float32).reshape(4, 3)
IDX = np.array([1, 7, -1, -6], np.int32)  # in range, past the end, from the end, before the start


def _x():
    return hax.named(jnp.asarray(RAW), (B, H))


@pytest.mark.parametrize("index", [4, -5, 100])
def test_concrete_int_out_of_range_raises_naming_the_axis(index):
    with pytest.raises(IndexError, match=r"axis 'b' of size 4"):
        hax.take(_x(), "b", index)


def test_concrete_index_array_out_of_range_raises_instead_of_clamping():
    with pytest.raises(IndexError, match=r"\[7, -6\] is out of bounds for axis 'b' of size 4"):
        hax.take(_x(), "b", hax.named(jnp.asarray(IDX), (IDX_AXIS,)))
    with pytest.raises(IndexError, match="mode="):
        _x().take("b", hax.named(np.asarray(IDX), (IDX_AXIS,)))


def test_in_range_indices_including_negative_ones_select():
    got = hax.take(_x(), "b", hax.named(jnp.array([0, 3, -1, -4]), (IDX_AXIS,)))
    assert got.axes == (IDX_AXIS, H)
    np.testing.assert_array_equal(got.array, RAW[[0, 3, -1, -4]])
    np.testing.assert_array_equal(hax.take(_x(), "b", -2).array, RAW[-2])


@pytest.mark.parametrize("mode", ["clip", "wrap", "fill"])
@pytest.mark.parametrize("traced", [False, True])
def test_modes_match_jnp_take(mode, traced):
    def run(i):
        return hax.take(_x(), "b", hax.named(i, (IDX_AXIS,)), mode=mode).array

    got = jax.jit(run)(jnp.asarray(IDX)) if traced else run(jnp.asarray(IDX))
    expected = jnp.take(jnp.asarray(RAW), jnp.asarray(IDX), axis=0, mode=mode)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))


def test_fill_value_and_integer_defaults():
    x = _x()
    got = hax.take(x, "b", hax.named(jnp.asarray(IDX), (IDX_AXIS,)), mode="fill", fill_value=-1.0)
    np.testing.assert_array_equal(got.array[1], [-1.0, -1.0, -1.0])
    ints = hax.named(jnp.arange(12, dtype=jnp.int32).reshape(4, 3), (B, H))
    got = hax.take(ints, "b", 9, mode="fill")
    assert got.axes == (H,)
    np.testing.assert_array_equal(got.array, np.full(3, np.iinfo(np.int32).min))


def test_traced_default_clamps_as_documented():
    got = jax.jit(lambda i: hax.take(_x(), "b", i).array)(7)
    np.testing.assert_array_equal(got, RAW[3])


def test_unknown_mode_is_named():
    with pytest.raises(ValueError, match="unknown mode 'nearest'"):
        hax.take(_x(), "b", 0, mode="nearest")


def test_take_with_shared_index_axes_orders_like_haliax():
    # per-token labels taken from logits: the array's remaining axes keep the array's order
    V, S, N = hax.make_axes(vocab=5, seq=4, batch=3)
    logits = hax.named(jnp.arange(60.0).reshape(3, 5, 4), (N, V, S))
    labels = np.random.default_rng(0).integers(0, 5, (4, 3))  # (seq, batch)
    out = hax.take(logits, V, hax.named(labels, (S, N)))
    assert out.axes == (N, S)
    want = np.take_along_axis(np.asarray(logits.array), labels.T[:, None, :], axis=1)[:, 0, :]
    np.testing.assert_array_equal(out.array, want)
    # the index's own new axes come first (top-k indices reuse the taken axis's name)
    K = hax.Axis("vocab", 2)
    top = np.argsort(-np.asarray(logits.array), axis=1)[:, :2, :]  # (batch, k, seq)
    got = hax.take(logits, V, hax.named(top, (N, K, S)))
    assert got.axes == (K, N, S)
    ref = np.take_along_axis(np.asarray(logits.array), top, axis=1)
    np.testing.assert_array_equal(got.array, np.moveaxis(ref, 1, 0))
    # no shared axes: the index's axes replace the taken axis in place
    idx = hax.named(jnp.array([0, 4]), hax.Axis("pick", 2))
    assert hax.take(logits, V, idx).axes == (N, hax.Axis("pick", 2), S)

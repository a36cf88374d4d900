"""roll, repeat, tile, unique (+ unique_values/counts/inverse/all), tree_util.resize_axis,
specialized_fns.top_k and util.is_named_array against jax.numpy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcore.named as hax

H, W, C = hax.make_axes(h=3, w=4, c=2)
RAW = np.arange(24, dtype=np.float32).reshape(3, 4, 2) * 1.5 - 7
X = hax.named(jnp.asarray(RAW), (H, W, C))


def test_roll():
    np.testing.assert_array_equal(hax.roll(X, 1, "w").array, np.roll(RAW, 1, axis=1))
    out = hax.roll(X, (2, -1), (C, H))
    np.testing.assert_array_equal(out.array, np.roll(RAW, (2, -1), axis=(2, 0)))
    assert out.axes == X.axes
    with pytest.raises(ValueError, match="2 shifts for 1 axes"):
        hax.roll(X, (1, 2), "w")
    with pytest.raises(ValueError, match="'q'"):
        hax.roll(X, 1, "q")


def test_repeat():
    out = hax.repeat(X, 2, "w")
    assert out.axes == (H, hax.Axis("w", 8), C)
    np.testing.assert_array_equal(out.array, np.repeat(RAW, 2, axis=1))
    reps = hax.named(jnp.array([1, 0, 2]), (H,))
    out = hax.repeat(X, reps, H)
    np.testing.assert_array_equal(out.array, np.repeat(RAW, [1, 0, 2], axis=0))
    assert out.axes[0] == hax.Axis("h", 3)
    jitted = jax.jit(lambda x, r: hax.repeat(x, r, "h", total_repeat_length=5))(X, reps)
    np.testing.assert_array_equal(
        jitted.array, np.asarray(jnp.repeat(RAW, jnp.array([1, 0, 2]), 0, total_repeat_length=5))
    )
    with pytest.raises(ValueError, match="must lie along the repeated axis"):
        hax.repeat(X, hax.named(jnp.ones(4, int), (W,)), "h")
    with pytest.raises(ValueError, match="non-negative"):
        hax.repeat(X, -1, "h")


def test_tile():
    out = hax.tile(X, {"h": 2, C: 3})
    assert out.axes == (hax.Axis("h", 6), W, hax.Axis("c", 6))
    np.testing.assert_array_equal(out.array, np.tile(RAW, (2, 1, 3)))
    # a name the array lacks adds a leading axis of that many copies (Haliax; jnp.tile's rule)
    added = hax.tile(X, {"q": 2, "h": 2, "r": 1})
    assert added.axes == (hax.Axis("q", 2), hax.Axis("r", 1), hax.Axis("h", 6), W, C)
    np.testing.assert_array_equal(added.array, np.tile(RAW, (2, 1, 2, 1, 1)))
    with pytest.raises(ValueError, match="negative"):
        hax.tile(X, {"h": -1})


def test_unique_and_array_api_variants():
    raw = np.array([[3, 1, 3], [2, 1, 1]], dtype=np.int32)
    A, B = hax.make_axes(a=2, b=3)
    x = hax.named(jnp.asarray(raw), (A, B))
    U = hax.Axis("u", 3)
    vals, idx, inv, counts = hax.unique(
        x, U, return_index=True, return_inverse=True, return_counts=True
    )
    ref_v, ref_i, ref_inv, ref_c = np.unique(
        raw, return_index=True, return_inverse=True, return_counts=True
    )
    np.testing.assert_array_equal(vals.array, ref_v)
    np.testing.assert_array_equal(idx.array, ref_i)
    np.testing.assert_array_equal(counts.array, ref_c)
    assert inv.axes == (A, B)
    np.testing.assert_array_equal(inv.array, ref_inv.reshape(raw.shape))
    np.testing.assert_array_equal(vals.array[inv.array], raw)  # rebuilds the input
    assert vals.axes == (U,) and counts.axes == (U,)
    np.testing.assert_array_equal(hax.unique_values(x, U).array, ref_v)
    v, c = hax.unique_counts(x, hax.Axis("u", 5), fill_value=-1)
    np.testing.assert_array_equal(v.array, [1, 2, 3, -1, -1])
    np.testing.assert_array_equal(c.array, [3, 1, 2, 0, 0])
    v, inv2 = hax.unique_inverse(x, U)
    np.testing.assert_array_equal(inv2.array, inv.array)
    assert len(hax.unique_all(x, U)) == 4
    # Unique rows along an axis.
    rows = hax.named(jnp.array([[1, 2], [1, 2], [0, 5]]), (H, C))
    r = hax.unique(rows, hax.Axis("r", 2), axis="h")
    assert r.axes == (hax.Axis("r", 2), C)
    np.testing.assert_array_equal(r.array, np.unique(np.asarray(rows.array), axis=0))
    # the shortcuts take axis= too (Haliax's signatures)
    R = hax.Axis("r", 2)
    np.testing.assert_array_equal(hax.unique_values(rows, R, axis="h").array, r.array)
    rv, rc = hax.unique_counts(rows, R, axis="h")
    np.testing.assert_array_equal(rc.array, [1, 2])
    ri_v, ri = hax.unique_inverse(rows, R, axis="h")
    np.testing.assert_array_equal(ri.array, [1, 1, 0])
    va, ia, ina, ca = hax.unique_all(rows, R, axis="h")
    np.testing.assert_array_equal(ia.array, [2, 0])
    np.testing.assert_array_equal(ca.array, rc.array)
    with pytest.raises(TypeError, match="needs an Axis for Unique"):
        hax.unique(x, "u")
    with pytest.raises(ValueError, match="'a' is already an axis"):
        hax.unique(x, hax.Axis("a", 2))


def test_unique_under_jit():
    x = hax.named(jnp.array([2, 2, 7, 1]), (W,))
    out = jax.jit(lambda a: hax.unique_values(a, hax.Axis("u", 3)))(x)
    np.testing.assert_array_equal(out.array, [1, 2, 7])


def test_resize_axis_shrinks_and_grows_a_whole_tree():
    V, E = hax.make_axes(vocab=4, embed=3)
    emb = hax.named(jnp.arange(12.0).reshape(4, 3), (V, E))
    tree = {
        "emb": emb,
        "head": hax.named(jnp.ones((3, 4)), (E, V)),
        "other": hax.named(jnp.ones(3), (E,)),
        "n": 1,
    }
    small = hax.tree_util.resize_axis(tree, "vocab", 2)
    assert small["emb"].axes == (hax.Axis("vocab", 2), E)
    np.testing.assert_array_equal(small["emb"].array, np.arange(6.0).reshape(2, 3))
    assert small["head"].axes == (E, hax.Axis("vocab", 2))
    assert small["other"] is tree["other"] and small["n"] == 1
    big = hax.tree_util.resize_axis(tree, V, 6)
    np.testing.assert_array_equal(big["emb"].array[:4], emb.array)
    np.testing.assert_allclose(big["emb"].array[4:], np.full((2, 3), 5.5))  # the mean
    rnd = hax.tree_util.resize_axis(tree, "vocab", 6, key=jax.random.key(0))
    new = np.asarray(rnd["emb"].array[4:])
    mean, std = 5.5, float(np.std(np.arange(12.0)))
    assert np.all(np.abs(new - mean) <= 2 * std + 1e-5) and not np.allclose(new, mean)
    with pytest.raises(ValueError, match=">= 0"):
        hax.tree_util.resize_axis(tree, "vocab", -1)
    with pytest.raises(ValueError, match="has size 4"):
        hax.tree_util.resize_axis(tree, hax.Axis("vocab", 9), 2)


def test_specialized_top_k_and_util():
    vals, idx = hax.specialized_fns.top_k(X, "w", 2)
    ref_v, ref_i = jax.lax.top_k(jnp.moveaxis(jnp.asarray(RAW), 1, -1), 2)
    np.testing.assert_array_equal(vals.array, jnp.moveaxis(ref_v, -1, 1))
    np.testing.assert_array_equal(idx.array, jnp.moveaxis(ref_i, -1, 1))
    assert vals.axes == (H, hax.Axis("w", 2), C)
    assert hax.util.is_named_array(X) and not hax.util.is_named_array(RAW)
    assert hax.util.is_jax_or_hax_array_like(RAW) and not hax.util.is_jax_or_hax_array_like(3)
    assert hax.util.ensure_tuple([1, 2]) == (1, 2) and hax.util.ensure_tuple("ab") == ("ab",)
    assert hax.util.ensure_tuple(None) == ()

"""jaxcore.named ops: where/clip, isclose, top_k, searchsorted, pad, trace, polynomials.

Each named op is compared with the positional ``jax.numpy`` op on the same data (with the
second operand stored in a different axis order, so name alignment is exercised), in
eager mode and under ``jit``, ``vmap`` and ``grad``; error paths must name the axis.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _named_test_util import BIG, RNG, SIGNED, UNIT, B, E, assert_named_op

import jaxcore.named as hax
from jaxcore.named import Axis

# ----------------------------------------------------------------------------- misc


def test_where_and_clip():
    c, x, y = SIGNED > 0, SIGNED, BIG
    out = hax.where(hax.named(c, (B, E)), hax.named(x.T, (E, B)), hax.named(y, (B, E)))
    assert_named_op(out, np.where(c, x, y), (B, E))
    out = hax.where(hax.named(c[:, 0], (B,)), hax.named(x, (B, E)), 0.0)
    assert_named_op(out, np.where(c[:, :1], x, 0.0), (B, E))
    K = Axis("k", 12)
    idx = hax.where(hax.named(c, (B, E)), fill_value=-1, new_axis=K)
    ref = np.nonzero(c)
    for got, r in zip(idx, ref):
        assert_named_op(got, np.pad(r, (0, 12 - len(r)), constant_values=-1), (K,))
    with pytest.raises(ValueError, match="needs both x and y"):
        hax.where(hax.named(c, (B, E)), 1.0)
    with pytest.raises(ValueError, match="needs both fill_value and new_axis"):
        hax.where(hax.named(c, (B, E)))
    lo = hax.named(np.full(4, -0.5, np.float32), (E,))
    assert_named_op(hax.clip(hax.named(x, (B, E)), lo, 0.5), np.clip(x, -0.5, 0.5), (B, E))
    assert_named_op(hax.named(x, (B, E)).clip(None, 0.1), np.minimum(x, 0.1), (B, E))
    with pytest.raises(ValueError, match="at least one of a_min and a_max"):
        hax.clip(hax.named(x, (B, E)), None, None)
    with pytest.raises(ValueError, match="'embed' has mismatched sizes 4 and 2"):
        hax.where(hax.named(c, (B, E)), hax.zeros((Axis("embed", 2),)), 0.0)

    def named_fn(x, y):
        return hax.where(
            hax.named(x, ("batch", "embed")) > 0,
            hax.named(x, ("batch", "embed")),
            hax.clip(hax.named(y, ("embed", "batch")), 1.6, 2.5),
        ).array

    pos_fn = lambda x, y: jnp.where(x > 0, x, jnp.clip(y.T, 1.6, 2.5))
    np.testing.assert_allclose(jax.jit(named_fn)(x, y.T), pos_fn(x, y.T))
    np.testing.assert_allclose(
        jax.vmap(named_fn)(np.stack([x, -x]), np.stack([y.T, y.T])),
        jax.vmap(pos_fn)(np.stack([x, -x]), np.stack([y.T, y.T])),
    )
    for a, b in zip(
        jax.grad(lambda x, y: named_fn(x, y).sum(), (0, 1))(x, y.T),
        jax.grad(lambda x, y: pos_fn(x, y).sum(), (0, 1))(x, y.T),
    ):
        np.testing.assert_allclose(a, b)


def test_isclose_family():
    x = SIGNED
    a = hax.named(x, (B, E))
    b = hax.named((x + 1e-7).T, (E, B))
    assert_named_op(hax.isclose(a, b), np.isclose(x, x + 1e-7), (B, E))
    assert bool(hax.allclose(a, b))
    assert not bool(hax.allclose(a, b + 1.0))
    assert bool(hax.allclose(a, hax.named(x.T, (E, B)) + 0.01, atol=0.02))
    nan = hax.named(np.array([np.nan, 1.0], np.float32), "k")
    assert bool(hax.allclose(nan, nan, equal_nan=True)) and not bool(hax.allclose(nan, nan))
    assert bool(hax.array_equal(a, hax.named(x.T, (E, B))))
    assert not bool(hax.array_equal(a, hax.named(x.T + 1, (E, B))))
    assert not bool(hax.array_equal(a, hax.named(x[:, :1], (B, Axis("embed", 1)))))
    assert not bool(hax.array_equal(a, x))
    assert bool(hax.array_equal(jnp.ones(2), jnp.ones(2)))
    row = hax.named(x[0], (E,))
    assert bool(hax.array_equiv(hax.broadcast_axis(row, B), row))
    assert not bool(hax.array_equiv(a, row))
    assert not bool(hax.array_equiv(a, hax.zeros((Axis("embed", 2),))))


def test_top_k():
    x = SIGNED
    a = hax.named(x, (B, E))
    vals, idx = hax.top_k(a, "embed", 2)
    ref_v, ref_i = jax.lax.top_k(x, 2)
    assert_named_op(vals, ref_v, (B, Axis("embed", 2)))
    assert_named_op(idx, ref_i, (B, Axis("embed", 2)))
    K = Axis("k", 2)
    vals, idx = hax.top_k(a, "batch", 2, new_axis=K)
    ref_v, ref_i = jax.lax.top_k(x.T, 2)
    assert_named_op(vals, ref_v.T, (K, E))
    assert_named_op(idx, ref_i.T, (K, E))
    assert hax.top_k(a, "batch", 2, new_axis="best")[0].axes == (Axis("best", 2), E)
    with pytest.raises(ValueError, match="k=5 is out of range for axis 'embed' of size 4"):
        hax.top_k(a, "embed", 5)
    with pytest.raises(ValueError, match="axis Axis\\('k', 2\\) must have size 3"):
        hax.top_k(a, "embed", 3, new_axis=K)
    g = jax.grad(lambda x: hax.top_k(hax.named(x, (B, E)), "embed", 2)[0].array.sum())(x)
    np.testing.assert_allclose(g, jax.grad(lambda x: jax.lax.top_k(x, 2)[0].sum())(x))


def test_nonzero_searchsorted_bincount():
    m = np.array([[0, 1, 0, 2], [3, 0, 0, 0], [0, 0, 4, 0]])
    N = Axis("n", 5)
    rows, cols = hax.nonzero(hax.named(m, (B, E)), size=N, fill_value=0)
    assert_named_op(rows, [0, 0, 1, 2, 0], (N,))
    assert_named_op(cols, [1, 3, 0, 2, 0], (N,))
    with pytest.raises(TypeError, match="size=Axis"):
        hax.nonzero(hax.named(m, (B, E)), size=5)
    sorted_ = hax.named(np.array([1.0, 2.0, 4.0, 8.0], np.float32), (E,))
    v = hax.named(np.array([[0.5, 3.0], [8.0, 9.0]], np.float32), ("p", "q"))
    assert_named_op(
        hax.searchsorted(sorted_, v),
        np.searchsorted([1, 2, 4, 8], [[0.5, 3.0], [8.0, 9.0]]),
        v.axes,
    )
    assert_named_op(
        hax.searchsorted(sorted_, v, side="right"),
        np.searchsorted([1, 2, 4, 8], [[0.5, 3.0], [8.0, 9.0]], side="right"),
        v.axes,
    )
    unsorted = hax.named(np.array([4.0, 1.0, 8.0, 2.0], np.float32), (E,))
    sorter = hax.named(np.argsort([4.0, 1.0, 8.0, 2.0]), (E,))
    assert_named_op(
        hax.searchsorted(unsorted, v, sorter=sorter),
        np.searchsorted(
            [4.0, 1.0, 8.0, 2.0], [[0.5, 3.0], [8.0, 9.0]], sorter=np.argsort([4.0, 1.0, 8.0, 2.0])
        ),
        v.axes,
    )
    np.testing.assert_array_equal(hax.searchsorted(sorted_, jnp.array([3.0])), [2])
    with pytest.raises(ValueError, match="one-dimensional `a`, got axes \\(batch=3, embed=4\\)"):
        hax.searchsorted(hax.zeros((B, E)), v)
    with pytest.raises(ValueError, match="one-dimensional sorter"):
        hax.searchsorted(sorted_, v, sorter=hax.zeros((B, E), dtype=jnp.int32))
    C = Axis("counts", 6)
    xs = np.array([[0, 1, 1, 5], [2, 2, 2, 0], [1, 0, 3, 3]])
    assert_named_op(
        hax.bincount(hax.named(xs, (B, E)), C), np.bincount(xs.ravel(), minlength=6), (C,)
    )
    w = UNIT
    assert_named_op(
        hax.bincount(hax.named(xs, (B, E)), C, weights=hax.named(w.T, (E, B))),
        np.bincount(xs.ravel(), weights=w.ravel(), minlength=6),
        (C,),
        rtol=1e-5,
    )
    assert_named_op(
        hax.bincount(hax.named(xs, (B, E)), C, weights=2.0),
        2 * np.bincount(xs.ravel(), minlength=6),
        (C,),
    )
    with pytest.raises(ValueError, match="minlength=7 exceeds the size 6 of axis 'counts'"):
        hax.bincount(hax.named(xs, (B, E)), C, minlength=7)
    with pytest.raises(TypeError, match="needs an Axis for Counts"):
        hax.bincount(hax.named(xs, (B, E)), 6)
    with pytest.raises(ValueError, match="weights must be a NamedArray or a scalar"):
        hax.bincount(hax.named(xs, (B, E)), C, weights=np.ones(12))
    f = jax.jit(lambda xs: hax.bincount(hax.named(xs, ("batch", "embed")), C).array)
    np.testing.assert_array_equal(f(xs), np.bincount(xs.ravel(), minlength=6))


def test_pad_trace_tril_triu():
    x = SIGNED
    a = hax.named(x, (B, E))
    assert_named_op(
        hax.pad(a, {"embed": (1, 2)}), np.pad(x, ((0, 0), (1, 2))), (B, Axis("embed", 7))
    )
    assert_named_op(
        hax.pad(a, {B: 1}, constant_values=hax.named(jnp.float32(5), ())),
        np.pad(x, ((1, 1), (0, 0)), constant_values=5),
        (Axis("batch", 5), E),
    )
    assert_named_op(
        hax.pad(a, {"embed": (0, 2)}, mode="edge"),
        np.pad(x, ((0, 0), (0, 2)), mode="edge"),
        (B, Axis("embed", 6)),
    )
    with pytest.raises(ValueError, match="widths for axis 'embed' must be non-negative"):
        hax.pad(a, {"embed": (-1, 0)})
    with pytest.raises(ValueError, match="constant_values must be a scalar"):
        hax.pad(a, {"embed": 1}, constant_values=hax.ones((B,)))
    sq = hax.named(RNG.standard_normal((2, 3, 3)).astype(np.float32), ("h", "r", "c"))
    assert_named_op(
        hax.trace(sq, "r", "c"), np.trace(np.asarray(sq.array), axis1=1, axis2=2), (Axis("h", 2),)
    )
    assert_named_op(
        sq.trace("c", "h", offset=0),
        np.trace(np.asarray(sq.array), axis1=2, axis2=0),
        (Axis("r", 3),),
    )
    with pytest.raises(ValueError, match="trace needs two different axes"):
        hax.trace(sq, "r", "r")
    raw = np.asarray(sq.array)
    assert_named_op(hax.tril(sq, "r", "c"), np.tril(raw), sq.axes)
    assert_named_op(hax.triu(sq, "r", "c", k=1), np.triu(raw, 1), sq.axes)
    # As in Haliax the result is laid out (..., axis1, axis2): here (h, c, r)
    h_, r_, c_ = sq.axes
    assert_named_op(hax.tril(sq, "c", "r"), np.tril(raw.transpose(0, 2, 1)), (h_, c_, r_))
    assert_named_op(hax.tril(sq, "h", "c", k=-1), np.tril(raw.transpose(1, 0, 2), -1), (r_, h_, c_))
    assert_named_op(hax.triu(sq, "h", "r"), np.triu(raw.transpose(2, 0, 1)), (c_, h_, r_))
    with pytest.raises(ValueError, match="tril needs two different axes"):
        hax.tril(sq, "r", "r")
    f = lambda x: (
        (
            hax.tril(hax.named(x, ("h", "r", "c")), "r", "c")
            + hax.trace(hax.named(x, ("h", "r", "c")), "r", "c")
        ).array
    )
    g = lambda x: jnp.tril(x) + jnp.trace(x, axis1=1, axis2=2)[:, None, None]
    np.testing.assert_allclose(jax.jit(f)(raw), g(raw), rtol=1e-6)
    np.testing.assert_allclose(
        jax.grad(lambda x: f(x).sum())(raw), jax.grad(lambda x: g(x).sum())(raw)
    )


def test_packbits_unpackbits():
    bits = RNG.integers(0, 2, (3, 10)).astype(np.uint8)
    a = hax.named(bits, ("batch", "bits"))
    packed = hax.packbits(a, "bits")
    assert_named_op(packed, np.packbits(bits, axis=1), (B, Axis("bits", 2)))
    assert_named_op(
        hax.packbits(a, "bits", bitorder="little"),
        np.packbits(bits, axis=1, bitorder="little"),
        (B, Axis("bits", 2)),
    )
    assert_named_op(
        hax.unpackbits(packed, "bits"),
        np.unpackbits(np.packbits(bits, axis=1), axis=1),
        (B, Axis("bits", 16)),
    )
    assert_named_op(hax.unpackbits(packed, "bits", count=10), bits, (B, Axis("bits", 10)))
    with pytest.raises(ValueError, match="Axis 'nope' not found"):
        hax.packbits(a, "nope")


def test_polynomials():
    p = hax.named(np.array([1.0, -3.0, 2.0], np.float32), "coef")
    q = np.array([1.0, 1.0], np.float32)
    assert_named_op(hax.polyadd(p, q), np.polyadd([1, -3, 2], q), (Axis("coef", 3),))
    assert_named_op(hax.polysub(q, p), np.polysub(q, [1, -3, 2]), (Axis("coef", 3),))
    assert_named_op(hax.polymul(p, q), np.polymul([1, -3, 2], q), (Axis("coef", 4),))
    quo, rem = hax.polydiv(p, q)
    rq, rr = np.polydiv([1.0, -3.0, 2.0], q)
    assert_named_op(quo, rq, (Axis("coef", len(rq)),), atol=1e-5)
    np.testing.assert_allclose(np.asarray(rem.array)[-len(rr) :], rr, atol=1e-5)
    assert_named_op(hax.polyint(p), np.polyint([1, -3, 2]), (Axis("coef", 4),))
    assert_named_op(
        hax.polyint(p, m=2, k=jnp.array([1.0, 2.0])),
        np.polyint([1, -3, 2], m=2, k=[1.0, 2.0]),
        (Axis("coef", 5),),
    )
    assert_named_op(hax.polyder(p), np.polyder([1, -3, 2]), (Axis("coef", 2),))
    x = hax.named(np.array([[0.0, 1.0], [2.0, 3.0]], np.float32), ("a", "b"))
    assert_named_op(hax.polyval(p, x), np.polyval([1, -3, 2], [[0, 1], [2, 3]]), x.axes)
    np.testing.assert_allclose(hax.polyval(p, 4.0), 6.0)
    assert_named_op(
        hax.poly(np.array([1.0, 2.0], np.float32)), np.poly([1.0, 2.0]), (Axis("degree", 3),)
    )
    r = hax.roots(p)
    assert r.axes == (Axis("coef", 2),)
    np.testing.assert_allclose(np.sort(np.asarray(r.array).real), [1.0, 2.0], rtol=1e-5)
    assert_named_op(
        hax.trim_zeros(np.array([0.0, 1.0, 2.0, 0.0])), [1.0, 2.0], (Axis("degree", 2),)
    )
    xs = hax.named(np.linspace(0, 1, 6).astype(np.float32), "t")
    ys = hax.named((2 * np.linspace(0, 1, 6) ** 2 + 1).astype(np.float32), "t")
    assert_named_op(hax.polyfit(xs, ys, 2), [2.0, 0.0, 1.0], (Axis("t", 3),), atol=1e-4)
    coef, cov = hax.polyfit(
        xs, ys + hax.named(np.array([0, 0.01, -0.01, 0.02, 0, -0.02], np.float32), "t"), 1, cov=True
    )
    assert cov.axes == (Axis("t", 2), Axis("t_cov", 2))
    full = hax.polyfit(xs, ys, 2, full=True)
    assert full[0].axes == (Axis("t", 3),) and len(full) == 5
    V = hax.vander(xs, "pow")
    assert_named_op(V, np.vander(np.linspace(0, 1, 6)), (Axis("t", 6), Axis("pow", 6)), atol=1e-6)
    assert_named_op(
        hax.vander(xs, Axis("pow", 3)),
        np.vander(np.linspace(0, 1, 6), 3),
        (Axis("t", 6), Axis("pow", 3)),
    )
    with pytest.raises(ValueError, match="vander needs a one-dimensional array"):
        hax.vander(hax.zeros((B, E)), "pow")
    with pytest.raises(ValueError, match="degree axis must differ from the row axis 't'"):
        hax.vander(xs, "t")
    with pytest.raises(ValueError, match="coefficients must be one-dimensional"):
        hax.polyadd(hax.zeros((B, E)), q)
    f = jax.jit(lambda c, x: hax.polyval(hax.named(c, "coef"), hax.named(x, "t")).array)
    np.testing.assert_allclose(f(np.array([1.0, 0.0, -1.0]), np.array([2.0, 3.0])), [3.0, 8.0])


def test_misc_ops_under_jit_vmap_grad():
    K = Axis("k", 2)
    sorted_vals = np.array([0.0, 0.5, 1.0, 1.5], np.float32)

    def named_fn(x):
        a = hax.named(x, ("batch", "embed"))
        padded = hax.pad(a, {"embed": (1, 0)}, constant_values=0.5)
        vals, _ = hax.top_k(padded, "embed", 2, new_axis=K)
        pos = hax.searchsorted(hax.named(sorted_vals, ("embed",)), a)
        close = hax.isclose(a, a * 1.0000001)
        rows, _ = hax.nonzero(a > 0, size=Axis("n", 4), fill_value=0)
        return vals.array * 2 + pos.array.sum() + close.array.sum() + rows.array.sum()

    def pos_fn(x):
        padded = jnp.pad(x, ((0, 0), (1, 0)), constant_values=0.5)
        vals, _ = jax.lax.top_k(padded, 2)
        pos = jnp.searchsorted(sorted_vals, x)
        close = jnp.isclose(x, x * 1.0000001)
        rows, _ = jnp.nonzero(x > 0, size=4, fill_value=0)
        return vals * 2 + pos.sum() + close.sum() + rows.sum()

    x = SIGNED
    np.testing.assert_allclose(jax.jit(named_fn)(x), pos_fn(x), rtol=1e-6)
    xs = np.stack([x, -x, x * 0.5])
    np.testing.assert_allclose(
        jax.jit(jax.vmap(named_fn))(xs), np.stack([pos_fn(r) for r in xs]), rtol=1e-6
    )
    np.testing.assert_allclose(
        jax.jit(jax.grad(lambda x: named_fn(x).sum()))(x),
        jax.grad(lambda x: pos_fn(x).sum())(x),
        rtol=1e-6,
    )
    bits = jax.jit(
        lambda b: (
            hax.unpackbits(
                hax.packbits(hax.named(b, ("batch", "bits")), "bits"), "bits", count=10
            ).array
        )
    )
    raw = RNG.integers(0, 2, (3, 10)).astype(np.uint8)
    np.testing.assert_array_equal(bits(raw), raw)

"""Regression tests for the places where ``jaxcore.named`` follows Haliax's semantics.

Each test pins one behaviour issue 16 found to differ from Haliax: results are compared
with plain ``jax.numpy``/NumPy values, and axis names and order are checked exactly.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jaxcore.named as hax
from jaxcore.named import Axis

H, W, D = hax.make_axes(H=2, W=3, D=4)
_RNG = np.random.default_rng(16)


def _rand(*shape):
    return _RNG.standard_normal(shape).astype(np.float32)


def _assert_named(out, want, axes, rtol=1e-6):
    assert isinstance(out, hax.NamedArray), type(out)
    assert out.axes == tuple(axes), (out.axes, tuple(axes))
    np.testing.assert_allclose(np.asarray(out.array), np.asarray(want), rtol=rtol, atol=1e-6)


# ----------------------------------------------------------------------------- 0-d results


def test_indexing_every_axis_away_gives_a_named_array_without_axes():
    X = Axis("x", 5)
    raw = jnp.arange(5.0) * 3
    x = hax.named(raw, X)
    s = x[{"x": 2}]
    assert isinstance(s, hax.NamedArray) and s.axes == () and s.shape == {}
    assert isinstance(s.scalar(), jax.Array) and s.scalar().shape == ()
    assert s.item() == 6.0 and float(s) == 6.0 and int(s) == 6 and bool(s)
    assert x["x", -1].axes == () and x["x", jnp.int32(1)].item() == 3.0
    a = hax.named(_rand(2, 3), (H, W))
    both = a["H", 1, "W", 2]
    assert both.axes == () and both.item() == pytest.approx(float(a.array[1, 2]))
    assert a.at[{"H": 1, "W": 2}].get().axes == ()
    assert hax.take(x, "x", 4).axes == ()
    # the same as a NamedRef read, and as a full reduction
    assert hax.new_ref(x)[{"x": 2}].axes == ()
    assert hax.sum(x).axes == () and x.sum().item() == pytest.approx(30.0)
    # under jit the result is still a NamedArray (a pytree) without axes
    out = jax.jit(lambda v, i: v["x", i])(x, 3)
    assert isinstance(out, hax.NamedArray) and out.axes == () and out.item() == 9.0
    np.testing.assert_allclose(jax.jit(lambda v: v["x", 1].scalar())(x), 3.0)


def test_axisless_named_array_combines_like_haliax():
    x = hax.named(jnp.arange(5.0), "x")
    s = x["x", 2]
    _assert_named(s + 1, 3.0, ())
    _assert_named(s * hax.named(jnp.ones(3), W), 2 * np.ones(3), (W,))
    # with a positional array the result is positional, as in Haliax
    out = s + jnp.arange(3.0)
    assert isinstance(out, jax.Array) and not isinstance(out, hax.NamedArray)
    np.testing.assert_allclose(out, 2.0 + np.arange(3.0))
    out2 = jnp.arange(3.0) - s
    np.testing.assert_allclose(out2, np.arange(3.0) - 2.0)
    # a NamedArray with axes still refuses a non-scalar positional operand
    with pytest.raises(ValueError, match="positional array of shape"):
        x + jnp.arange(5.0)


# ----------------------------------------------------------------------------- broadcasting


def test_broadcasting_needs_one_operand_to_contain_the_other():
    a, b = hax.named(_rand(2, 4), (H, D)), hax.named(_rand(3, 4), (W, D))
    for op in (lambda: a + b, lambda: hax.multiply(a, b), lambda: a < b):
        with pytest.raises(ValueError, match=r"\(H=2, D=4\) and \(W=3, D=4\)"):
            op()
    with pytest.raises(ValueError, match=r"\(W=3, D=4\) and \(H=2, D=4\)"):
        hax.where(a > 0, a, b)
    with pytest.raises(ValueError, match="neither's axes contain the other's"):
        hax.where(hax.named(jnp.ones(3, bool), W), a, 0.0)
    with pytest.raises(ValueError, match="neither's axes contain the other's"):
        hax.clip(a, b, 1.0)
    # broadcasting explicitly first works
    _assert_named(
        a.broadcast_axis(W) + b,
        np.asarray(a.array)[None] + np.asarray(b.array)[:, None],
        (W, H, D),
    )


def test_broadcast_result_takes_the_layout_of_the_operand_with_every_axis():
    d, hd = _rand(4), _rand(2, 4)
    _assert_named(hax.named(d, D) + hax.named(hd, (H, D)), d[None] + hd, (H, D))
    _assert_named(hax.named(hd.T, (D, H)) * hax.named(hd, (H, D)), hd.T * hd.T, (D, H))
    cond = hax.named(d > 0, D)
    _assert_named(hax.where(cond, hax.named(hd, (H, D)), 0.0), np.where(d > 0, hd, 0.0), (H, D))
    _assert_named(
        hax.clip(hax.named(hd, (H, D)), hax.named(d, D), 1.0), np.clip(hd, d, 1.0), (H, D)
    )
    # jitted: same jaxpr shape, same answer
    f = jax.jit(lambda p, q: (hax.named(p, D) - hax.named(q, (H, D))).array)
    np.testing.assert_allclose(f(d, hd), d[None] - hd, rtol=1e-6)


def test_array_equiv_and_array_equal_are_false_for_axes_that_do_not_match():
    assert hax.array_equiv(hax.ones((H, W)), hax.ones((D,))) is False
    assert hax.array_equiv(hax.ones((H, D)), hax.ones((W, D))) is False
    assert bool(hax.array_equiv(hax.ones((H, W)), hax.ones((W,))))
    assert not bool(hax.array_equiv(hax.ones((H, W)), hax.zeros((W,))))
    assert hax.array_equal(hax.ones((H, W)), hax.ones((W,))) is False
    assert bool(hax.array_equal(hax.ones((H, W)), hax.ones((W, H))))


# ----------------------------------------------------------------------------- updated_slice


def _rows_reference(arr, starts, upd):
    rows = [
        lax.dynamic_update_slice(
            arr[i], upd[i] if upd.ndim == arr.ndim else upd, (s,) + (0,) * (arr.ndim - 2)
        )
        for i, s in enumerate(starts)
    ]
    return np.stack(rows)


def test_updated_slice_with_a_per_row_start():
    B, S, U = hax.make_axes(B=3, S=8, U=2)
    arr = _rand(3, 8)
    starts = np.array([0, 3, 6], np.int32)
    upd = _rand(3, 2)
    start = hax.named(jnp.asarray(starts), B)
    out = hax.updated_slice(hax.named(arr, (B, S)), {"S": start}, hax.named(upd, (B, Axis("S", 2))))
    _assert_named(out, _rows_reference(arr, starts, upd), (B, S))
    # an update without the row axis goes to every row at that row's start
    out = hax.updated_slice(hax.named(arr, (B, S)), {S: start}, hax.named(upd[0], Axis("S", 2)))
    _assert_named(out, _rows_reference(arr, starts, upd[0]), (B, S))
    # the method form, under jit, with the row axis not first and a trailing axis
    arr3 = _rand(8, 3, 4)
    upd3 = _rand(2, 3, 4)

    def f(a, s, u):
        x = hax.named(a, (S, B, D))
        return x.updated_slice({"S": hax.named(s, B)}, hax.named(u, ("S", B, D))).array

    got = jax.jit(f)(arr3, starts, upd3)
    want = _rows_reference(arr3.transpose(1, 0, 2), starts, upd3.transpose(1, 0, 2)).transpose(
        1, 0, 2
    )
    np.testing.assert_allclose(got, want, rtol=1e-6)
    with pytest.raises(ValueError, match="start has axis 'W'"):
        hax.updated_slice(
            hax.named(arr, (B, S)),
            {"S": hax.named(jnp.zeros(3, jnp.int32), W)},
            hax.named(upd[0], U),
        )


# ----------------------------------------------------------------------------- axis order


def test_tril_triu_put_the_matrix_axes_last():
    raw = _rand(3, 2, 4)
    x = hax.named(raw, (W, H, D))
    _assert_named(hax.tril(x, W, D), np.tril(raw.transpose(1, 0, 2)), (H, W, D))
    _assert_named(hax.triu(x, "D", "W", k=1), np.triu(raw.transpose(1, 2, 0), 1), (H, D, W))
    _assert_named(hax.tril(x, H, D, k=-1), np.tril(raw, -1), (W, H, D))


def test_advanced_indexing_with_several_index_arrays_orders_axes_like_haliax():
    A, B, C = hax.make_axes(A=5, B=6, C=7)
    raw = _rand(5, 6, 7)
    x = hax.named(raw, (A, B, C))
    I2, J3 = Axis("I", 2), Axis("J", 3)
    i = np.array([4, 1], np.int32)
    j = np.array([0, 6, 2], np.int32)
    ni, nj = hax.named(jnp.asarray(i), I2), hax.named(jnp.asarray(j), J3)
    # contiguous indexed axes: the gathered axes take their place; the smaller index's
    # axes go in front of the larger one's (Haliax's broadcast without require_subset)
    _assert_named(
        x[{"A": ni, "B": hax.named(jnp.asarray(j % 6), J3)}],
        raw[i[:, None], (j % 6)[None, :]],
        (I2, J3, C),
    )
    I3, J2 = Axis("I", 3), Axis("J", 2)
    i3, j2 = np.array([0, 4, 2], np.int32), np.array([5, 1], np.int32)
    got = x[{"A": hax.named(jnp.asarray(i3), I3), "B": hax.named(jnp.asarray(j2), J2)}]
    _assert_named(got, raw[i3[None, :], j2[:, None]], (J2, I3, C))
    # non-contiguous: the gathered axes go first (NumPy's rule)
    _assert_named(x[{"A": ni, "C": nj}], raw[i[:, None], :, j[None, :]], (I2, J3, B))
    # an int counts as an indexed axis
    _assert_named(x[{"A": 0, "C": nj}], raw[0, :, j], (J3, B))
    _assert_named(x[{"B": 0, "C": nj}], raw[:, 0, j], (A, J3))
    # index arrays sharing an axis are matched elementwise
    k = np.array([1, 3], np.int32)
    _assert_named(x[{"A": ni, "C": hax.named(jnp.asarray(k), I2)}], raw[i, :, k], (I2, B))
    # jitted, same answer
    got = jax.jit(lambda v, p, q: v[{"A": p, "C": q}])(x, ni, nj)
    _assert_named(got, raw[i[:, None], :, j[None, :]], (I2, J3, B))


# ----------------------------------------------------------------------------- rearrange


def test_rearrange_with_several_ellipses():
    h, w, d, c = hax.make_axes(h=2, w=3, d=4, c=5)
    raw = _rand(2, 3, 4, 5)
    x = hax.named(raw, (h, w, d, c))
    _assert_named(
        hax.rearrange(x, "h w d c -> d ... c ... h"), raw.transpose(2, 1, 3, 0), (d, w, c, h)
    )
    _assert_named(hax.rearrange(x, "{h} -> ... h ..."), raw, (h, w, d, c))
    # h comes first in the input, so the unnamed axes after it go to the '...' after the group
    _assert_named(
        hax.rearrange(x, "h w d c -> ... (z: c h) ..."),
        raw.transpose(3, 0, 1, 2).reshape(10, 3, 4),
        (Axis("z", 10), w, d),
    )
    _assert_named(hax.rearrange(x, ("c", ..., ...)), raw.transpose(3, 0, 1, 2), (c, h, w, d))
    _assert_named(x.rearrange(("d", ..., "c", ..., "h")), raw.transpose(2, 1, 3, 0), (d, w, c, h))
    _assert_named(hax.rearrange(x, (..., "w", ...)), raw, (h, w, d, c))
    with pytest.raises(ValueError, match="At most one '...' is allowed on the left"):
        hax.rearrange(x, "h ... ... c -> h c ...")


def test_rearrange_group_name_on_an_ordered_lhs_is_a_positional_label():
    Q, Dd = Axis("Q", 6), Axis("d", 4)
    raw = _rand(6, 4)
    x = hax.named(raw, (Q, Dd))
    _assert_named(
        hax.rearrange(x, "(q: h w) d -> h w d", h=2),
        raw.reshape(2, 3, 4),
        (Axis("h", 2), Axis("w", 3), Dd),
    )
    want = raw.reshape(2, 3, 4).transpose(1, 0, 2).reshape(6, 4)
    _assert_named(hax.rearrange(x, "(q: h w) d -> (Z: w h) d", w=3), want, (Axis("Z", 6), Dd))
    # with braces the group name still picks the axis by name
    with pytest.raises(ValueError, match="Axis 'q' is not in the array"):
        hax.rearrange(x, "{(q: h w) d} -> h w d", h=2)


# ----------------------------------------------------------------------------- einsum


def test_einsum_named_without_contraction_keeps_the_shared_axes():
    ar, br = _rand(2, 4), _rand(4)
    a, b = hax.named(ar, (H, D)), hax.named(br, D)
    _assert_named(hax.einsum("{} ->", a, b), ar * br[None], (H, D))
    _assert_named(hax.einsum("{} -> ...", a, b), ar * br[None], (H, D))
    _assert_named(hax.einsum("{H} ->", a, b), np.einsum("hd,d->d", ar, br), (D,))
    _assert_named(hax.einsum("{...} ->", a, b), np.einsum("hd,d->", ar, br), ())


def test_einsum_output_with_several_ellipses():
    raw = _rand(2, 3, 4)
    a = hax.named(raw, (H, W, D))
    _assert_named(hax.einsum("{D} -> ... D ...", a), raw, (H, W, D))
    b = hax.named(raw.transpose(2, 0, 1), (D, H, W))
    _assert_named(hax.einsum("{D} -> ... D ...", b), raw.transpose(2, 0, 1), (D, H, W))
    # Haliax: a '...' on the right keeps every axis, ordered by the right side
    _assert_named(hax.einsum("{D} -> D ...", a), raw.transpose(2, 0, 1), (D, H, W))
    _assert_named(hax.einsum("{D H} -> D ... H", a), raw.transpose(2, 1, 0), (D, W, H))
    br = _rand(4, 3, 2)
    want = np.einsum("hwd,dwh->wdh", raw, br)
    _assert_named(hax.einsum("{D} -> ... H", a, hax.named(br, (D, W, H))), want, (W, D, H))
    got = jax.jit(lambda p: hax.einsum("{D} -> ... D ...", p))(a)
    _assert_named(got, raw, (H, W, D))
    with pytest.raises(ValueError, match="At most one '...'"):
        hax.einsum("h w d -> ... h ...", a)


# ----------------------------------------------------------------------------- NamedRef


def test_named_ref_slice_with_a_dslice():
    L = Axis("layer", 8)
    raw = _rand(8, 4)
    ref = hax.new_ref(hax.named(raw, (L, D)))
    view = ref.slice({"layer": hax.ds(3, 3)})
    assert view.axes == (Axis("layer", 3), D)
    _assert_named(view.value(), raw[3:6], (Axis("layer", 3), D))
    _assert_named(view[{"layer": 1}], raw[4], (D,))
    _assert_named(view.slice({"layer": hax.ds(1, 2)})[{"D": 0}], raw[4:6, 0], (Axis("layer", 2),))
    view[{"layer": 0}] = hax.zeros(D)
    want = raw.copy()
    want[3] = 0
    _assert_named(ref.value(), want, (L, D))
    with pytest.raises(IndexError, match="out of bounds for axis 'layer'"):
        ref.slice({"layer": hax.ds(6, 3)})

    @jax.jit
    def f(x, s):
        r = hax.new_ref(x)
        v = r.slice({"layer": hax.ds(s, 2)})
        got = v.value()
        v[{"layer": 1}] = hax.full(D, -1.0)
        return got, v[{"layer": 1}], hax.freeze(r)

    got, row, frozen = f(hax.named(raw, (L, D)), jnp.int32(5))
    _assert_named(got, raw[5:7], (Axis("layer", 2), D))
    _assert_named(row, -np.ones(4), (D,))
    want = raw.copy()
    want[6] = -1
    _assert_named(frozen, want, (L, D))


# ----------------------------------------------------------------------------- un-named index arrays


def test_unnamed_integer_index_array():
    V = Axis("vocab", 10)
    raw = _rand(10, 4)
    x = hax.named(raw, (V, D))
    idx = np.array([0, 2, 4], np.int32)
    _assert_named(x["vocab", jnp.asarray(idx)], raw[idx], (Axis("vocab", 3), D))
    _assert_named(x[{"vocab": idx}], raw[idx], (Axis("vocab", 3), D))
    _assert_named(x["vocab", [0, 2, 4]], raw[idx], (Axis("vocab", 3), D))
    got = jax.jit(lambda v, i: v["vocab", i])(x, jnp.asarray(idx))
    _assert_named(got, raw[idx], (Axis("vocab", 3), D))
    # 0-d arrays remove the axis
    _assert_named(x["vocab", jnp.int32(7)], raw[7], (D,))
    # Haliax: a 1-d index as long as another kept axis takes that axis's name, so the two
    # are matched elementwise
    four = np.array([9, 0, 3, 5], np.int32)
    _assert_named(x["vocab", jnp.asarray(four)], raw[four, np.arange(4)], (D,))
    with pytest.raises(ValueError, match="Only 0-d or 1-d un-named arrays"):
        x["vocab", jnp.zeros((2, 2), jnp.int32)]
    with pytest.raises(TypeError, match="integer dtype"):
        x["vocab", jnp.zeros(3)]

"""Named ``dot`` and ``einsum`` against ``jnp.einsum`` on the same positional data."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxcore.named as hax
from jaxcore.named import _dot

Bt, S, T, E, Hd = hax.make_axes(batch=2, s=3, t=4, embed=5, hidden=6)
H, W, D = hax.make_axes(H=3, W=4, D=5)

_rng = np.random.default_rng(0)


def _named(*axes, dtype=np.float32):
    raw = _rng.normal(size=tuple(a.size for a in axes)).astype(dtype)
    return raw, hax.NamedArray(jnp.asarray(raw), axes)


def _close(named, want, axes=None, rtol=1e-5):
    if axes is not None:
        assert named.axes == tuple(axes)
    np.testing.assert_allclose(np.asarray(named.array), want, rtol=rtol, atol=1e-5)


# ----------------------------------------------------------------------------- dot


def test_contracted_matmul():
    xr, x = _named(Bt, E)
    wr, w = _named(E, Hd)
    _close(hax.dot(x, w, axis=E), np.einsum("be,eh->bh", xr, wr), (Bt, Hd))
    _close(hax.dot(x, w, axis="embed"), np.einsum("be,eh->bh", xr, wr), (Bt, Hd))
    # both older spellings
    _close(hax.dot("embed", x, w), np.einsum("be,eh->bh", xr, wr), (Bt, Hd))
    _close(x.dot("embed", w), np.einsum("be,eh->bh", xr, wr), (Bt, Hd))
    _close(x.dot(w, axis="embed"), np.einsum("be,eh->bh", xr, wr), (Bt, Hd))


def test_batched_and_transposed_operands():
    ar, a = _named(Bt, S, E)
    br, b = _named(E, T, Bt)
    _close(hax.dot(a, b, axis=E), np.einsum("bse,etb->bst", ar, br), (Bt, S, T))


def test_outer_product_and_full_contraction():
    ar, a = _named(H)
    br, b = _named(W)
    _close(hax.dot(a, b, axis=()), np.einsum("h,w->hw", ar, br), (H, W))
    cr, c = _named(H, W)
    full = hax.dot(a, b, c, axis=None)
    assert full.axes == ()
    _close(full, np.einsum("h,w,hw->", ar, br, cr))


def test_three_operands_and_single_owner_contraction():
    ar, a = _named(H, W)
    br, b = _named(W, D)
    cr, c = _named(D, Bt)
    _close(hax.dot(a, b, c, axis=(W, D)), np.einsum("hw,wd,db->hb", ar, br, cr), (H, Bt))
    # W is shared by a and c, contracted only after the middle operand
    dr, d = _named(W, Bt)
    _close(hax.dot(a, b, d, axis=("W",)), np.einsum("hw,wd,wb->hdb", ar, br, dr), (H, D, Bt))
    # an axis only one operand has is summed away
    _close(hax.dot(a, b, axis=("H", "W")), np.einsum("hw,wd->d", ar, br), (D,))
    _close(hax.dot(a, axis=H), ar.sum(0), (W,))


def test_out_axes_partial_orders():
    ar, a = _named(Bt, S, E)
    br, b = _named(E, T)
    want = np.einsum("bse,et->bst", ar, br)
    _close(hax.dot(a, b, axis=E, out_axes=(T, ...)), want.transpose(2, 0, 1), (T, Bt, S))
    _close(hax.dot(a, b, axis=E, out_axes=(..., "batch")), want.transpose(1, 2, 0), (S, T, Bt))
    _close(hax.dot(a, b, axis=E, out_axes=("t", "s", "batch")), want.transpose(2, 1, 0), (T, S, Bt))
    # several ellipses: an unnamed axis goes to the first slot after the named axes before it
    assert _dot.order_for_partial_spec(
        (..., "c", ..., "a", ...), hax.make_axes(a=1, b=2, c=3, d=4)
    ) == (hax.make_axes(c=3, a=1, b=2, d=4))
    assert _dot.order_for_partial_spec(
        (..., "d", ..., "b", ...), hax.make_axes(a=1, b=2, c=3, d=4)
    ) == (hax.make_axes(a=1, d=4, b=2, c=3))
    assert _dot.order_for_partial_spec(
        (..., "b", ...), hax.make_axes(a=1, b=2, c=3)
    ) == hax.make_axes(a=1, b=2, c=3)


def test_dtypes_precision_and_custom_dot_general():
    xr, x = _named(Bt, E)
    wr = _rng.integers(-3, 3, size=(5, 6)).astype(np.int32)
    w = hax.NamedArray(jnp.asarray(wr), (E, Hd))
    out = hax.dot(x, w, axis=E)
    assert out.dtype == jnp.float32
    _close(out, xr @ wr.astype(np.float32))

    xb = hax.NamedArray(jnp.asarray(xr, dtype=jnp.bfloat16), (Bt, E))
    wb = hax.NamedArray(jnp.asarray(wr, dtype=jnp.bfloat16), (E, Hd))
    wide = hax.dot(xb, wb, axis=E, preferred_element_type=jnp.float32)
    assert wide.dtype == jnp.float32
    _close(wide, np.asarray(xb.array, np.float32) @ np.asarray(wb.array, np.float32), rtol=1e-2)
    hi = hax.dot(x, w, axis=E, precision=jax.lax.Precision.HIGHEST)
    _close(hi, xr @ wr.astype(np.float32))

    calls = []

    def recording_dot_general(lhs, rhs, dims, precision=None, preferred_element_type=None):
        calls.append(dims)
        return jax.lax.dot_general(
            lhs, rhs, dims, precision=precision, preferred_element_type=preferred_element_type
        )

    hax.dot(x, w, axis=E, dot_general=recording_dot_general)
    assert calls == [(((1,), (0,)), ((), ()))]


def test_jit_grad_vmap():
    xr, x = _named(Bt, E)
    wr, w = _named(E, Hd)
    jitted = jax.jit(lambda a, b: hax.dot(a, b, axis=E))(x, w)
    _close(jitted, xr @ wr, (Bt, Hd))

    def loss(b):
        return jnp.sum(hax.dot(x, b, axis=E).array ** 2)

    g = jax.grad(loss)(w)
    assert g.axes == (E, Hd)
    _close(g, jax.grad(lambda b: jnp.sum((jnp.asarray(xr) @ b) ** 2))(jnp.asarray(wr)))

    stacked = np.stack([xr, 2 * xr])
    out = jax.vmap(lambda r: hax.dot(hax.NamedArray(r, (Bt, E)), w, axis=E).array)(
        jnp.asarray(stacked)
    )
    np.testing.assert_allclose(np.asarray(out), stacked @ wr, rtol=1e-5, atol=1e-5)


def test_lowers_to_a_single_dot_general():
    _, x = _named(Bt, E)
    _, w = _named(Hd, E)
    jaxpr = jax.make_jaxpr(lambda a, b: hax.dot(a, b, axis=E).array)(x, w)
    prims = [eqn.primitive.name for eqn in jaxpr.jaxpr.eqns]
    assert prims == ["dot_general"]
    jaxpr = jax.make_jaxpr(lambda a, b: hax.dot(a, b, axis=E, out_axes=(Hd, Bt)).array)(x, w)
    assert [eqn.primitive.name for eqn in jaxpr.jaxpr.eqns] == ["dot_general", "transpose"]


def test_plans_are_cached():
    _, x = _named(Bt, E)
    _, w = _named(E, Hd)
    hax.dot(x, w, axis=E)
    before = len(_dot._DOT_PLANS)
    info = _dot._plan_dot.cache_info()
    for _ in range(3):
        hax.dot(x, w, axis=E)
    assert len(_dot._DOT_PLANS) == before
    assert _dot._plan_dot.cache_info().misses == info.misses
    # unhashable selections still work (planned without the fast cache)
    _close(hax.dot(x, w, axis={"embed": None}), np.asarray(x.array) @ np.asarray(w.array), (Bt, Hd))


@pytest.mark.parametrize(
    "call, exc, message",
    [
        (
            lambda x, w, v: hax.dot(x, v, axis="embed"),
            ValueError,
            "Axis 'embed' has size 5 in operand 0 but size 7",
        ),
        (lambda x, w, v: hax.dot(x, w, axis="nope"), ValueError, "Cannot contract axis 'nope'"),
        (lambda x, w, v: hax.dot(x, w, axis=hax.Axis("embed", 9)), ValueError, "axis= says 9"),
        (lambda x, w, v: hax.dot(x, w), TypeError, "dot() needs axis="),
        (lambda x, w, v: hax.dot(axis=None), TypeError, "at least one NamedArray"),
        (lambda x, w, v: hax.dot(x, np.ones(5), axis="embed"), TypeError, "operand 1 is a ndarray"),
        (lambda x, w, v: hax.dot(x, w, axis=E, out_axes=("zzz", ...)), ValueError, "Axis 'zzz'"),
        (
            lambda x, w, v: hax.dot(x, w, axis=E, out_axes=("batch", "batch", ...)),
            ValueError,
            "occurs twice",
        ),
        (
            lambda x, w, v: hax.dot(x, w, axis=E, out_axes=("batch",)),
            ValueError,
            "Axes ['hidden'] are missing",
        ),
        (
            lambda x, w, v: hax.dot(x, w, axis=E, out_axes=(hax.Axis("batch", 3), ...)),
            ValueError,
            "says 3",
        ),
        (lambda x, w, v: hax.dot(x, w, axis=E, out_axes=(1, ...)), TypeError, "out_axes entries"),
    ],
)
def test_dot_errors(call, exc, message):
    _, x = _named(Bt, E)
    _, w = _named(E, Hd)
    _, v = _named(hax.Axis("embed", 7))
    with pytest.raises(exc, match=re.escape(message)):
        call(x, w, v)


# ----------------------------------------------------------------------------- einsum


def _hwd():
    ar, a = _named(H, W, D)
    br, b = _named(D, W, H)
    return ar, a, br, b


def test_einsum_ordered_named_and_output_only_agree():
    ar, a, br, b = _hwd()
    want = np.einsum("hwd,dwh->hw", ar, br)
    _close(hax.einsum("h w d, d w h -> h w", a, b), want, (H, W))
    _close(hax.einsum("{H W D} -> H W", a, b), want, (H, W))
    _close(hax.einsum("{D} -> ", a, b), want, (H, W))
    _close(hax.einsum("-> H W", a, b), want, (H, W))
    _close(hax.einsum("-> W H", a, b), want.T, (W, H))
    _close(hax.einsum("h w d, d w h -> w h", a, b), want.T, (W, H))


def test_einsum_aliases_and_ellipses():
    ar, a, br, b = _hwd()
    # x, y alias H, W: H is named on the left only -> contracted; D is unmentioned -> kept
    _close(hax.einsum("{x y} -> y", a, b, x=H, y=W), np.einsum("hwd,dwh->dw", ar, br), (D, W))
    _close(hax.einsum("{x y} -> y", a, b, x="H", y="W"), np.einsum("hwd,dwh->dw", ar, br), (D, W))
    # As in Haliax, an output '...' with braces keeps every axis (nothing is contracted)
    _close(hax.einsum("{D} -> ... H", a, b), np.einsum("hwd,dwh->wdh", ar, br), (W, D, H))
    # lhs ellipsis without one on the right: keep exactly the named outputs
    _close(hax.einsum("{... D} -> D", a, b), np.einsum("hwd,dwh->d", ar, br), (D,))
    _close(hax.einsum("-> ...", a, b), np.einsum("hwd,dwh->hwd", ar, br), (H, W, D))
    # ordered inputs with ellipses
    _close(hax.einsum("h ..., ... h -> ...", a, b), np.einsum("hwd,dwh->wd", ar, br), (W, D))
    _close(hax.einsum("h ..., ... h -> h", a, b), np.einsum("hwd,dwh->h", ar, br), (H,))
    _close(hax.einsum("h w d, d w h -> h w", a, b, h=H), np.einsum("hwd,dwh->hw", ar, br), (H, W))


def test_einsum_single_operand_jit_grad_and_lowering():
    ar, a, br, b = _hwd()
    _close(hax.einsum("h w d -> d h", a), ar.sum(1).T, (D, H))
    jitted = jax.jit(lambda p, q: hax.einsum("{D} -> W H", p, q))(a, b)
    _close(jitted, np.einsum("hwd,dwh->wh", ar, br), (W, H))
    g = jax.grad(lambda p: jnp.sum(hax.einsum("-> H", p, b).array))(a)
    _close(
        g,
        jax.grad(lambda p: jnp.sum(jnp.einsum("hwd,dwh->h", p, jnp.asarray(br))))(jnp.asarray(ar)),
        (H, W, D),
    )
    jaxpr = jax.make_jaxpr(lambda p, q: hax.einsum("{H W D} -> H W", p, q).array)(a, b)
    assert "dot_general" in [e.primitive.name for e in jaxpr.jaxpr.eqns]


@pytest.mark.parametrize(
    "equation, aliases, message",
    [
        ("{H} -> H", {"z": W}, "Unused aliases from kwargs: z"),
        ("h w d -> h", {}, "The equation has 1 inputs but 2 arrays"),
        ("h w d, d w h, x -> h", {}, "The equation has 3 inputs but 2 arrays"),
        ("h w d, h w d -> h", {}, "'h' binds both Axis('H', 3) and Axis('D', 5)"),
        ("h w d, e w f -> h", {}, "Axis 'D' is bound to both 'd' and 'e'"),
        ("h w d, d w h -> q", {}, "Output 'q' does not occur in any input"),
        ("h w d, d w h -> h h", {}, "Output 'h' occurs twice"),
        (
            "h w, d w h -> h",
            {},
            "Mismatched number of axes: input 0 names 2 axes but array 0 has 3",
        ),
        (
            "h w d q ..., d w h -> h",
            {},
            "Mismatched number of axes: input 0 names more axes than array 0 has",
        ),
        ("h ... ..., d w h -> h", {}, "Input 0 has more than one '...'"),
        ("(h w) d, d w h -> h", {}, "Parenthesized groups are not supported"),
        (
            "h w d, d w h -> (x: h w)",
            {},
            "Parenthesized groups are not supported in einsum outputs",
        ),
        ("{H} -> (x: H W)", {}, "Parenthesized groups are not supported in einsum outputs"),
        ("{(x: H W)} -> H", {}, "Parenthesized groups are not supported in einsum inputs"),
        ("{Q} -> H", {}, "Axis Q not present in any operand"),
        ("{H} -> Q", {}, "Output axis Q not present in any operand"),
        ("{H} -> W W", {}, "Output axis 'W' occurs twice"),
        ("h w d, d w h -> ... w ...", {}, "At most one '...' is allowed in this einsum output"),
        ("{x} -> W", {"x": hax.Axis("H", 4)}, "has size 4, but the operands' axis 'H' has size 3"),
        ("{x} -> W", {"x": "Q"}, "names no axis of the operands"),
        (
            "h w d, d w h -> h",
            {"h": W},
            "'h' is aliased to Axis('W', 4) but binds axis Axis('H', 3)",
        ),
        ("{H}, d w h -> h", {}, "cannot be mixed with other inputs"),
        ("h w d -> {h}", {}, "The output of einsum must be ordered"),
    ],
)
def test_einsum_errors(equation, aliases, message):
    _, a, _, b = _hwd()
    with pytest.raises(ValueError, match=re.escape(message)):
        hax.einsum(equation, a, b, **aliases)


def test_einsum_type_errors():
    _, a, _, _ = _hwd()
    with pytest.raises(TypeError, match="at least one NamedArray"):
        hax.einsum("-> H")
    with pytest.raises(TypeError, match="operand 1 is a ndarray"):
        hax.einsum("-> H", a, np.ones(3))
    with pytest.raises(TypeError, match="alias x=3 must be an Axis or an axis name"):
        hax.einsum("{x} -> H", a, x=3)


# ----------------------------------------------------------------------------- properties

_POOL = hax.make_axes(a=2, b=3, c=1, d=4, e=2)


@st.composite
def _contraction(draw):
    n_ops = draw(st.integers(1, 3))
    operands = []
    for _ in range(n_ops):
        chosen = draw(st.lists(st.sampled_from(_POOL), unique=True, max_size=4))
        operands.append(tuple(chosen))
    union = sorted({ax.name for axes in operands for ax in axes})
    contracted = draw(st.lists(st.sampled_from(union), unique=True)) if union else []
    return operands, contracted


@settings(max_examples=20, deadline=None)
@given(_contraction(), st.data())
def test_dot_matches_einsum_on_random_contractions(case, data):
    operands, contracted = case
    rng = np.random.default_rng(len(operands))
    raws = [
        rng.integers(-3, 4, size=tuple(a.size for a in axes)).astype(np.int32) for axes in operands
    ]
    arrays = [hax.NamedArray(jnp.asarray(r), axes) for r, axes in zip(raws, operands)]
    out = hax.dot(*arrays, axis=tuple(contracted))
    letters = {ax.name: ax.name for ax in _POOL}
    kept = []
    for axes in operands:
        for ax in axes:
            if ax.name not in contracted and ax.name not in kept:
                kept.append(ax.name)
    spec = (
        ",".join("".join(letters[a.name] for a in axes) for axes in operands) + "->" + "".join(kept)
    )
    want = np.einsum(spec, *raws)
    assert tuple(a.name for a in out.axes) == tuple(kept)
    np.testing.assert_array_equal(np.asarray(out.array), want)
    # the same contraction with a shuffled output order
    order = data.draw(st.permutations(kept))
    shuffled = hax.dot(*arrays, axis=tuple(contracted), out_axes=tuple(order))
    np.testing.assert_array_equal(
        np.asarray(shuffled.array), np.einsum(spec[: spec.index(">") + 1] + "".join(order), *raws)
    )


def test_einsum_error_messages_use_haliax_wording():
    # Haliax users match on these phrases; jaxcore keeps them in its messages
    a, b = hax.ones((H, W, D)), hax.ones((D, W, H))
    with pytest.raises(ValueError, match="Axis d not present"):
        hax.einsum("{h w d} -> h w", a, b, h=H, w=W)
    with pytest.raises(ValueError, match="multiple times"):
        hax.einsum("-> H H", a, b)
    with pytest.raises(ValueError, match="Unused aliases from kwargs: Q$"):
        hax.einsum("-> H W", a, b, Q=hax.Axis("Q", 2))
    with pytest.raises(ValueError, match="Axis alias d not used"):
        hax.einsum("{h w} -> h w", a, b, h=H, w=W, d=D)
    with pytest.raises(ValueError, match="does not match number of arrays"):
        hax.einsum("x y z -> x", a, b)
    with pytest.raises(ValueError, match="Mismatched number of axes"):
        hax.einsum("x y z q -> x", a)
    with pytest.raises(ValueError, match="Mismatched number of axes"):
        hax.einsum("x y ... a b -> x", a)
    with pytest.raises(ValueError, match="Size mismatch"):
        hax.einsum("-> h w", a, h=H.resize(4), w=W)
    with pytest.raises(ValueError, match="not found in any of the input arrays"):
        hax.einsum("-> h w", hax.ones((H,)), h=H, w=W)

"""Higher-order functions over named axes (``hax.vmap``/``scan``/``fold``/``map``) and checkpointing,
checked against plain ``jax.vmap`` / ``jax.lax.scan`` on the same data."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcore.named as hax

B, H, L, D = hax.make_axes(B=3, H=4, L=5, D=2)


def _arr(*shape, seed=0):
    return jax.random.normal(jax.random.key(seed), shape)


def _eq(a, b, **tol):
    if tol:
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), **tol)
    else:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ---------------------------------------------------------------------------- vmap


def test_vmap_maps_named_axis_wherever_it_is_and_puts_it_first():
    raw = _arr(4, 3)
    x = hax.named(raw, (H, B))  # B is not leading
    seen = []

    def f(a):
        seen.append(a.axes)
        return a * 2, a.sum("H")

    y, s = hax.vmap(f, B)(x)
    assert seen == [(H,)]
    assert y.axes == (B, H) and s.axes == (B,)
    _eq(y.array, raw.T * 2)
    _eq(s.array, raw.sum(0))
    # a name instead of an Axis: the size comes from the argument
    assert hax.vmap(f, "B")(x)[0].axes == (B, H)


def test_vmap_unnamed_args_default_spec_and_overrides():
    x = hax.named(_arr(3, 4), (B, H))
    plain = jnp.arange(3.0)  # mapped over dim 0 by default
    out = hax.vmap(lambda a, p: a * p, B)(x, plain)
    _eq(out.array, x.array * plain[:, None])
    # args=(None, None): the plain array is broadcast to every call
    plain_h = jnp.arange(4.0)
    out = hax.vmap(lambda a, p: a * hax.named(p, H), B, args=(None, None))(x, plain_h)
    _eq(out.array, x.array * plain_h[None, :])
    # default=None: no unnamed array is mapped
    out = hax.vmap(lambda a, p: a * hax.named(p, H), B, default=None)(x, plain_h)
    _eq(out.array, x.array * plain_h[None, :])
    # kwargs spec by parameter name; also the spec applies when the arg is passed by keyword
    out = hax.vmap(lambda a, p: a * hax.named(p, H), B, kwargs={"p": None})(x, p=plain_h)
    _eq(out.array, x.array * plain_h[None, :])
    # a spec that is a tree prefix: dict of two arrays, one mapped over dim 1
    tree = {"m": jnp.ones((4, 3)), "s": jnp.float32(2.0)}
    out = hax.vmap(
        lambda a, t: a * t["s"] + hax.named(t["m"], H), B, args=(0, {"m": 1, "s": None})
    )(x, tree)
    _eq(out.array, x.array * 2 + 1)
    # named arrays without the axis are passed whole; static (non-array) args pass through
    w = hax.named(_arr(4, seed=2), H)
    out = hax.vmap(lambda a, w, scale: (a * w * scale).sum(H), B)(x, w, 3)
    _eq(out.array, (x.array * w.array * 3).sum(1), rtol=1e-6)


def test_vmap_unmapped_outputs_and_static_outputs():
    x = hax.named(_arr(3, 4), (B, H))
    out = hax.vmap(lambda a: {"n": a.sum(), "raw": a.array, "tag": "ok", "none": None}, B)(x)
    assert out["n"].axes == (B,)
    _eq(out["raw"], x.array)
    assert out["tag"] == "ok" and out["none"] is None


def test_vmap_with_sized_axis_and_no_mapped_input_builds_per_layer_values():
    keys = jax.random.split(jax.random.key(0), L.size)
    w = hax.vmap(lambda k: hax.random.normal(k, (H,)), L)(keys)
    assert w.axes == (L, H)
    _eq(w.array, jax.vmap(lambda k: jax.random.normal(k, (4,)))(keys))
    c = hax.vmap(lambda: hax.ones(H), L)()
    assert c.axes == (L, H)


def test_vmap_several_axes_first_is_outermost():
    raw = _arr(3, 4, 2)
    x = hax.named(raw, (B, H, D))
    out = hax.vmap(lambda a: a.sum(), (D, B))(x)
    assert out.axes == (D, B)
    _eq(out.array, raw.sum(1).T, rtol=1e-6)
    assert hax.vmap(lambda a: a, ())(x) is x


def test_vmap_under_jit_and_grad_matches_jax():
    raw = _arr(3, 4)

    def named_loss(r):
        return hax.vmap(lambda a: (a * a).sum("H"), B)(hax.named(r, (B, H))).sum().scalar()

    def plain_loss(r):
        return jax.vmap(lambda a: (a * a).sum())(r).sum()

    _eq(jax.jit(jax.grad(named_loss))(raw), jax.grad(plain_loss)(raw), rtol=1e-6)


def test_vmap_errors_name_the_axis():
    x = hax.named(_arr(3, 4), (B, H))
    with pytest.raises(ValueError, match="vmap over Axis\\('B', 7\\).*axis 'B' of size 3"):
        hax.vmap(lambda a: a, hax.Axis("B", 7))(x)
    with pytest.raises(ValueError, match="vmap over 'Q': no argument has this axis"):
        hax.vmap(lambda a: a, "Q")(x)
    with pytest.raises(TypeError, match="Axis or an axis name"):
        hax.vmap(lambda a: a, 3)
    with pytest.raises(TypeError, match="do not fit the function's signature"):
        hax.vmap(lambda a: a, B, args=(0, 0, 0))


# ---------------------------------------------------------------------------- scan


def test_scan_matches_lax_scan_with_the_axis_anywhere():
    raw = _arr(4, 5)  # (H, L): the scanned axis is not leading
    xs = hax.named(raw, (H, L))

    def step(c, x):
        c = c * 0.5 + x
        return c, c.sum()

    carry, ys = hax.scan(step, L)(hax.zeros(H), xs)

    def ref_step(c, x):
        c = c * 0.5 + x
        return c, c.sum()

    rc, rys = jax.lax.scan(ref_step, jnp.zeros(4), raw.T)
    assert carry.axes == (H,) and ys.axes == (L,)
    _eq(carry.array, rc, rtol=1e-6)
    _eq(ys.array, rys, rtol=1e-6)
    # named outputs with axes get the scan axis in front
    _, ys = hax.scan(lambda c, x: (c, x * 2), "L")(0.0, xs)
    assert ys.axes == (L, H)
    _eq(ys.array, raw.T * 2)


def test_scan_reverse_unnamed_static_and_unscanned_args():
    raw = _arr(5, 4)
    xs = hax.named(raw, (L, H))
    bias = hax.named(_arr(4, seed=3), H)  # no L axis: the same at every step
    plain = jnp.arange(5.0)  # unnamed rank-1: scanned over its leading dim

    def step(c, x, b, p, k):
        c = c + x * b * p * k
        return c, p

    carry, ps = hax.scan(step, L, reverse=True)(hax.zeros(H), xs, bias, plain, 2)

    def ref(c, xp):
        x, p = xp
        c = c + x * bias.array * p * 2
        return c, p

    rc, rp = jax.lax.scan(ref, jnp.zeros(4), (raw, plain), reverse=True)
    _eq(carry.array, rc, rtol=1e-6)
    _eq(ps, rp)
    # kwargs are scanned too
    c2, _ = hax.scan(lambda c, x=None: (c + x, None), L)(hax.zeros(H), x=xs)
    _eq(c2.array, raw.sum(0), rtol=1e-6)
    # is_scanned=False: nothing is scanned, arrays are passed whole
    c3 = hax.fold(lambda c, a: c + a.sum(), hax.Axis("L", 3), is_scanned=False)(0.0, plain)
    _eq(c3, 3 * plain.sum())


def test_fold_and_map():
    raw = _arr(5, 4)
    xs = hax.named(raw, (L, H))
    total = hax.fold(lambda c, x: c + x, L)(hax.zeros(H), xs)
    _eq(total.array, raw.sum(0), rtol=1e-6)
    norms = hax.map(lambda x: (x * x).sum("H"), L)(xs)
    assert norms.axes == (L,)
    _eq(norms.array, (raw * raw).sum(1), rtol=1e-6)


@pytest.mark.parametrize(
    "remat",
    [
        False,
        True,
        "full",
        "recompute",
        "save_all",
        "nested",
        hax.ScanCheckpointPolicy(save_carries=False, nested=2),
        hax.ScanCheckpointPolicy(save_block_internals=["mid"]),
    ],
)
def test_scan_remat_policies_keep_values_and_gradients(remat):
    raw = _arr(4, 3)  # (L=4 layers, H'=3)
    Lk = hax.Axis("L", 4)
    W = hax.Axis("W", 3)
    ws = hax.named(raw, (Lk, W))

    def step(c, w):
        mid = jax.ad_checkpoint.checkpoint_name(jnp.tanh(c.array * w.array), "mid")
        return hax.named(mid, W), None

    def named_loss(ws_raw):
        c = hax.fold(lambda c, w: step(c, w)[0], Lk, remat=remat)(
            hax.ones(W), hax.named(ws_raw, (Lk, W))
        )
        return (c * c).sum().scalar()

    def plain_loss(ws_raw):
        c, _ = jax.lax.scan(lambda c, w: (jnp.tanh(c * w), None), jnp.ones(3), ws_raw)
        return (c * c).sum()

    _eq(jax.jit(named_loss)(raw), plain_loss(raw), rtol=1e-6)
    _eq(jax.jit(jax.grad(named_loss))(raw), jax.grad(plain_loss)(raw), rtol=1e-5)
    del ws


def test_scan_errors():
    xs = hax.named(_arr(5, 4), (L, H))
    with pytest.raises(ValueError, match="axis 'L' of size 5.*expected 7"):
        hax.scan(lambda c, x: (c, None), hax.Axis("L", 7))(0.0, xs)
    with pytest.raises(ValueError, match="scan over 'Q': no argument has this axis"):
        hax.scan(lambda c, x: (c, None), "Q")(0.0, xs)
    with pytest.raises(ValueError, match="argument p has leading dimension 3, expected 5"):
        hax.scan(lambda c, x, p: (c, None), L)(0.0, xs, jnp.ones(3))
    # the error names the parameter and the path inside it (as Haliax's does)
    with pytest.raises(ValueError, match=r"argument y has leading dimension 2"):
        hax.scan(lambda c, x, y=None: (c, None), L)(0.0, xs, y=jnp.ones(2))
    with pytest.raises(ValueError, match=r"argument tree\['w'\]\[1\] has leading dimension 4"):
        hax.scan(lambda c, tree: (c, None), L)(0.0, {"w": [jnp.ones(5), jnp.ones(4)]})
    with pytest.raises(ValueError, match="Invalid checkpoint policy 'sometimes'"):
        hax.scan(lambda c, x: (c, None), L, remat="sometimes")


# ------------------------------------------------------------------ checkpointing


def test_tree_checkpoint_name_tags_every_array():
    tree = {"a": hax.named(jnp.ones(4), H), "b": jnp.ones(2), "s": "static", "n": 3}

    def f(a, b):
        t = hax.jax_utils.tree_checkpoint_name({**tree, "a": a, "b": b}, "blk")
        return t["a"].sum().scalar() + t["b"].sum()

    jaxpr = str(jax.make_jaxpr(f)(tree["a"], tree["b"]))
    assert jaxpr.count("name=blk") == 2
    out = hax.tree_checkpoint_name(tree, "x")
    assert out["a"].axes == (H,) and out["s"] == "static" and out["n"] == 3
    with pytest.raises(TypeError, match="name must be a str"):
        hax.tree_checkpoint_name(tree, 3)


def test_filter_checkpoint_passes_static_values_and_keeps_gradients():
    calls = []

    def block(x, act, scale):
        calls.append(1)
        return {"y": act(x * scale), "axes": x.axes}

    ck = hax.filter_checkpoint(block)
    x = hax.named(_arr(4), H)
    out = ck(x, hax.tanh, 2.0)
    assert out["axes"] == (H,)
    _eq(out["y"].array, jnp.tanh(x.array * 2.0))

    def loss(r, fn):
        return fn(hax.named(r, H), hax.sin, 3.0)["y"].sum().scalar()

    _eq(
        jax.grad(lambda r: loss(r, ck))(x.array),
        jax.grad(lambda r: loss(r, block))(x.array),
        rtol=1e-6,
    )
    # the decorator form with a policy
    pol = hax.filter_checkpoint(policy=jax.checkpoint_policies.nothing_saveable)(block)
    _eq(
        jax.grad(lambda r: loss(r, pol))(x.array),
        jax.grad(lambda r: loss(r, block))(x.array),
        rtol=1e-6,
    )


def test_scan_checkpoint_policy_translation():
    P = hax.ScanCheckpointPolicy
    assert P.from_bool_or_str(True).simple
    assert P.from_bool_or_str(False).disable
    assert P.from_bool_or_str("nested").nested is True
    assert P._mk(P(save_inputs=True)) == P(save_inputs=True)
    assert P()._to_jax_policy("c", "i") is not None  # saves carries
    assert P(save_carries=False)._to_jax_policy("c", "i") is None  # recompute everything
    with pytest.raises(ValueError, match="cannot save all block internals and offload"):
        P(save_carries="offload", save_block_internals=True)._to_jax_policy("c", "i")
    with pytest.raises(ValueError, match="expected True, False or 'offload'"):
        P(save_carries="maybe")._to_jax_policy("c", "i")

"""``hax.nn``: activations, losses, layers and attention against plain ``jax.numpy`` / ``jax.nn``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcore.named as hax

B, S, KS, E, V, H, D = hax.make_axes(B=2, S=5, KS=5, E=8, V=11, H=2, D=4)
KEY = jax.random.key(0)


def _x(axes, seed=1):
    return hax.random.normal(jax.random.key(seed), axes)


def _close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


@pytest.mark.parametrize(
    "name", ["relu", "gelu", "silu", "sigmoid", "softplus", "elu", "selu", "log_sigmoid", "relu6"]
)
def test_elementwise_activations(name):
    x = _x((B, E))
    out = getattr(hax.nn, name)(x)
    assert out.axes == x.axes
    _close(out.array, getattr(jax.nn, name)(x.array))


def test_relu_squared_quick_gelu_glu_one_hot():
    x = _x((B, E))
    _close(hax.nn.relu_squared(x).array, jnp.square(jax.nn.relu(x.array)))
    _close(hax.nn.quick_gelu(x).array, x.array * jax.nn.sigmoid(1.702 * x.array))
    g = hax.nn.glu(x, E)
    assert g.axes == (B, E.resize(4))
    _close(g.array, jax.nn.glu(x.array, axis=1))
    ids = hax.named(jnp.array([1, 3]), B)
    oh = hax.nn.one_hot(ids, V)
    assert oh.axes == (B, V)
    _close(oh.array, jax.nn.one_hot(ids.array, 11))
    with pytest.raises(TypeError, match="class_axis must be an Axis"):
        hax.nn.one_hot(ids, "V")


def test_softmax_family_along_named_axes():
    x = _x((E, B))  # the normalized axis first
    _close(hax.nn.softmax(x, E).array, jax.nn.softmax(x.array, axis=0))
    _close(hax.nn.log_softmax(x, "E").array, jax.nn.log_softmax(x.array, axis=0))
    lse = hax.nn.logsumexp(x, E)
    assert lse.axes == (B,)
    _close(lse.array, jax.nn.logsumexp(x.array, axis=0))
    _close(hax.nn.softmax(x, (E, B)).array, jax.nn.softmax(x.array, axis=(0, 1)))
    _close(hax.nn.standardize(x, E).array, jax.nn.standardize(x.array, axis=0), 1e-4)
    with pytest.raises(
        ValueError, match="softmax: axis 'Q' is not in the array with axes \\(E=8, B=2\\)"
    ):
        hax.nn.softmax(x, "Q")


def test_cross_entropy_losses():
    logits = _x((B, S, V))
    ids = hax.random.randint(jax.random.key(3), (B, S), 0, 11)
    ref = -jnp.take_along_axis(jax.nn.log_softmax(logits.array, -1), ids.array[..., None], -1)[
        ..., 0
    ]
    _close(hax.nn.cross_entropy_loss(logits, V, hax.nn.one_hot(ids, V)).array, ref.mean())
    _close(hax.nn.cross_entropy_loss(logits, V, ids).array, ref.mean())  # integer ids
    per = hax.nn.cross_entropy_loss(logits, V, ids, reduction=None)
    assert per.axes == (B, S)
    _close(per.array, ref)
    _close(
        hax.nn.cross_entropy_loss(logits, V, ids, reduction=hax.sum, reduction_axis=S).array,
        ref.sum(1),
    )
    where = hax.named(jnp.arange(5) < 3, S)
    _close(hax.nn.cross_entropy_loss(logits, V, ids, where=where).array, ref[:, :3].mean())
    with pytest.raises(
        ValueError, match="label axis 'Q' is not in logits with axes \\(B=2, S=5, V=11\\)"
    ):
        hax.nn.cross_entropy_loss(logits, "Q", ids)
    t = hax.random.bernoulli(jax.random.key(4), (B, S), 0.5)
    lg = _x((S, B))  # other layout: matched by name
    bce = -(
        t.array * jax.nn.log_sigmoid(lg.array.T) + (1 - t.array) * jax.nn.log_sigmoid(-lg.array.T)
    )
    _close(hax.nn.binary_cross_entropy_loss(lg, t).array, bce.mean())


def test_linear_matches_dot_plus_bias_eager_and_jitted():
    for out_first in (True, False):
        lin = hax.nn.Linear.init(E, V, key=KEY, out_first=out_first)
        lin = hax.nn.Linear(lin.weight, _x(V, seed=9), E, V)
        x = _x((B, S, E))
        w = lin.weight.array if not out_first else lin.weight.array.T
        ref = jnp.einsum("bse,ev->bsv", x.array, w) + lin.bias.array
        for y in (lin(x), jax.jit(lambda m, x: m(x))(lin, x)):
            assert y.axes == (B, S, V)
            _close(y.array, ref)
        assert lin.out_first == out_first
    # several input axes, no bias, init scale
    lin = hax.nn.Linear.init((H, D), E, key=KEY, use_bias=False, init_scale=0.5)
    assert lin.bias is None and lin.weight.axes == (E, H, D)
    assert float(jnp.abs(lin.weight.array).max()) <= 3 * 0.5 / np.sqrt(8) + 1e-6
    x = _x((B, H, D))
    _close(lin(x).array, jnp.einsum("bhd,ehd->be", x.array, lin.weight.array))
    # a replacement dot_general goes through hax.dot
    lin2 = hax.nn.Linear(lin.weight, None, (H, D), E, dot_general=jax.lax.dot_general)
    _close(lin2(x).array, lin(x).array)
    # gradients flow to the weight
    g = jax.grad(lambda m: m(x).sum().scalar())(lin)
    _close(g.weight.array, jnp.broadcast_to(x.array.sum(0), (8, 2, 4)))


def test_linear_errors_name_the_axes():
    lin = hax.nn.Linear.init(E, V, key=KEY)
    with pytest.raises(ValueError, match="input with axes \\(B=2, D=4\\) lacks the input axis 'E'"):
        lin(_x((B, D)))
    with pytest.raises(ValueError, match="input axis 'E' has size 3, the layer expects 8"):
        lin(_x((B, hax.Axis("E", 3))))
    with pytest.raises(ValueError, match="share axis names \\['E'\\]"):
        hax.nn.Linear.init(E, E, key=KEY)
    with pytest.raises(TypeError, match="needs a NamedArray"):
        lin(jnp.ones((2, 8)))


def test_embedding_norms_dropout_mlp():
    emb = hax.nn.Embedding.init(V, E, key=KEY)
    ids = hax.random.randint(jax.random.key(5), (B, S), 0, 11)
    x = emb(ids)
    assert x.axes == (B, S, E)
    _close(x.array, emb.weight.array[ids.array])
    logits = emb.unembed(x)
    assert logits.axes == (B, S, V)
    _close(logits.array, x.array @ emb.weight.array.T, 1e-4)
    grown = emb.resize_embeddings(13, key=jax.random.key(6))
    assert grown.Vocab.size == 13 and grown.weight.axes[0].size == 13
    _close(grown.weight.array[:11], emb.weight.array)
    assert emb.resize_embeddings(4).weight.axes == (V.resize(4), E)
    with pytest.raises(TypeError, match="integer token ids"):
        emb(x)

    ln = hax.nn.LayerNorm.init(E)
    ln = hax.nn.LayerNorm(E, _x(E, seed=7), _x(E, seed=8), 1e-5)
    m, v = x.array.mean(-1, keepdims=True), x.array.var(-1, keepdims=True)
    _close(ln(x).array, (x.array - m) / jnp.sqrt(v + 1e-5) * ln.weight.array + ln.bias.array, 1e-4)
    rms = hax.nn.RMSNorm.init(E)
    assert rms.bias is None
    _close(rms(x).array, x.array / jnp.sqrt((x.array**2).mean(-1, keepdims=True) + 1e-6), 1e-4)
    with pytest.raises(ValueError, match="lacks the normalized axis Axis\\('D', 4\\)"):
        hax.nn.LayerNorm.init(D)(x)

    drop = hax.nn.Dropout(0.25)
    assert drop(x, inference=True) is x
    k = jax.random.key(9)
    out = drop(x, key=k)
    keep = jax.random.bernoulli(k, 0.75, (2, 5, 8))
    _close(out.array, jnp.where(keep, x.array / 0.75, 0))
    shared = hax.nn.Dropout(0.5, broadcast_axes=E)(x, key=k)
    assert ((shared.array == 0).all(-1) | (shared.array != 0).all(-1)).all()
    with pytest.raises(ValueError, match="a key is needed"):
        drop(x)

    mlp = hax.nn.MLP.init(E, E, 16, 2, activation=hax.nn.gelu, key=KEY)
    h = x.array
    for i, layer in enumerate(mlp.layers):
        h = h @ layer.weight.array.T + layer.bias.array
        if i < 2:
            h = jax.nn.gelu(h)
    _close(mlp(x).array, h, 1e-4)
    assert len(hax.nn.MLP.init(E, V, 4, 0, key=KEY).layers) == 1


def test_attention_matches_plain_softmax_attention_with_masks():
    q = _x((B, S, H, D), seed=11)
    k = _x((B, KS, H, D), seed=12)
    v = _x((B, KS, H, D), seed=13)
    mask = hax.nn.causal_mask(S, KS)
    _close(mask.array, jnp.tril(jnp.ones((5, 5), bool)))
    out = hax.nn.dot_product_attention(KS, D, q, k, v, mask=mask)
    assert out.axes == (B, S, H, D)
    logits = jnp.einsum("bshd,bthd->bhst", q.array, k.array) / jnp.sqrt(4.0)
    logits = jnp.where(jnp.tril(jnp.ones((5, 5), bool)), logits, -1e9)
    ref = jnp.einsum("bhst,bthd->bshd", jax.nn.softmax(logits, -1), v.array)
    _close(out.array, ref, 1e-5)
    pm = hax.nn.prefix_lm_mask(S, KS, 2)
    expect = jnp.tril(jnp.ones((5, 5), bool)) | (jnp.arange(5) < 2)[None, :]
    _close(pm.array, expect)
    assert hax.nn.causal_mask(S, KS, q_start=1).array[0, 1]
    with pytest.raises(ValueError, match="attended axis 'S' is also in the query"):
        hax.nn.dot_product_attention(S, D, q, q, q)
    with pytest.raises(TypeError, match="query must be a NamedArray"):
        hax.nn.dot_product_attention(S, KS, D, q, k)
    with pytest.raises(ValueError, match="different names"):
        hax.nn.causal_mask(S, S)
    bias = hax.nn.mask_to_bias(mask)
    _close(
        hax.nn.dot_product_attention(KS, D, q, k, v, bias=bias).array,
        out.array,
        1e-5,
    )


def test_combine_masks():
    causal = hax.nn.causal_mask(S, KS)
    pad = hax.named(jnp.arange(5) < 4, KS)
    both = hax.nn.combine_masks_and(causal, pad)
    assert both.axes == (S, KS)
    _close(both.array, jnp.tril(jnp.ones((5, 5), bool)) & (jnp.arange(5) < 4)[None, :])
    either = hax.nn.combine_masks_or(causal, pad)
    _close(either.array, jnp.tril(jnp.ones((5, 5), bool)) | (jnp.arange(5) < 4)[None, :])
    assert (
        hax.nn.combine_masks_and(None, pad) is pad
        and hax.nn.combine_masks_or(causal, None) is causal
    )


def test_alibi_bias_and_forgetful_mask():
    heads, kpos = hax.Axis("heads", 8), hax.Axis("kpos", 5)
    bias = hax.nn.alibi_attention_bias(heads, kpos)
    assert bias.axes == (heads, kpos)
    # ALiBi (Press et al.): slopes 2^(-8/n * (i+1)), times the key position
    slopes = 2.0 ** (-8.0 / 8 * np.arange(1, 9))
    np.testing.assert_allclose(bias.array, slopes[:, None] * np.arange(5)[None, :], rtol=1e-6)
    # a non-power-of-two count: the 4-head slopes, then every other 8-head slope
    six = hax.nn.alibi_attention_bias(hax.Axis("heads", 6), kpos, bias_max=8).array[:, 1]
    want = np.concatenate(
        [2.0 ** (-2.0 * np.arange(1, 5)), (2.0 ** (-1.0 * np.arange(1, 9)))[0::2][:2]]
    )
    np.testing.assert_allclose(six, want, rtol=1e-6)
    # with the bias, later keys get more weight
    hid = hax.Axis("hid", 4)
    q, k = hax.ones((heads, hid)), hax.ones((kpos, heads, hid))
    w = hax.nn.dot_product_attention_weights(hid, kpos, q, k, bias=bias)
    assert bool((w.array[:, -1] > w.array[:, 0]).all())

    key = jax.random.key(0)
    m = hax.nn.forgetful_causal_mask(kpos, 0.6, sample_prob=False, key=key)
    assert m.axes == (kpos,) and m.dtype == jnp.bool_ and bool(m.array[0])
    ref = np.asarray(jax.random.bernoulli(key, 0.4, (5,))) | (np.arange(5) == 0)
    np.testing.assert_array_equal(m.array, ref)
    assert bool(hax.nn.forgetful_causal_mask(kpos, 0.0, key=key).array.all())
    np.testing.assert_array_equal(
        hax.nn.forgetful_causal_mask(kpos, 1.0, key=key).array, np.arange(5) == 0
    )
    assert hax.nn.forgetful_causal_mask(kpos, 0.5, key=key).axes == (kpos,)


def test_one_hot_scalar_label_wraps_negative():
    c = hax.Axis("c", 3)
    np.testing.assert_array_equal(hax.nn.one_hot(jnp.array(1), c).array, [0.0, 1.0, 0.0])
    np.testing.assert_array_equal(hax.nn.one_hot(-1, c).array, [0.0, 0.0, 1.0])
    with pytest.raises(TypeError, match="must be a scalar"):
        hax.nn.one_hot(jnp.array([0, 1]), c)
    with pytest.raises(TypeError, match="must be integers"):
        hax.nn.one_hot(jnp.array(1.5), c)

"""muP rules (``hax.nn.mup``) on ``Linear`` and ``Embedding``: initialization, output and
logit scales, learning-rate factors, against plain ``jax.numpy``."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcore.named as hax
from jaxcore.named.nn import mup

B, In, Out, Vocab, Embed = hax.make_axes(B=2, I=6, O=5, V=7, E=4)
J = hax.Axis("J", 2)
KEY = jax.random.key(0)


def _close(a, b, tol=1e-6):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def _raw_normal(axes):
    return jax.random.truncated_normal(KEY, -3, 3, tuple(a.size for a in axes))


@pytest.mark.parametrize(
    "rule,init,active,lr",
    [
        (mup.LinearStandardParam, 1 / math.sqrt(12), 1, 1),
        (mup.InputLinearMup, 1, 1, 1),
        (mup.HiddenLinearMup, 1 / math.sqrt(12), 1, 1 / 12),
        (mup.OutputLinearMup, 1, 1 / 12, 1),
    ],
)
def test_linear_rules_scale_init_output_and_learning_rate(rule, init, active, lr):
    ins = (In, J)  # fan-in 12
    layer = hax.nn.Linear.init(ins, Out, key=KEY, reparam_cls=rule, init_scale=2.0)
    assert layer.reparam == rule(ins, Out)
    assert layer.reparam.active_scale == pytest.approx(active)
    assert layer.reparam.lr_scale == pytest.approx(lr)
    _close(layer.weight.array, _raw_normal((Out, In, J)) * 2.0 * init)
    layer = dataclasses.replace(layer, bias=hax.full(Out, 0.25))
    x = hax.random.normal(jax.random.key(1), (B, In, J))
    w = layer.weight.array.reshape(5, 12)
    ref = x.array.reshape(2, 12) @ w.T * active + 0.25
    _close(layer(x).array, ref, 1e-5)
    _close(jax.jit(lambda m, x: m(x))(layer, x).array, ref, 1e-5)


def test_default_linear_is_the_standard_rule_and_stacks():
    layer = hax.nn.Linear.init(In, Out, key=KEY)
    assert layer.reparam == mup.LinearStandardParam(In, Out)
    assert layer.out_first
    assert not hax.nn.Linear.init(In, Out, key=KEY, out_first=False).out_first
    Layers = hax.Axis("layers", 3)
    stacked = hax.nn.Stacked.init(Layers, hax.nn.Linear)(
        In, Out, key=jax.random.split(KEY, 3), reparam_cls=mup.OutputLinearMup
    )
    assert stacked.stacked.out_first  # (layers, O, I): the layer axis is not mistaken for Out
    assert stacked.stacked.reparam.active_scale == pytest.approx(1 / 6)
    x = hax.random.normal(jax.random.key(1), (B, In))
    y = stacked.vmap(x)
    _close(y.array, jnp.einsum("bi,loi->lbo", x.array, stacked.stacked.weight.array) / 6, 1e-5)


def test_embedding_rules():
    std = hax.nn.Embedding.init(Vocab, Embed, key=KEY)
    _close(std.weight.array, _raw_normal((Vocab, Embed)) / 4)  # Haliax: init_scale / size(Embed)
    m = hax.nn.Embedding.init(Vocab, Embed, key=KEY, reparam_cls=mup.EmbeddingMup)
    _close(m.weight.array, std.weight.array * 4)
    assert m.reparam.unembed_active_scale == pytest.approx(1 / 4)
    x = hax.random.normal(jax.random.key(1), (B, Embed))
    _close(m.unembed(x).array, x.array @ m.weight.array.T / 4, 1e-5)
    _close(std.unembed(x).array, x.array @ std.weight.array.T, 1e-5)
    grown = m.resize_embeddings(9, key=jax.random.key(3))
    assert grown.reparam == mup.EmbeddingMup(Embed, Vocab.resize(9))


def test_mup_linear_state_dict_exports_effective_weight():
    # Haliax folds the muP output scale into the exported weight (and divides it back out)
    layer = hax.nn.Linear.init(In, Out, key=KEY, use_bias=False, reparam_cls=mup.OutputLinearMup)
    layer = dataclasses.replace(layer, weight=hax.ones(layer.weight.axes))
    scale = layer.reparam.active_scale
    assert scale != 1
    sd = layer.to_state_dict()
    np.testing.assert_allclose(sd["weight"], np.ones((5, 6)) * scale, rtol=1e-6)
    assert sorted(layer.to_state_dict("l")) == ["l.weight"]
    template = hax.nn.Linear.init(
        In, Out, key=jax.random.key(1), use_bias=False, reparam_cls=mup.OutputLinearMup
    )
    back = template.from_state_dict(sd)
    np.testing.assert_allclose(back.weight.array, np.ones((5, 6)), rtol=1e-6)
    # the exported weight computes the same outputs without muP
    x = hax.random.normal(jax.random.key(2), (B, In))
    plain = hax.nn.Linear.init(In, Out, key=KEY, use_bias=False)
    plain = plain.from_state_dict(sd)
    np.testing.assert_allclose(plain(x).array, layer(x).array, rtol=1e-5)
    # the standard rule exports the weight unchanged
    std = hax.nn.Linear.init(In, Out, key=KEY)
    np.testing.assert_array_equal(std.to_state_dict()["weight"], std.weight.array)

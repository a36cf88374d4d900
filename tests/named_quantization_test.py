"""hax.quantization: int8/fp8 dot_general ops (quantized forward, straight-through grads)
and quantize_linear_layers, against NumPy references."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcore.named as hax
import jaxcore.tree as jtree
from jaxcore.named import quantization as hq

DIMS = (((1,), (0,)), ((), ()))
RNG = np.random.default_rng(0)
LHS = RNG.normal(size=(5, 16)).astype(np.float32)
RHS = RNG.normal(size=(16, 3)).astype(np.float32)


def _int8_reference(a, b):
    sa, sb = np.abs(a).max() / 127, np.abs(b).max() / 127
    qa = np.clip(np.round(a / sa), -127, 127).astype(np.int32)
    qb = np.clip(np.round(b / sb), -127, 127).astype(np.int32)
    return (qa @ qb).astype(np.float32) * np.float32(sa * sb)


def test_int8_forward_matches_reference_and_grads_pass_straight_through():
    op = hq.Int8DotGeneralOp()
    out = op(jnp.asarray(LHS), jnp.asarray(RHS), DIMS)
    np.testing.assert_allclose(out, _int8_reference(LHS, RHS), rtol=1e-5, atol=1e-5)
    assert not np.allclose(out, LHS @ RHS, atol=1e-4)  # it really is quantized
    np.testing.assert_allclose(out, LHS @ RHS, atol=0.15)
    g_q = jax.grad(lambda a, b: op(a, b, DIMS).sum(), argnums=(0, 1))(LHS, RHS)
    g_f = jax.grad(lambda a, b: (a @ b).sum(), argnums=(0, 1))(LHS, RHS)
    for q, f in zip(g_q, g_f):
        np.testing.assert_allclose(q, f, rtol=1e-6)
    assert op(jnp.zeros((2, 16)), jnp.asarray(RHS), DIMS).tolist() == [[0.0] * 3] * 2
    assert op(LHS.astype(jnp.bfloat16), RHS.astype(jnp.bfloat16), DIMS).dtype == jnp.bfloat16


def test_fp8_forward_matches_reference_and_grads_are_close():
    op = hq.Fp8DotGeneralOp()
    out = op(jnp.asarray(LHS), jnp.asarray(RHS), DIMS)
    sa, sb = np.abs(LHS).max() / 448, np.abs(RHS).max() / 448
    qa = (LHS / sa).astype(jnp.float8_e4m3fn).astype(np.float32)
    qb = (RHS / sb).astype(jnp.float8_e4m3fn).astype(np.float32)
    np.testing.assert_allclose(out, (qa @ qb) * (sa * sb), rtol=1e-5, atol=1e-5)
    g = jax.grad(lambda a: op(a, jnp.asarray(RHS), DIMS).sum())(LHS)
    np.testing.assert_allclose(g, np.ones((5, 3)) @ RHS.T, rtol=0.02)


def test_ops_are_hashable_static_values_under_jit():
    assert hash(hq.Int8DotGeneralOp()) == hash(hq.Int8DotGeneralOp())
    f = jax.jit(lambda a, b, op: op(a, b, DIMS), static_argnums=2)
    np.testing.assert_allclose(
        f(LHS, RHS, hq.Int8DotGeneralOp()), _int8_reference(LHS, RHS), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(hq.DefaultDotGeneralOp()(LHS, RHS, DIMS), LHS @ RHS, rtol=1e-5)


@jtree.dataclass
class Dense:
    w: hax.NamedArray
    dot_general: object = jtree.field(static=True, default=None)

    def __call__(self, x):
        return hax.dot(x, self.w, axis="in", dot_general=self.dot_general or jax.lax.dot_general)


def test_quantize_linear_layers_selects_targets():
    In, Out = hax.Axis("in", 16), hax.Axis("out", 3)
    model = {
        "attn": {"q": Dense(hax.named(jnp.asarray(RHS), (In, Out)))},
        "mlp": [Dense(hax.named(jnp.asarray(RHS), (In, Out)))],
    }
    q = hq.quantize_linear_layers(model, hq.QuantizationConfig(targets=["q"], int8=True))
    assert isinstance(q["attn"]["q"].dot_general, hq.Int8DotGeneralOp)
    assert q["mlp"][0].dot_general is None and q["mlp"][0] is model["mlp"][0]
    every = hq.quantize_linear_layers(model, hq.QuantizationConfig(fp8=True))
    assert isinstance(every["mlp"][0].dot_general, hq.Fp8DotGeneralOp)
    x = hax.named(jnp.asarray(LHS), (hax.Axis("b", 5), In))
    np.testing.assert_allclose(
        q["attn"]["q"](x).array, _int8_reference(LHS, RHS), rtol=1e-5, atol=1e-5
    )
    with pytest.raises(ValueError, match=r"targets \['nope'\] match no layer"):
        hq.quantize_linear_layers(model, hq.QuantizationConfig(targets="nope", int8=True))
    with pytest.raises(ValueError, match="exactly one of int8=True and fp8=True"):
        hq.QuantizationConfig(int8=True, fp8=True)
    with pytest.raises(ValueError, match="exactly one"):
        hq.QuantizationConfig()
    assert dataclasses.is_dataclass(hq.QuantizationConfig(int8=True))


def test_ops_have_haliax_init_constructors():
    assert hq.Int8DotGeneralOp.init() == hq.Int8DotGeneralOp()
    assert isinstance(hq.DefaultDotGeneralOp.init(), hq.DefaultDotGeneralOp)
    assert isinstance(hq.Fp8DotGeneralOp.init(amax_history_length=16), hq.Fp8DotGeneralOp)
    In, Out = hax.Axis("In", 8), hax.Axis("Out", 8)
    key = jax.random.key(0)
    plain = hax.nn.Linear.init(In, Out, key=key, init_scale=0.1)
    int8 = hax.nn.Linear.init(
        In, Out, key=key, dot_general=hq.Int8DotGeneralOp.init(), init_scale=0.1
    )
    x = hax.random.normal(jax.random.key(3), In)
    ref = np.asarray(x.array) @ np.asarray(plain.weight.rearrange((In, Out)).array) + np.asarray(
        plain.bias.array
    )
    np.testing.assert_allclose(int8(x).array, ref, atol=1e-2, rtol=5e-2)

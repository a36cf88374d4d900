"""``hax.nn.MoELinear`` against a plain-jnp loop over the experts' row blocks, and against
``jax.lax.ragged_dot_general`` as Haliax calls it, with its error paths."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcore.named as hax

Ex, In, Out, Tok, S, Hax = hax.make_axes(experts=3, embed=4, mlp=5, tok=7, seq=2, h=2)
KEY = jax.random.key(0)
SIZES = jnp.array([2, 4, 1], jnp.int32)


def _close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def _ref(moe, rows, sizes):
    """Expert e multiplies its block of consecutive rows (rows past the total give 0)."""
    w = moe.weight.rearrange((Ex, In, Out)).array
    out = jnp.zeros((rows.shape[0], Out.size), rows.dtype)
    start = 0
    for e, n in enumerate(np.asarray(sizes)):
        out = out.at[start : start + n].set(rows[start : start + n] @ w[e])
        start += int(n)
    return out + (0 if moe.bias is None else moe.bias.array)


@pytest.mark.parametrize("out_first", [False, True])
def test_moe_linear_matches_a_per_expert_loop(out_first):
    moe = hax.nn.MoELinear.init(Ex, In, Out, key=KEY, out_first=out_first)
    assert moe.out_first == out_first
    assert moe.weight.axes == ((Ex, Out, In) if out_first else (Ex, In, Out))
    assert moe.bias.axes == (Out,)
    x = hax.random.normal(jax.random.key(1), (Tok, In))
    y = moe(x, hax.named(SIZES, Ex))
    assert y.axes == (Tok, Out)
    _close(y.array, _ref(moe, x.array, SIZES))
    # group sizes as a plain array, and a total short of the row count
    short = jnp.array([1, 2, 1], jnp.int32)
    _close(moe(x, short).array, _ref(moe, x.array, short))


def test_moe_linear_agrees_with_ragged_dot_general_as_haliax_calls_it():
    moe = hax.nn.MoELinear.init(Ex, In, Out, key=KEY)
    x = hax.random.normal(jax.random.key(1), (Tok, In))
    dims = jax.lax.RaggedDotDimensionNumbers(
        dot_dimension_numbers=(((1,), (1,)), ((), ())),
        lhs_ragged_dimensions=(0,),
        rhs_group_dimensions=(0,),
    )
    ref = jax.lax.ragged_dot_general(x.array, moe.weight.array, SIZES, dims) + moe.bias.array
    _close(moe(x, hax.named(SIZES, Ex)).array, ref)


def test_rows_span_several_axes_and_in_sits_anywhere():
    moe = hax.nn.MoELinear.init(Ex, In, Out, key=KEY, use_bias=False)
    assert moe.bias is None
    x = hax.random.normal(jax.random.key(2), (S, In, Hax))
    sizes = jnp.array([1, 0, 3], jnp.int32)  # an expert may get no rows
    y = moe(x, hax.named(sizes, Ex))
    assert y.axes == (S, Out, Hax)
    rows = x.rearrange((S, Hax, In)).array.reshape(4, 4)
    _close(y.rearrange((S, Hax, Out)).array.reshape(4, 5), _ref(moe, rows, sizes))


def test_moe_linear_jits_and_differentiates_like_the_loop():
    moe = hax.nn.MoELinear.init(Ex, In, Out, key=KEY)
    x = hax.random.normal(jax.random.key(1), (Tok, In))
    gs = hax.named(SIZES, Ex)
    g = jax.jit(jax.grad(lambda m, x: (m(x, gs).array ** 2).sum(), argnums=(0, 1)))(moe, x)
    r = jax.grad(lambda m, x: (_ref(m, x.array, SIZES) ** 2).sum(), argnums=(0, 1))(moe, x)
    _close(g[0].weight.array, r[0].weight.array, 1e-4)
    _close(g[0].bias.array, r[0].bias.array, 1e-4)
    _close(g[1].array, r[1].array, 1e-4)


def test_moe_linear_errors_name_the_axis():
    moe = hax.nn.MoELinear.init(Ex, In, Out, key=KEY)
    gs = hax.named(SIZES, Ex)
    with pytest.raises(ValueError, match=r"input with axes \(tok=7\) lacks the input axis 'embed'"):
        moe(hax.zeros(Tok), gs)
    with pytest.raises(ValueError, match="input axis 'embed' has size 3, the layer expects 4"):
        moe(hax.zeros((Tok, In.resize(3))), gs)
    with pytest.raises(ValueError, match="already has the output axis 'mlp'"):
        moe(hax.zeros((Out, In)), gs)
    with pytest.raises(ValueError, match="group_sizes must have exactly the axis 'experts'"):
        moe(hax.zeros((Tok, In)), hax.named(SIZES, "groups"))
    with pytest.raises(ValueError, match="one count per expert"):
        moe(hax.zeros((Tok, In)), jnp.array([3, 4]))
    with pytest.raises(TypeError, match="group_sizes must be integers"):
        moe(hax.zeros((Tok, In)), jnp.array([2.0, 4.0, 1.0]))
    with pytest.raises(ValueError, match="need distinct names"):
        hax.nn.MoELinear.init(Ex, In, In, key=KEY)
    with pytest.raises(TypeError, match="In must be an Axis"):
        hax.nn.MoELinear.init(Ex, "embed", Out, key=KEY)

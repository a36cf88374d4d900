"""Zero runtime overhead: a named MLP lowers to exactly the HLO of the positional one."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcore.named as hax

Batch, Embed, Hidden = hax.make_axes(batch=8, embed=16, hidden=32)


def _params():
    k = jax.random.split(jax.random.key(0), 5)
    raw = {
        "w1": jax.random.normal(k[0], (16, 32)),
        "b1": jax.random.normal(k[1], (32,)),
        "w2": jax.random.normal(k[2], (32, 16)),
        "b2": jax.random.normal(k[3], (16,)),
    }
    x = jax.random.normal(k[4], (8, 16))
    named = {
        "w1": hax.NamedArray(raw["w1"], (Embed, Hidden)),
        "b1": hax.NamedArray(raw["b1"], (Hidden,)),
        "w2": hax.NamedArray(raw["w2"], (Hidden, Embed)),
        "b2": hax.NamedArray(raw["b2"], (Embed,)),
    }
    return raw, x, named, hax.NamedArray(x, (Batch, Embed))


def mlp(p, x):  # positional reference
    h = jnp.maximum(jnp.dot(x, p["w1"]) + p["b1"], 0.0)
    y = jnp.dot(h, p["w2"]) + p["b2"]
    return jnp.sum(y * y)


def named_mlp_dot(p, x):
    h = hax.maximum(hax.dot(x, p["w1"], axis=Embed) + p["b1"], 0.0)
    y = hax.dot(h, p["w2"], axis="hidden") + p["b2"]
    return hax.sum(y * y).array


def named_mlp_einsum(p, x):
    h = hax.maximum(hax.einsum("{embed} -> batch hidden", x, p["w1"]) + p["b1"], 0.0)
    y = hax.einsum("b h, h e -> b e", h, p["w2"]) + p["b2"]
    return hax.sum(y * y).array


def _hlo(fn, *args):
    text = jax.jit(fn).lower(*args).as_text()
    text = re.sub(r"module @\S+", "module @m", text)  # the module is named after the function
    text = re.sub(r"\s*loc\(.*?\)\)*", "", text)
    # output labels are pytree paths ("result['w1']" vs "result['w1'].array"), not computation
    text = re.sub(r' \{jax\.result_info = "[^"]*"\}', "", text)
    return "\n".join(line for line in text.splitlines() if not line.startswith("#loc"))


@pytest.mark.parametrize("named_fn", [named_mlp_dot, named_mlp_einsum])
def test_forward_hlo_is_identical(named_fn):
    raw, x, named, xn = _params()
    want = _hlo(mlp, raw, x)
    assert "dot_general" in want
    assert _hlo(named_fn, named, xn) == want
    np.testing.assert_allclose(
        float(jax.jit(named_fn)(named, xn)), float(jax.jit(mlp)(raw, x)), rtol=1e-6
    )


@pytest.mark.parametrize("named_fn", [named_mlp_dot, named_mlp_einsum])
def test_gradient_hlo_is_identical(named_fn):
    raw, x, named, xn = _params()
    assert _hlo(jax.grad(named_fn), named, xn) == _hlo(jax.grad(mlp), raw, x)
    g_named = jax.jit(jax.grad(named_fn))(named, xn)
    g_raw = jax.jit(jax.grad(mlp))(raw, x)
    for k in raw:
        assert g_named[k].axes == named[k].axes
        np.testing.assert_allclose(np.asarray(g_named[k].array), np.asarray(g_raw[k]), rtol=1e-5)


def test_vmapped_hlo_is_identical():
    raw, x, named, _ = _params()
    xs = jnp.stack([x, 2 * x])
    named_batched = jax.vmap(lambda r: named_mlp_dot(named, hax.NamedArray(r, (Batch, Embed))))
    assert _hlo(named_batched, xs) == _hlo(jax.vmap(lambda r: mlp(raw, r)), xs)

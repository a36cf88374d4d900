"""``hax.random``: named samplers equal ``jax.random`` on the same key, bit for bit."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcore.named as hax
import jaxcore.named.random as hrandom

B, H, V, S = hax.make_axes(B=3, H=4, V=5, S=2)
KEY = jax.random.key(7)


def _same(named, ref, axes):
    assert isinstance(named, hax.NamedArray)
    assert named.axes == tuple(axes)
    assert named.dtype == ref.dtype
    np.testing.assert_array_equal(np.asarray(named.array), np.asarray(ref))


NO_PARAM = ["normal", "gumbel", "laplace", "exponential", "cauchy", "logistic"]


@pytest.mark.parametrize("name", NO_PARAM)
def test_parameterless_samplers_match_jax(name):
    fn = getattr(hrandom, name)
    ref = getattr(jax.random, name)
    _same(fn(KEY, (B, H)), ref(KEY, (3, 4)), (B, H))
    # a shape dict, a single Axis, and an explicit dtype
    _same(fn(KEY, {"B": 3, "H": 4}), ref(KEY, (3, 4)), (B, H))
    _same(fn(KEY, H), ref(KEY, (4,)), (H,))
    _same(fn(KEY, (H, B), dtype=jnp.bfloat16), ref(KEY, (4, 3), dtype=jnp.bfloat16), (H, B))


def test_uniform_with_scalar_and_named_bounds():
    _same(hrandom.uniform(KEY, (B, H)), jax.random.uniform(KEY, (3, 4)), (B, H))
    _same(
        hrandom.uniform(KEY, (B, H), minval=-2.0, maxval=3.0),
        jax.random.uniform(KEY, (3, 4), minval=-2.0, maxval=3.0),
        (B, H),
    )
    lo = hax.named(jnp.arange(4.0), H)  # per-H lower bound, broadcast along B by name
    ref = jax.random.uniform(KEY, (3, 4), minval=jnp.arange(4.0)[None, :], maxval=10.0)
    _same(hrandom.uniform(KEY, (B, H), minval=lo, maxval=10.0), ref, (B, H))
    # the same bound given with the other axis order lines up by name
    lo_b = hax.named(jnp.arange(3.0), B)
    ref = jax.random.uniform(KEY, (4, 3), minval=jnp.arange(3.0)[None, :])
    _same(hrandom.uniform(KEY, (H, B), minval=lo_b), ref, (H, B))


def test_parametrised_samplers_match_jax():
    a = hax.named(jnp.linspace(0.5, 2.0, 4), H)
    a_pos = jnp.broadcast_to(jnp.linspace(0.5, 2.0, 4), (3, 4))
    cases = [
        (
            hrandom.truncated_normal(KEY, (B, H), -1.0, 2.0),
            jax.random.truncated_normal(KEY, -1.0, 2.0, (3, 4)),
        ),
        (hrandom.gamma(KEY, (B, H), a), jax.random.gamma(KEY, a_pos, (3, 4))),
        (hrandom.gamma(KEY, (B, H), 2.0), jax.random.gamma(KEY, 2.0, (3, 4))),
        (hrandom.loggamma(KEY, (B, H), a), jax.random.loggamma(KEY, a_pos, (3, 4))),
        (hrandom.beta(KEY, (B, H), a, 3.0), jax.random.beta(KEY, a_pos, 3.0, (3, 4))),
        (hrandom.t(KEY, (B, H), 3.0), jax.random.t(KEY, 3.0, (3, 4))),
        (hrandom.weibull_min(KEY, (B, H), 1.5, a), jax.random.weibull_min(KEY, 1.5, a_pos, (3, 4))),
        (hrandom.pareto(KEY, (B, H), a), jax.random.pareto(KEY, a_pos, (3, 4))),
        (hrandom.bernoulli(KEY, (B, H), 0.3), jax.random.bernoulli(KEY, 0.3, (3, 4))),
        (hrandom.bernoulli(KEY, (B, H), a / 3), jax.random.bernoulli(KEY, a_pos / 3, (3, 4))),
        (hrandom.randint(KEY, (B, H), 0, 10), jax.random.randint(KEY, (3, 4), 0, 10)),
        (hrandom.poisson(KEY, (B, H), 3.0), jax.random.poisson(KEY, 3.0, (3, 4))),
        (hrandom.poisson(KEY, (B, H), a), jax.random.poisson(KEY, a_pos, (3, 4))),
        (hrandom.rademacher(KEY, (B, H)), jax.random.rademacher(KEY, (3, 4), dtype=float)),
    ]
    for named, ref in cases:
        _same(named, ref, (B, H))
    _same(hrandom.ball(KEY, (B,), H), jax.random.ball(KEY, 4, 2.0, (3,)), (B, H))


def test_categorical_matches_jax_and_names_its_axes():
    logits = hrandom.normal(jax.random.key(1), (B, V))
    _same(
        hrandom.categorical(KEY, logits, V), jax.random.categorical(KEY, logits.array, axis=1), (B,)
    )
    # category axis first: jax's axis index follows the named axis
    lt = logits.rearrange((V, B))
    _same(hrandom.categorical(KEY, lt, "V"), jax.random.categorical(KEY, lt.array, axis=0), (B,))
    # extra sample axes go in front for jax; the result is laid out as asked
    ref = jax.random.categorical(KEY, logits.array, axis=1, shape=(2, 3))
    _same(hrandom.categorical(KEY, logits, V, shape=(S, B)), ref, (S, B))
    # any other order: the logits are laid out in shape's order (the category axis keeps its
    # place after the new axes), as jax.random.categorical would draw for that layout
    laid_out = jnp.broadcast_to(logits.array[:, None, :], (3, 2, 5))
    ref_bs = jax.random.categorical(KEY, laid_out, axis=2, shape=(3, 2))
    _same(hrandom.categorical(KEY, logits, V, shape=(B, S)), ref_bs, (B, S))
    # logits without the new axis broadcast like Haliax's (a shared row per sample)
    lh = hrandom.uniform(jax.random.key(2), (B, V))
    raw = jnp.broadcast_to(lh.array[:, None, :], (3, 2, 5))
    _same(
        hrandom.categorical(KEY, lh, "V", shape=(B, S)),
        jax.random.categorical(KEY, raw, axis=-1, shape=(3, 2)),
        (B, S),
    )
    with pytest.raises(ValueError, match="'V'.*cannot be in shape"):
        hrandom.categorical(KEY, logits, V, shape=(B, V))
    with pytest.raises(ValueError, match="missing or resized: \\['B'\\]"):
        hrandom.categorical(KEY, logits, V, shape=(S,))
    with pytest.raises(ValueError, match="axis 'Q' is not in logits with axes \\(B=3, V=5\\)"):
        hrandom.categorical(KEY, logits, "Q")


def test_choice_permutation_dirichlet():
    a = hax.named(jnp.arange(15.0).reshape(3, 5), (B, V))
    _same(hrandom.choice(KEY, (S,), a, V), jax.random.choice(KEY, a.array, (2,), axis=1), (S, B))
    p = hax.named(jnp.array([0.1, 0.2, 0.3, 0.2, 0.2]), V)
    _same(
        hrandom.choice(KEY, (S,), a, "V", replace=False, p=p),
        jax.random.choice(KEY, a.array, (2,), replace=False, p=p.array, axis=1),
        (S, B),
    )
    with pytest.raises(ValueError, match="single axis"):
        hrandom.choice(KEY, (S,), a, V, p=hax.ones((B,)))
    _same(hrandom.permutation(KEY, a, V), jax.random.permutation(KEY, a.array, 1), (B, V))
    _same(
        hrandom.permutation(KEY, a, B, independent=True),
        jax.random.permutation(KEY, a.array, 0, independent=True),
        (B, V),
    )
    alpha = hax.named(jnp.linspace(0.5, 3.0, 5), V)
    _same(
        hrandom.dirichlet(KEY, alpha, V, shape=(B,)),
        jax.random.dirichlet(KEY, alpha.array, (3,)),
        (B, V),
    )
    # alpha with a batch axis, category axis first: laid out (..., V) for jax
    alpha2 = hax.named(jnp.linspace(0.5, 3.0, 15).reshape(5, 3), (V, B))
    ref = jax.random.dirichlet(KEY, alpha2.array.T)
    _same(hrandom.dirichlet(KEY, alpha2, "V"), ref, (B, V))
    np.testing.assert_allclose(np.asarray(ref.sum(-1)), 1.0, rtol=1e-5)


def test_jit_and_vmap_over_keys():
    f = jax.jit(lambda k: hrandom.normal(k, (B, H)))
    _same(f(KEY), jax.random.normal(KEY, (3, 4)), (B, H))
    keys = jax.random.split(KEY, 2)
    out = hax.vmap(lambda k: hrandom.uniform(k, (H,)), S)(keys)
    _same(out, jax.vmap(lambda k: jax.random.uniform(k, (4,)))(keys), (S, H))


def test_errors_name_the_axes():
    with pytest.raises(TypeError, match="hax.random.normal: bad shape.*'B' is given by name only"):
        hrandom.normal(KEY, ("B", H))
    with pytest.raises(ValueError, match="parameter 'minval' with axes \\(V=5\\).*\\(B=3, H=4\\)"):
        hrandom.uniform(KEY, (B, H), minval=hax.zeros(V))
    with pytest.raises(ValueError, match="parameter 'p'.*size"):
        hrandom.bernoulli(KEY, (B, H), hax.ones(hax.Axis("H", 7)) * 0.5)
    with pytest.raises(ValueError, match="(?i)duplicate axis name .B."):
        hrandom.normal(KEY, (B, B))
    with pytest.raises(TypeError, match="must be a NamedArray"):
        hrandom.permutation(KEY, jnp.arange(3), "B")


def test_generate_sharded_without_mapping_is_the_plain_sampler():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        gen = hrandom.generate_sharded(hrandom.normal)
        forced = hrandom.generate_sharded(hrandom.normal, axis=B)
    _same(gen(KEY, (B, H)), jax.random.normal(KEY, (3, 4)), (B, H))
    # forced along B: one split key per row
    keys = jax.random.split(KEY, 3)
    ref = jnp.stack([jax.random.normal(k, (4,)) for k in keys])
    _same(forced(KEY, (H, B)), ref.T, (H, B))
    with pytest.raises(ValueError, match="axis 'B' is not in the shape"):
        forced(KEY, (H,))
    with pytest.warns(DeprecationWarning):
        hrandom.generate_sharded(hrandom.normal)


def test_public_names():
    for name in [
        "uniform", "normal", "randint", "bernoulli", "categorical", "truncated_normal", "choice",
        "permutation", "gumbel", "laplace", "exponential", "gamma", "beta", "poisson", "cauchy",
        "logistic", "t", "weibull_min", "pareto", "dirichlet", "generate_sharded",
    ]:  # fmt: skip
        assert callable(getattr(hax.random, name)), name

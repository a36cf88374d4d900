"""Tests for jaxcore.utils (single-device; shard_map lives in tree_multidevice_test)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcore import utils as ju

# ---------------------------------------------------------------------------
# jit / vectorize / linearize
# ---------------------------------------------------------------------------


def _poly(x, power=2):
    """Docstring kept by jit."""
    return x**power + 1


def test_jit_bare_and_decorator_forms_match_plain_jax():
    x = jnp.arange(4.0)
    f = ju.jit(_poly)
    np.testing.assert_allclose(f(x), np.arange(4.0) ** 2 + 1)
    assert f.__name__ == "_poly" and f.__doc__ == "Docstring kept by jit."
    np.testing.assert_allclose(ju.jit(fn=_poly)(x), np.arange(4.0) ** 2 + 1)
    g = ju.jit(static_argnames="power")(_poly)
    np.testing.assert_allclose(g(x, power=3), np.arange(4.0) ** 3 + 1)

    @ju.jit(static_argnums=1)
    def h(v, n):
        return jnp.tile(v, n)  # n must be static for the output shape

    assert h(x, 3).shape == (12,)


def test_jit_forwards_shardings_and_options():
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    f = ju.jit(lambda v: v * 2, in_shardings=sharding, out_shardings=sharding, keep_unused=True)
    out = f(jnp.ones(3))
    assert out.sharding == sharding
    np.testing.assert_allclose(out, 2 * np.ones(3))
    donated = ju.jit(lambda v: v + 1, donate_argnums=0, inline=True)
    np.testing.assert_allclose(donated(jnp.zeros(2)), [1.0, 1.0])
    # backend/device are forwarded as-is, so JAX's own deprecation shows through.
    with pytest.warns(DeprecationWarning, match="backend and device argument on jit is deprecated"):
        on_cpu = ju.jit(lambda v: v - 1, backend="cpu")
    np.testing.assert_allclose(on_cpu(jnp.zeros(2)), [-1.0, -1.0])


def test_jit_errors():
    with pytest.raises(NotImplementedError, match="abstracted_axes"):
        ju.jit(_poly, abstracted_axes=("n",))
    with pytest.raises(TypeError, match="jit expects a callable to transform, got int"):
        ju.jit(3)


def test_vectorize_signature_excluded_and_decorator():
    dot = ju.vectorize(jnp.dot, signature="(n),(n)->()")
    a = np.arange(12.0).reshape(3, 4)
    b = np.ones(4)
    np.testing.assert_allclose(dot(a, b), a.sum(axis=1))

    @ju.vectorize(excluded=frozenset({1}))
    def shift(v, table):
        return v + table["offset"]

    np.testing.assert_allclose(shift(jnp.arange(3.0), {"offset": 2.0}), [2.0, 3.0, 4.0])
    with pytest.raises(TypeError, match="vectorize expects a callable"):
        ju.vectorize("nope")


def test_linearize_matches_jvp_and_supports_aux():
    def f(x, y):
        return jnp.sin(x) * y

    x, y = jnp.array([0.3, 1.2]), jnp.array([2.0, -1.0])
    out, jvp_fn = ju.linearize(f, x, y)
    tx, ty = jnp.array([1.0, 0.5]), jnp.array([0.0, 2.0])
    ref_out, ref_tan = jax.jvp(f, (x, y), (tx, ty))
    np.testing.assert_allclose(out, ref_out)
    np.testing.assert_allclose(jvp_fn(tx, ty), ref_tan, rtol=1e-6)
    out, jvp_fn, aux = ju.linearize(lambda v: (v**2, "aux"), x, has_aux=True)
    assert aux == "aux"
    np.testing.assert_allclose(jvp_fn(jnp.ones(2)), 2 * x, rtol=1e-6)
    with pytest.raises(TypeError, match="linearize expects a callable"):
        ju.linearize(None, x)


# ---------------------------------------------------------------------------
# is_traced / no_jax_tracing
# ---------------------------------------------------------------------------


def test_is_traced_under_each_transform():
    seen = []

    def probe(x):
        seen.append(ju.is_traced({"a": x, "b": 1.0}))
        return x.sum()

    assert not ju.is_traced({"a": jnp.ones(2), "b": [np.ones(1), 3]})
    jax.jit(probe)(jnp.ones(2))
    jax.vmap(probe)(jnp.ones((2, 2)))
    jax.grad(probe)(jnp.ones(2))
    probe(jnp.ones(2))
    assert seen == [True, True, True, False]


def test_no_jax_tracing_guard():
    @ju.no_jax_tracing
    def host_only(x, *, scale=1.0):
        """Host function."""
        return float(np.sum(x)) * scale

    assert host_only(jnp.ones(3), scale=2.0) == 6.0
    assert host_only.__doc__ == "Host function."
    with pytest.raises(
        ju.NotJaxCompatibleError,
        match=r"host_only is marked no_jax_tracing but its positional argument 0 is a JAX tracer",
    ):
        jax.jit(host_only)(jnp.ones(3))
    with pytest.raises(ju.NotJaxCompatibleError, match=r"its argument 'scale' is a JAX tracer"):
        jax.jit(lambda s: host_only(np.ones(2), scale=s))(2.0)
    with pytest.raises(ju.NotJaxCompatibleError):
        jax.vmap(host_only)(jnp.ones((2, 2)))
    with pytest.raises(TypeError, match="no_jax_tracing expects a callable, got str"):
        ju.no_jax_tracing("x")


# ---------------------------------------------------------------------------
# isin
# ---------------------------------------------------------------------------


def test_isin_matches_numpy():
    rng = np.random.default_rng(1)
    a = rng.integers(-5, 60, size=(7, 9))
    b = rng.integers(-5, 60, size=13)
    ours = ju.isin(a, b, 50)
    in_range = (a >= 0) & (a < 50)
    ref = np.isin(a, b[(b >= 0) & (b < 50)]) & in_range
    np.testing.assert_array_equal(ours, ref)
    assert ours.shape == a.shape and ours.dtype == jnp.bool_
    jitted = jax.jit(ju.isin, static_argnums=2)(a, b, 50)
    np.testing.assert_array_equal(jitted, ref)


def test_isin_negative_values_do_not_wrap():
    # -1 must not alias the last table slot (49).
    np.testing.assert_array_equal(ju.isin(np.array([49, -1]), np.array([-1]), 50), [False, False])
    np.testing.assert_array_equal(ju.isin(np.array([49, -1]), np.array([49]), 50), [True, False])


@pytest.mark.parametrize("dtype, max_item", [(np.int8, 200), (np.uint8, 300), (np.int16, 100)])
def test_isin_narrow_dtypes_with_large_max_item_match_numpy(dtype, max_item):
    # max_item may exceed the dtype's range: it must not overflow into it.
    info = np.iinfo(dtype)
    a = np.array([info.min, 0, 1, 99, info.max], dtype)
    b = np.array([info.max, 1, info.min, 99], dtype)
    wide = a.astype(np.int64)
    ref = (
        np.isin(a, b[(b >= 0) & (b.astype(np.int64) < max_item)]) & (wide >= 0) & (wide < max_item)
    )
    np.testing.assert_array_equal(ju.isin(a, b, max_item), ref)


def test_isin_errors():
    with pytest.raises(TypeError, match="isin: a must have an integer dtype, got float32"):
        ju.isin(jnp.ones(2), jnp.array([1]), 4)
    with pytest.raises(TypeError, match="isin: b must have an integer dtype"):
        ju.isin(jnp.array([1]), jnp.ones(2), 4)
    with pytest.raises(TypeError, match="max_item must be a concrete Python int.*float"):
        ju.isin(jnp.array([1]), jnp.array([1]), 4.0)
    with pytest.raises(TypeError, match="max_item must be a concrete Python int"):
        jax.jit(ju.isin)(jnp.array([1]), jnp.array([1]), 4)
    with pytest.raises(ValueError, match="max_item must be positive, got 0"):
        ju.isin(jnp.array([1]), jnp.array([1]), 0)


# ---------------------------------------------------------------------------
# kahan_summation
# ---------------------------------------------------------------------------

_N_TERMS = 20000


def _ill_conditioned_terms():
    rng = np.random.default_rng(3)
    # A large head plus many tiny terms: each naive float32 addition rounds away
    # most of the tiny term.
    return np.concatenate([[1e4], rng.uniform(1e-4, 3e-4, _N_TERMS)]).astype(np.float32)


@jax.jit
def _naive_sum(terms):
    return jax.lax.scan(lambda s, x: (s + x, None), terms[0], terms[1:])[0]


@jax.jit
def _kahan_sum(terms):
    def step(carry, x):
        return ju.kahan_summation(carry[0], x, compensate=carry[1]), None

    return jax.lax.scan(step, (terms[0], jnp.zeros((), terms.dtype)), terms[1:])[0][0]


def test_kahan_beats_naive_float32_summation():
    terms = _ill_conditioned_terms()
    exact = np.sum(terms.astype(np.float64))
    naive_err = abs(float(_naive_sum(terms)) - exact)
    kahan_err = abs(float(_kahan_sum(terms)) - exact)
    # float32 spacing at 1e4 is ~1e-3: Kahan stays within about one ulp, naive
    # accumulates a rounding error per term.
    assert kahan_err <= 1e-3
    assert naive_err > 0.1
    assert kahan_err * 100 < naive_err


def test_kahan_eager_pytree_and_continuation():
    a = {"x": np.float32(1.0), "y": [np.full(3, 1e8, np.float32)]}
    small = {"x": np.float32(1e-8), "y": [np.ones(3, np.float32)]}
    total, comp = ju.kahan_summation(a, small, small, small)
    assert float(total["x"]) == 1.0 and float(comp["x"]) != 0.0
    # Carrying the compensation over later calls recovers the lost mass.
    for _ in range(10**2):
        total, comp = ju.kahan_summation(total, small, compensate=comp)
    ref = 1.0 + 103 * 1e-8
    assert abs(float(total["x"]) - ref) < abs(1.0 - ref)
    np.testing.assert_allclose(np.asarray(total["y"][0], np.float64), 1e8 + 103, rtol=0, atol=8)
    single, c = ju.kahan_summation(a)
    assert single is a and float(c["x"]) == 0.0


def test_kahan_empty_trees_sum_to_empty_trees():
    assert ju.kahan_summation({}, {}) == ({}, {})
    assert ju.kahan_summation((), (), compensate=()) == ((), ())


def test_kahan_infinite_sum_stays_infinite_and_drops_the_compensation():
    big = np.float32(3e38)
    total, comp = ju.kahan_summation(jnp.float32(big), jnp.float32(big))
    assert np.isposinf(total) and float(comp) == 0.0
    total, comp = ju.kahan_summation(total, jnp.float32(1.0), compensate=comp)
    assert np.isposinf(total) and float(comp) == 0.0  # not NaN
    ints, c = ju.kahan_summation(jnp.array([1, 2]), jnp.array([3, 4]))
    np.testing.assert_array_equal(ints, [4, 6])
    assert c.dtype == ints.dtype


def test_kahan_errors():
    with pytest.raises(ValueError, match="at least one summand"):
        ju.kahan_summation()
    with pytest.raises(
        ValueError,
        match=r"tree #1 .*first difference at \['b'\]: expected leaf of type float, got tuple node",
    ):
        ju.kahan_summation({"a": 1.0, "b": 2.0}, {"a": 1.0, "b": (2.0,)})
    with pytest.raises(ValueError, match=r"tree #1 does not match .*<root>"):
        ju.kahan_summation({"a": 1.0}, compensate={"z": 0.0})


# ---------------------------------------------------------------------------
# key_chain
# ---------------------------------------------------------------------------


def _kups_reference_keys(rng, shape, count):
    """kUPS's documented derivation, written out with NumPy-side bookkeeping:
    split once into prod(shape) base keys, then fold each with the step."""
    base = jax.random.split(rng, int(np.prod(shape)))
    out = []
    for i in range(count):
        folded = [jax.random.fold_in(b, np.uint32(i)) for b in base]
        out.append(jnp.stack(folded).reshape(tuple(shape) + folded[0].shape))
    return out


def test_key_chain_is_deterministic_and_matches_kups_derivation():
    rng = jax.random.key(42)
    first = [k for _, k in zip(range(4), ju.key_chain(rng))]
    again = [k for _, k in zip(range(4), ju.key_chain(rng))]
    for k1, k2, ref in zip(first, again, _kups_reference_keys(rng, (), 4)):
        assert k1.shape == ()
        np.testing.assert_array_equal(jax.random.key_data(k1), jax.random.key_data(ref))
        np.testing.assert_array_equal(jax.random.key_data(k2), jax.random.key_data(ref))
    datas = {tuple(np.asarray(jax.random.key_data(k)).tolist()) for k in first}
    assert len(datas) == 4
    assert tuple(np.asarray(jax.random.key_data(rng)).tolist()) not in datas
    # Same numbers as kUPS for a seeded draw.
    np.testing.assert_array_equal(
        jax.random.normal(first[1], (3,)),
        jax.random.normal(_kups_reference_keys(rng, (), 2)[1], (3,)),
    )


def test_key_chain_batches_and_raw_keys():
    rng = jax.random.PRNGKey(0)
    chain = ju.key_chain(rng, shape=(2, 3))
    item0, item1 = next(chain), next(chain)
    assert item0.shape == (2, 3, 2)
    np.testing.assert_array_equal(item1, _kups_reference_keys(rng, (2, 3), 2)[1])
    samples = jax.random.normal(jax.random.wrap_key_data(item0.reshape(-1, 2)[0]), ())
    assert np.isfinite(samples)
    typed = next(ju.key_chain(jax.random.key(0), shape=(4,)))
    assert typed.shape == (4,) and jnp.issubdtype(typed.dtype, jax.dtypes.prng_key)
    raw_single = next(ju.key_chain(rng))
    assert raw_single.shape == (2,)
    np.testing.assert_array_equal(raw_single, _kups_reference_keys(rng, (), 1)[0])


def test_key_chain_errors():
    with pytest.raises(TypeError, match="rng must be a JAX PRNG key array, got int"):
        ju.key_chain(0)
    with pytest.raises(
        ValueError, match=r"rng must be a single key, got key array of shape \(2,\)"
    ):
        ju.key_chain(jax.random.split(jax.random.key(0), 2))
    with pytest.raises(ValueError, match="typed key .* or a raw uint32 key"):
        ju.key_chain(jnp.ones(2))
    with pytest.raises(TypeError, match="shape must be a sequence of ints"):
        ju.key_chain(jax.random.key(0), shape=(1.5,))
    with pytest.raises(ValueError, match=r"shape must be non-negative, got \(-1,\)"):
        ju.key_chain(jax.random.key(0), shape=(-1,))


# ---------------------------------------------------------------------------
# non_differentiable
# ---------------------------------------------------------------------------


def test_non_differentiable_identity_and_blocks_derivatives():
    x = jnp.array([1.0, 2.0])
    tree = {"a": x, "b": (x * 2,)}
    out = ju.non_differentiable(tree)
    np.testing.assert_array_equal(out["b"][0], x * 2)
    np.testing.assert_array_equal(jax.jit(ju.non_differentiable)(x), x)
    np.testing.assert_array_equal(
        jax.vmap(ju.non_differentiable)(jnp.ones((3, 2))), np.ones((3, 2))
    )
    with pytest.raises(NotImplementedError, match="not differentiable"):
        jax.grad(lambda v: ju.non_differentiable(v).sum())(x)
    with pytest.raises(NotImplementedError):
        jax.jvp(ju.non_differentiable, (x,), (x,))
    # Differentiating with respect to something else is fine.
    g = jax.grad(lambda w, v: (ju.non_differentiable(v) * w).sum())(x, x * 3)
    np.testing.assert_array_equal(g, x * 3)


# ---------------------------------------------------------------------------
# sequential_vmap_with_vjp
# ---------------------------------------------------------------------------


def _element(params, x):
    return jnp.tanh(params["w"] @ x + params["b"]).sum()


def test_sequential_vmap_matches_vmap_values_and_gradients():
    rng = np.random.default_rng(2)
    params = {
        "w": jnp.asarray(rng.normal(size=(5, 3, 4)), jnp.float32),
        "b": jnp.asarray(rng.normal(size=(5, 3)), jnp.float32),
    }
    xs = jnp.asarray(rng.normal(size=(5, 4)), jnp.float32)
    seq = jax.vmap(ju.sequential_vmap_with_vjp(_element))
    np.testing.assert_allclose(seq(params, xs), jax.vmap(_element)(params, xs), rtol=1e-6)

    def loss(fn, p, x):
        return (fn(p, x) ** 2).sum()

    ours = jax.grad(functools.partial(loss, seq), argnums=(0, 1))(params, xs)
    ref = jax.grad(functools.partial(loss, jax.vmap(_element)), argnums=(0, 1))(params, xs)
    for u, v in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(ref)):
        np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)
    jitted = jax.jit(jax.grad(functools.partial(loss, seq)))(params, xs)
    np.testing.assert_allclose(jitted["w"], ref[0]["w"], rtol=1e-5, atol=1e-6)
    assert ju.sequential_vmap_with_vjp(_element).__name__ == "_element"


def test_sequential_vmap_outside_vmap_calls_the_function_directly():
    calls = []

    def f(x):
        calls.append(x.shape)
        return jnp.sin(x).sum()

    seq = ju.sequential_vmap_with_vjp(f)
    x = jnp.arange(6.0).reshape(3, 2)
    np.testing.assert_allclose(seq(x), np.sin(np.arange(6.0)).sum(), rtol=1e-6)  # no loop
    assert calls == [(3, 2)]
    np.testing.assert_allclose(jax.grad(seq)(x), np.cos(np.arange(6.0)).reshape(3, 2), rtol=1e-6)
    # Outside vmap there is no loop in the program; under vmap there is one (a scan).
    assert "scan" not in str(jax.make_jaxpr(seq)(x))
    assert "scan" in str(jax.make_jaxpr(jax.vmap(seq))(x))


def test_sequential_vmap_with_unbatched_arguments_and_gradients():
    seq = ju.sequential_vmap_with_vjp(lambda x, w: jnp.sin(x) * w)
    x = jnp.arange(6.0).reshape(3, 2)
    w = jnp.array([1.0, 2.0])
    out = jax.vmap(seq, in_axes=(0, None))(x, w)
    np.testing.assert_allclose(out, np.sin(np.arange(6.0)).reshape(3, 2) * [1.0, 2.0], rtol=1e-6)
    gx, gw = jax.grad(lambda x, w: jax.vmap(seq, in_axes=(0, None))(x, w).sum(), argnums=(0, 1))(
        x, w
    )
    np.testing.assert_allclose(gx, np.cos(np.arange(6.0)).reshape(3, 2) * [1.0, 2.0], rtol=1e-6)
    np.testing.assert_allclose(gw, np.sin(np.arange(6.0)).reshape(3, 2).sum(0), rtol=1e-5)


def test_sequential_vmap_runs_functions_without_batching_rules():
    def host_square(x):
        return jax.pure_callback(lambda v: np.square(v), jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    f = jax.vmap(ju.sequential_vmap_with_vjp(lambda x, n: host_square(x) * n))
    xs = jnp.arange(6.0).reshape(3, 2)
    ref = (np.arange(6.0).reshape(3, 2) ** 2) * np.arange(3)[:, None]
    np.testing.assert_allclose(f(xs, jnp.arange(3)), ref)
    np.testing.assert_allclose(jax.jit(f)(xs, jnp.arange(3)), ref)


def test_sequential_vmap_errors():
    with pytest.raises(TypeError, match="expects a callable, got int"):
        ju.sequential_vmap_with_vjp(1)
    f = jax.vmap(ju.sequential_vmap_with_vjp(lambda a, b: a + b))
    with pytest.raises(ValueError, match="inconsistent sizes"):
        f(jnp.ones(3), jnp.ones(2))

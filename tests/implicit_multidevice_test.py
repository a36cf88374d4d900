"""jaxcore.implicit with shard_map on 8 (fake CPU) devices: implicit operands are materialized."""

import warnings

import implicit_test_util
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jaxcore.implicit as ji
from jaxcore.implicit import implicit, register

pytestmark = pytest.mark.multiaccelerator


Scaled = implicit_test_util.scaled_class()


@register("mul")
def _scaled_mul(x: Scaled, y: jax.Array, **params):
    return Scaled(x.value * y, scale=x.scale)


def _mesh():
    if len(jax.devices()) < 8:
        pytest.skip(f"needs 8 devices, found {len(jax.devices())}")
    return jax.make_mesh((8,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))


def _sharded_product(mesh):
    return jax.shard_map(
        lambda p, q: p * q + jax.lax.psum(jnp.sum(p), "x"),
        mesh=mesh,
        in_specs=(P("x"), P("x")),
        out_specs=P("x"),
    )


def test_shard_map_materializes_implicit_operands():
    mesh = _mesh()
    v = jnp.arange(32.0).reshape(16, 2)
    y = jnp.linspace(-1.0, 1.0, 32).reshape(16, 2)
    s = Scaled(v, scale=0.5)
    want = _sharded_product(mesh)(v * 0.5, y)
    ji.reset_materialization_warnings()
    with pytest.warns(ji.MaterializationWarning, match="shard_map.*Scaled"):
        got = implicit(lambda a, b: _sharded_product(mesh)(a, b))(s, y)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(got, v * 0.5 * y + np.sum(v * 0.5), rtol=1e-6)


def test_shard_map_under_jit_and_grad():
    mesh = _mesh()
    v = jnp.arange(16.0).reshape(8, 2)
    y = jnp.ones((8, 2))
    s = Scaled(v, scale=2.0)
    f = lambda a, b: jnp.sum(_sharded_product(mesh)(a * b, b))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ji.MaterializationWarning)
        got = jax.jit(implicit(f))(s, y)
        g = jax.grad(lambda b: implicit(f)(s, b))(y)
    want = f(v * 2.0, y)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(g, jax.grad(lambda b: f(v * 2.0, b))(y), rtol=1e-5)


def test_shard_map_without_implicit_operands_is_untouched():
    mesh = _mesh()
    v = jnp.arange(16.0).reshape(8, 2)
    s = Scaled(jnp.ones((8, 2)), scale=3.0)
    f = lambda a, b: a * _sharded_product(mesh)(b, b)
    got = implicit(f)(s, v)
    assert isinstance(got, Scaled)
    np.testing.assert_allclose(got.materialize(), 3.0 * _sharded_product(mesh)(v, v), rtol=1e-6)

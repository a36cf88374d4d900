"""jaxcore.kernels.quantized_matmul inside shard_map on 8 (fake CPU) devices.

The product is a primitive with its own abstract evaluation, so its result must vary
over the manual mesh axes like the activations do, under Auto and Explicit meshes, in
the forward pass, the gradient and a jvp.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxcore import kernels
from jaxcore.quant import ArrayInt8, ArrayNF4

pytestmark = pytest.mark.multiaccelerator


def _mesh(axis_type):
    if jax.device_count() < 8:
        pytest.skip(f"needs 8 devices, found {jax.device_count()}")
    return jax.make_mesh((8,), ("x",), axis_types=(axis_type,))


@pytest.mark.parametrize("axis_type", [jax.sharding.AxisType.Auto, jax.sharding.AxisType.Explicit])
@pytest.mark.parametrize("quantize", [ArrayNF4.quantize, ArrayInt8.quantize], ids=["nf4", "int8"])
def test_data_parallel_product_gradient_and_jvp(axis_type, quantize):
    rng = np.random.default_rng(0)
    q = quantize(jnp.asarray(rng.standard_normal((128, 16)), jnp.float32))
    w = np.asarray(q.materialize(), np.float64)
    x_np = rng.standard_normal((16, 128)).astype(np.float32)
    mesh = _mesh(axis_type)
    x = jax.device_put(x_np, NamedSharding(mesh, P("x")))
    product = jax.shard_map(
        lambda x: kernels.quantized_matmul(x, q), mesh=mesh, in_specs=P("x"), out_specs=P("x")
    )

    np.testing.assert_allclose(np.asarray(jax.jit(product)(x)), x_np @ w, rtol=1e-4, atol=1e-4)
    # d/dx sum((x @ W)^2) = 2 (x @ W) @ W.T
    grad = jax.jit(jax.grad(lambda x: jnp.sum(product(x) ** 2)))(x)
    np.testing.assert_allclose(np.asarray(grad), 2 * (x_np @ w) @ w.T, rtol=1e-3, atol=1e-3)
    # The product is linear in x: its jvp along v is v @ W.
    _, tangent = jax.jit(lambda x, v: jax.jvp(product, (x,), (v,)))(x, x)
    np.testing.assert_allclose(np.asarray(tangent), x_np @ w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("axis_type", [jax.sharding.AxisType.Auto, jax.sharding.AxisType.Explicit])
def test_empty_shards_give_empty_products_that_vary(axis_type):
    # An empty batch splits into empty shards: the product is zeros (no kernel runs), and
    # varies over the mesh axis like the activations, in the forward pass and the gradient.
    q = ArrayInt8.quantize(jnp.ones((128, 16), jnp.float32))
    mesh = _mesh(axis_type)
    x = jax.device_put(np.zeros((0, 128), np.float32), NamedSharding(mesh, P("x")))
    product = jax.shard_map(
        lambda x: kernels.quantized_matmul(x, q), mesh=mesh, in_specs=P("x"), out_specs=P("x")
    )
    with jax.set_mesh(mesh):
        y = jax.jit(product)(x)
        grad = jax.jit(jax.grad(lambda x: jnp.sum(product(x))))(x)
    assert y.shape == (0, 16) and y.dtype == jnp.float32
    assert grad.shape == (0, 128)

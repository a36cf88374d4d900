"""Partitioning helpers: ResourceAxis, set_mesh, round_axis_for_partitioning, and meshes
installed by JAX's classic ``with mesh:`` honored by named_jit, shard and friends."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

import jaxcore.named as hax

pytestmark = pytest.mark.multiaccelerator

Batch, Embed = hax.make_axes(batch=8, embed=4)


@pytest.fixture(scope="module")
def mesh():
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices (tests/conftest.py provides 8 fake CPU devices)")
    return jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto, AxisType.Auto))


def _classic(mesh):
    """JAX's deprecated ``with mesh:`` block (warning silenced: it is what we test)."""
    if not hasattr(type(mesh), "__enter__"):
        pytest.skip("this JAX release has no classic 'with mesh:' context")
    warnings.filterwarnings("ignore", message=".*with mesh.*", category=DeprecationWarning)
    return mesh


def test_resource_axis_names_are_strings():
    assert hax.partitioning.ResourceAxis.DATA == "data"
    assert hax.ResourceAxis.MODEL == "model" and hax.ResourceAxis.REPLICA == "replica"
    assert {hax.ResourceAxis.DATA: 1}["data"] == 1


def test_named_jit_inside_classic_with_mesh(mesh):
    raw = np.arange(32, dtype=np.float32).reshape(8, 4)
    x = hax.named(jnp.asarray(raw), (Batch, Embed))
    f = hax.named_jit(lambda a: a * 2, axis_resources={"batch": "data", "embed": "model"})
    with warnings.catch_warnings(), _classic(mesh):
        assert dict(hax.partitioning.get_mesh().shape) == dict(mesh.shape)
        y = f(x)
    np.testing.assert_array_equal(np.asarray(y.array), raw * 2)
    assert y.array.sharding.spec == P("data", "model")
    assert hax.partitioning.get_mesh() is None


def test_shard_and_physical_axis_size_inside_classic_with_mesh(mesh):
    x = hax.named(jnp.ones((8, 4)), (Batch, Embed))
    with warnings.catch_warnings(), _classic(mesh), hax.axis_mapping({"batch": "data"}):
        y = hax.shard(x)
        assert hax.partitioning.physical_axis_size(Batch) == 4
    assert y.array.sharding.spec in (P("data"), P("data", None))


def test_set_mesh_is_jax_set_mesh(mesh):
    with hax.partitioning.set_mesh(mesh):
        assert hax.partitioning.get_mesh().shape == mesh.shape
        assert hax.round_axis_for_partitioning(
            hax.Axis("batch", 10), {"batch": "data"}
        ) == hax.Axis("batch", 12)
    with pytest.raises(TypeError, match="set_mesh needs a jax.sharding.Mesh"):
        hax.partitioning.set_mesh("data")


def test_round_axis_for_partitioning(mesh):
    ax = hax.Axis("vocab", 50)
    m = {"vocab": ("data", "model")}
    assert hax.round_axis_for_partitioning(ax, m, mesh) == hax.Axis("vocab", 56)
    assert hax.round_axis_for_partitioning(hax.Axis("vocab", 48), m, mesh).size == 48
    assert hax.round_axis_for_partitioning(ax, {}, mesh) is ax  # unmapped: unchanged
    with pytest.raises(ValueError, match="'vocab'.*no mesh"):
        hax.round_axis_for_partitioning(ax, m)


def test_no_mesh_error_names_the_remedy():
    x = hax.named(jnp.ones((8, 4)), (Batch, Embed))
    with pytest.raises(ValueError, match="shard needs a mesh"):
        hax.shard(x, {"batch": "data"})


def test_infer_resource_partitions(mesh):
    weight = hax.named(jnp.ones((8, 4)), (Batch, Embed))
    model = {"w": weight, "raw": jnp.ones(3), "n": 1}
    parts = hax.partitioning.infer_resource_partitions(model, {"embed": "model"}, mesh=mesh)
    assert isinstance(parts["w"], hax.NamedArray) and parts["w"].axes == weight.axes
    assert parts["w"].array.spec == P(None, "model") and parts["raw"].spec == P()
    assert parts["n"] is None
    placed = jax.device_put({"w": weight}, {"w": parts["w"]})
    assert placed["w"].array.sharding.spec == P(None, "model")
    with hax.partitioning.set_mesh(mesh), hax.axis_mapping({"batch": "data"}):
        assert hax.partitioning.infer_resource_partitions(weight).array.spec == P("data")
    with pytest.raises(ValueError, match="infer_resource_partitions needs a mesh"):
        hax.partitioning.infer_resource_partitions(model)

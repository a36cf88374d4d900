"""Named sharding on 8 fake CPU devices: axis_mapping, pspec_for, shard, named_jit, fsdp."""

import re
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxcore.named as hax
import jaxcore.tree as jtree

pytestmark = pytest.mark.multiaccelerator

Batch, Embed, Hidden = hax.make_axes(batch=8, embed=4, hidden=6)


@pytest.fixture(scope="module")
def mesh():
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices (tests/conftest.py provides 8 fake CPU devices)")
    return jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto, AxisType.Auto))


def _x():
    raw = np.arange(32, dtype=np.float32).reshape(8, 4)
    return raw, hax.NamedArray(jnp.asarray(raw), (Batch, Embed))


def test_axis_mapping_nests_merges_and_restores():
    assert hax.current_axis_mapping() == {}
    with hax.axis_mapping({"batch": "data"}) as m:
        assert m == {"batch": "data"} == hax.current_axis_mapping()
        with hax.axis_mapping(embed="model", merge=True):
            assert hax.current_axis_mapping() == {"batch": "data", "embed": "model"}
        with hax.axis_mapping({Embed: ["data", "model"]}):
            assert hax.current_axis_mapping() == {"embed": ("data", "model")}
        assert hax.current_axis_mapping() == {"batch": "data"}
    with pytest.raises(RuntimeError), hax.axis_mapping(batch="data"):
        raise RuntimeError("boom")
    assert hax.current_axis_mapping() == {}

    seen = []
    with hax.axis_mapping(batch="data"):
        t = threading.Thread(target=lambda: seen.append(hax.current_axis_mapping()))
        t.start()
        t.join()
    assert seen == [{}]  # the mapping is thread-local


def test_pspec_for():
    _, x = _x()
    mapping = {"batch": "data", "hidden": "model"}
    assert hax.pspec_for(x, mapping) == P("data")
    assert hax.pspec_for((Embed, Batch), mapping) == P(None, "data")
    assert hax.pspec_for(("embed", "hidden"), mapping) == P(None, "model")
    assert hax.pspec_for(Hidden, mapping) == P("model")
    assert hax.pspec_for(x, {"embed": ("data", "model")}) == P(None, ("data", "model"))
    tree = {"x": x, "raw": jnp.ones(3), "n": 3}
    # Haliax's rules for other leaves: unsharded arrays replicated, scalars and numbers P()
    tree = {"x": x, "raw": jnp.ones(3), "s": jnp.ones(()), "n": 3, "name": "w"}
    assert hax.pspec_for(tree, mapping) == {
        "x": P("data"),
        "raw": P(None),
        "s": P(),
        "n": P(),
        "name": None,
    }
    with hax.axis_mapping(embed="model"):
        assert hax.pspec_for(x) == P(None, "model")
    assert hax.physical_axis_name("batch", mapping) == "data"
    assert hax.physical_axis_name(Embed, mapping) is None


def test_shard_places_named_leaves(mesh):
    raw, x = _x()
    out = hax.shard({"x": x, "raw": jnp.ones(3)}, {"batch": "data", "embed": "model"}, mesh)
    assert out["x"].axes == x.axes
    assert out["x"].array.sharding == NamedSharding(mesh, P("data", "model"))
    assert out["raw"].sharding == jnp.ones(3).sharding  # untouched
    np.testing.assert_array_equal(np.asarray(out["x"].array), raw)
    # the mesh can come from jax.set_mesh and the mapping from axis_mapping
    with jax.set_mesh(mesh), hax.axis_mapping(batch=("data", "model")):
        y = hax.shard(x)
    assert y.array.sharding.spec == P(("data", "model"))
    # no mapping: nothing to do
    assert hax.shard(x) is x


def test_shard_under_jit_constrains_layout(mesh):
    raw, x = _x()

    @jax.jit
    def f(a):
        return hax.shard(a * 2, {"embed": "model"}, mesh)

    out = f(x)
    assert out.array.sharding.spec == P(None, "model")
    np.testing.assert_array_equal(np.asarray(out.array), raw * 2)


def test_shard_with_explicit_mesh_axes_uses_reshard():
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices")
    explicit = jax.make_mesh(
        (4, 2), ("data", "model"), axis_types=(AxisType.Explicit, AxisType.Explicit)
    )
    raw, x = _x()
    with jax.set_mesh(explicit):
        x = hax.shard(x, {"batch": "data"})
        out = jax.jit(lambda a: hax.shard(a + 1, {"batch": "data", "embed": "model"}))(x)
    assert out.array.sharding.spec == P("data", "model")
    np.testing.assert_array_equal(np.asarray(out.array), raw + 1)


def test_named_jit_in_out_and_compute_mappings(mesh):
    raw, x = _x()
    w = hax.NamedArray(jnp.ones((4, 6)), (Embed, Hidden))
    inside = []

    def layer(a, b, scale):
        inside.append(hax.current_axis_mapping())
        return hax.dot(a, b, axis=Embed) * scale

    f = hax.named_jit(
        layer,
        axis_resources={"batch": "data", "hidden": "model"},
        in_axis_resources={"batch": "data"},
    )
    with jax.set_mesh(mesh):
        out = f(x, w, 2.0)
        out_again = f(x, w, 2.0)
        out3 = f(x, w, 3.0)
    assert inside == [{"batch": "data", "hidden": "model"}] * 2  # traced once per static value
    assert out.axes == (Batch, Hidden)
    assert out.array.sharding.spec == P("data", "model")  # out defaults to the compute mapping
    np.testing.assert_allclose(np.asarray(out.array), raw @ np.ones((4, 6)) * 2.0)
    np.testing.assert_allclose(np.asarray(out_again.array), np.asarray(out.array))
    np.testing.assert_allclose(np.asarray(out3.array), raw @ np.ones((4, 6)) * 3.0)

    g = hax.named_jit(out_axis_resources={"hidden": "model"})(
        lambda a, b: hax.dot(a, b, axis=Embed)
    )
    with jax.set_mesh(mesh):
        out = g(x, w)
    assert out.array.sharding.spec == P(None, "model")


def test_named_jit_uses_context_mapping_and_fsdp(mesh):
    raw, x = _x()
    f = hax.named_jit(lambda a: a + 1)
    with jax.set_mesh(mesh), hax.axis_mapping(batch="data"):
        out = f(x)
    assert out.array.sharding.spec == P("data")
    np.testing.assert_array_equal(np.asarray(out.array), raw + 1)

    @hax.fsdp({"embed": "model"}, {"batch": "data"})
    def step(a):
        assert hax.current_axis_mapping() == {"batch": "data"}
        return a * 3

    with jax.set_mesh(mesh):
        out = step(x)
    assert out.array.sharding.spec == P(None, "model")
    np.testing.assert_array_equal(np.asarray(out.array), raw * 3)
    direct = hax.fsdp(lambda a: a - 1, {"embed": "model"}, {"batch": "data"})
    with jax.set_mesh(mesh):
        assert direct(x).array.sharding.spec == P(None, "model")


def test_named_jit_donation(mesh):
    _, x = _x()
    keep = hax.NamedArray(jnp.ones((8, 4)), (Batch, Embed))
    f = hax.named_jit(lambda a, b: a + b, donate_args=(True, False))
    donated = hax.NamedArray(x.array + 0, x.axes)
    out = f(donated, keep)
    np.testing.assert_array_equal(np.asarray(out.array), np.asarray(x.array) + 1)
    assert donated.array.is_deleted() and not keep.array.is_deleted()
    by_fn = hax.named_jit(lambda a, b: a * b, donate_kwargs=lambda leaf: True)
    kw = hax.NamedArray(x.array + 0, x.axes)
    by_fn(keep, b=kw)
    assert kw.array.is_deleted() and not keep.array.is_deleted()


def test_axis_size_helpers(mesh):
    mapping = {"batch": ("data", "model"), "embed": "model"}
    assert hax.physical_axis_size("batch", mapping, mesh) == 8
    assert hax.physical_axis_size(Embed, mapping, mesh) == 2
    assert hax.physical_axis_size("hidden", mapping, mesh) is None
    assert hax.round_axis_for_partitioning(hax.Axis("embed", 5), mapping, mesh) == hax.Axis(
        "embed", 6
    )
    assert hax.round_axis_for_partitioning(Hidden, mapping, mesh) == Hidden
    assert hax.sharding_for_axis(
        (Batch, Embed), {"batch": "data", "embed": "model"}, mesh
    ) == NamedSharding(mesh, P("data", "model"))
    with jax.set_mesh(mesh):
        assert hax.sharding_for_axis("embed", mapping).spec == P("model")


@pytest.mark.parametrize(
    "call, exc, message",
    [
        (lambda m, x: hax.axis_mapping(batch=3).__enter__(), TypeError, "Axis 'batch' maps to 3"),
        (
            lambda m, x: hax.axis_mapping({1: "data"}).__enter__(),
            TypeError,
            "keys must be axis names",
        ),
        (
            lambda m, x: hax.pspec_for(x, {"batch": "data", "embed": "data"}),
            ValueError,
            "Mesh axis 'data' is used by both 'batch' and 'embed'",
        ),
        (lambda m, x: hax.shard(x, {"batch": "data"}), ValueError, "shard needs a mesh"),
        (
            lambda m, x: hax.shard(
                hax.NamedArray(jnp.ones((6,)), (hax.Axis("batch", 6),)), {"batch": "data"}, m
            ),
            ValueError,
            "Axis 'batch' of size 6 cannot be split into 4 shards",
        ),
        (
            lambda m, x: hax.shard(x, {"batch": "pipe"}, m),
            ValueError,
            "maps to mesh axis 'pipe', which the mesh",
        ),
        (
            lambda m, x: hax.shard(x, {"batch": "data"}, m.abstract_mesh),
            ValueError,
            "needs a concrete Mesh",
        ),
        (
            lambda m, x: hax.physical_axis_size("batch", {"batch": "data"}),
            ValueError,
            "there is no mesh",
        ),
        (
            lambda m, x: hax.physical_axis_size("batch", {"batch": "pipe"}, m),
            ValueError,
            "Mesh axis 'pipe'",
        ),
        (
            lambda m, x: hax.sharding_for_axis("batch", {"batch": "data"}),
            ValueError,
            "needs a mesh",
        ),
        (
            lambda m, x: hax.named_jit(lambda a: a, in_shardings=None),
            TypeError,
            "computes in_shardings itself",
        ),
        (
            lambda m, x: hax.named_jit(lambda a, n: a)(x, {1, 2}),
            TypeError,
            "non-array arguments must be hashable",
        ),
        (
            lambda m, x: hax.named_jit(lambda a: a, donate_args=(True, True))(x),
            ValueError,
            "donate_args does not match the structure",
        ),
        (
            lambda m, x: hax.fsdp(lambda a: a, {"batch": "data"}),
            TypeError,
            "needs both parameter_mapping",
        ),
    ],
)
def test_errors(mesh, call, exc, message):
    _, x = _x()
    with pytest.raises(exc, match=re.escape(message)):
        call(mesh, x)


@jtree.dataclass
class _PlainArrays:
    w: jax.Array = hax.field(axis_names=("batch", "hidden"))
    b: jax.Array = hax.field()
    tag: str = hax.field(static=True, default="t")


@jtree.dataclass
class _Outer:
    inner: _PlainArrays
    x: hax.NamedArray


def test_field_axis_names_shard_plain_arrays():
    f = hax.field(axis_names=("batch",))
    assert f.metadata["axis_names"] == ("batch",)
    assert hax.field().metadata["axis_names"] is None
    with pytest.raises(ValueError, match="axis_names cannot be given for a static field"):
        hax.field(static=True, axis_names=("batch",))
    _, x = _x()
    mod = _Outer(_PlainArrays(jnp.ones((4, 6)), jnp.ones(6)), x)
    mapping = {"batch": "data", "hidden": "model"}
    specs = hax.pspec_for(mod, mapping)
    assert type(specs) is _Outer and type(specs.inner) is _PlainArrays
    assert specs.inner.w == P("data", "model")
    assert specs.inner.b == P(None)
    assert specs.inner.tag == "t"
    assert specs.x == P("data")
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("data", "model"))
    shardings = hax.partitioning.infer_resource_partitions(mod, mapping, mesh=mesh)
    assert shardings.inner.w == jax.sharding.NamedSharding(mesh, P("data", "model"))
    assert shardings.inner.b == jax.sharding.NamedSharding(mesh, P())


def test_named_jit_lower():
    f = hax.named_jit(lambda a, b: a @ b)
    lowered = f.lower(jnp.zeros((2, 3)), jnp.zeros((3, 4)))
    assert "dot" in lowered.as_text()
    np.testing.assert_array_equal(f(jnp.ones((2, 3)), jnp.ones((3, 4))), np.full((2, 4), 3.0))

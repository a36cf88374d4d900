"""Multi-device tests (8 fake CPU devices): jaxcore.utils.shard_map / jit with
jaxcore.tree dataclasses and helpers inside sharded computations."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxcore import tree as jt
from jaxcore import utils as ju

pytestmark = pytest.mark.multiaccelerator

N_DEVICES = 8


@jt.dataclass
class Batch:
    x: jax.Array
    y: jax.Array
    scale: float = jt.field(default=2.0, static=True)


@pytest.fixture(scope="module")
def mesh():
    if jax.device_count() < N_DEVICES:
        pytest.skip(f"needs {N_DEVICES} devices, have {jax.device_count()}")
    return jax.make_mesh((N_DEVICES,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))


@pytest.fixture(scope="module")
def explicit_mesh(mesh):
    return jax.make_mesh((N_DEVICES,), ("x",), axis_types=(jax.sharding.AxisType.Explicit,))


def _batch():
    x = np.arange(16 * 3, dtype=np.float32).reshape(16, 3)
    return Batch(jnp.asarray(x), jnp.asarray(-x[:, 0]))


def test_shard_map_over_dataclass_matches_numpy(mesh):
    b = _batch()

    @functools.partial(ju.shard_map, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    def per_shard(batch):
        assert batch.x.shape == (16 // N_DEVICES, 3)  # a shard, not the whole array
        return Batch(batch.x * batch.scale, batch.y + 1, scale=batch.scale)

    out = per_shard(b)
    assert isinstance(out, Batch) and out.scale == 2.0
    np.testing.assert_allclose(out.x, np.asarray(b.x) * 2.0)
    np.testing.assert_allclose(out.y, np.asarray(b.y) + 1)


def test_shard_map_collective_and_grad(mesh):
    b = _batch()

    def total(batch):
        partial_sum = jnp.sum(batch.x**2) + jnp.sum(batch.y)
        return jax.lax.psum(partial_sum, "x")

    sharded_total = ju.shard_map(total, mesh=mesh, in_specs=(P("x"),), out_specs=P())
    ref = np.sum(np.asarray(b.x, np.float64) ** 2) + np.sum(np.asarray(b.y, np.float64))
    np.testing.assert_allclose(float(sharded_total(b)), ref, rtol=1e-6)
    g = jax.jit(jax.grad(sharded_total))(b)
    np.testing.assert_allclose(g.x, 2 * np.asarray(b.x), rtol=1e-6)
    np.testing.assert_allclose(g.y, np.ones(16), rtol=1e-6)


def test_shard_map_infers_in_specs_from_explicit_shardings(explicit_mesh):
    b = jax.device_put(_batch(), NamedSharding(explicit_mesh, P("x")))
    doubled = ju.shard_map(
        lambda t: jt.tree_map(lambda v: v * 2, t), mesh=explicit_mesh, out_specs=P("x")
    )(b)
    np.testing.assert_allclose(doubled.x, 2 * np.asarray(_batch().x))


def test_tree_helpers_inside_shard_map(mesh):
    b = _batch()
    accept = jnp.arange(16) % 3 == 0

    @functools.partial(ju.shard_map, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"))
    def select_and_stack(mask, batch):
        chosen = jt.tree_where_broadcast_last(mask, batch, jt.tree_zeros_like(batch))
        return jt.tree_stack(chosen, batch).x  # (2, shard, 3) -> stacked per shard

    out = select_and_stack(accept, b)
    x = np.asarray(b.x)
    # Per shard the stack axis is leading; shards are concatenated along axis 0.
    shards = np.split(x, N_DEVICES)
    masks = np.split(np.asarray(accept), N_DEVICES)
    ref = np.concatenate(
        [np.stack([np.where(m[:, None], s, 0.0), s]) for s, m in zip(shards, masks)]
    )
    np.testing.assert_allclose(out, ref)


def test_kahan_summation_with_sharded_operands(mesh):
    terms = np.concatenate([[1e4], np.full(N_DEVICES * 4 - 1, 1e-4)]).astype(np.float32)

    # all_gather results are replicated but not provably so: check_vma=False.
    @functools.partial(ju.shard_map, mesh=mesh, in_specs=P("x"), out_specs=P(), check_vma=False)
    def reduce(local):
        s, c = local[0], jnp.zeros((), local.dtype)
        for i in range(1, local.shape[0]):
            s, c = ju.kahan_summation(s, local[i], compensate=c)
        # Sum shard totals (and compensations) across devices.
        totals = jax.lax.all_gather(s, "x")
        comps = jax.lax.all_gather(c, "x")
        out, comp = totals[0], comps[0]
        for i in range(1, N_DEVICES):
            out, comp = ju.kahan_summation(out, totals[i] - comps[i], compensate=comp)
        return out

    exact = np.sum(terms.astype(np.float64))
    naive = np.float32(0.0)
    for t in terms:  # sequential float32 accumulation, as a loop would do
        naive = np.float32(naive + t)
    naive_err = abs(float(naive) - exact)
    kahan_err = abs(float(reduce(terms)) - exact)
    assert naive_err > 2e-3  # every 1e-4 term is rounded away at 1e4 in float32
    assert kahan_err < 1e-3  # within about one float32 ulp of 1e4


def test_jit_wrapper_with_named_shardings(mesh):
    sharding = NamedSharding(mesh, P("x"))
    f = ju.jit(
        lambda batch: jt.tree_map(jnp.negative, batch),
        in_shardings=sharding,
        out_shardings=sharding,
    )
    out = f(_batch())
    assert out.x.sharding.is_equivalent_to(sharding, 2)
    np.testing.assert_allclose(out.x, -np.asarray(_batch().x))


def test_shard_map_rejects_non_callable(mesh):
    with pytest.raises(TypeError, match="shard_map expects a callable to transform, got list"):
        ju.shard_map([], mesh=mesh, in_specs=P("x"), out_specs=P("x"))

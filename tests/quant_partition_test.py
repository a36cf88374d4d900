"""A sharded quantized weight under plain ``jit`` (GSPMD/Shardy, no ``shard_map``), on 8
(fake CPU) devices: each device runs the kernel on its own shard, as XLA's dense ``dot``
does, instead of gathering the weight, and the result equals the dense product.

Tensor parallelism splits a weight's columns (N: the result's columns split alike) or its
rows (K: partial products summed across devices); data parallelism splits the activations'
rows. Checked in the compiled program: no all-gather carries a weight (only results and
NF4's small double-quantized scale codes may be gathered).
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxcore.implicit import implicit
from jaxcore.quant import ArrayInt4, ArrayInt8, ArrayNF4
from jaxcore.quant._sharding import shard_like_logical

pytestmark = pytest.mark.multiaccelerator

K, N, M = 512, 256, 16

FORMATS = {
    "int8": lambda w: ArrayInt8.quantize(w),
    "int8-b32": lambda w: ArrayInt8.quantize(w, block_size=32),
    "int4": lambda w: ArrayInt4.quantize(w, block_size=64),
    # 16-bit scales go to the kernels as stored, split like float32 ones.
    "int4-f16": lambda w: ArrayInt4.quantize(w, block_size=64, scale_dtype="float16"),
    "int8-b32-bf16": lambda w: ArrayInt8.quantize(w, block_size=32, scale_dtype="bfloat16"),
    "nf4": lambda w: ArrayNF4.quantize(w, block_size=64),
    "nf4-dq": lambda w: ArrayNF4.quantize(w, block_size=64, double_quant=True),
    # Stored transposed (eformer's default grouping): x @ W runs the x @ S.T product.
    "int8-axis1": lambda w: ArrayInt8.quantize(w, axis=1, block_size=32),
}
AXIS_TYPES = {"auto": jax.sharding.AxisType.Auto, "explicit": jax.sharding.AxisType.Explicit}


def _mesh(kind: str):
    if jax.device_count() < 8:
        pytest.skip(f"needs 8 devices, found {jax.device_count()}")
    t = AXIS_TYPES[kind]
    return jax.make_mesh((2, 4), ("dp", "tp"), axis_types=(t, t))


def _data(seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((K, N)).astype(np.float32)
    x = rng.standard_normal((M, K)).astype(np.float32)
    return w, x


def _gathered(compiled_text: str) -> list[int]:
    """Element counts of every all-gather's result in a compiled program."""
    counts = []
    for line in compiled_text.splitlines():
        if "all-gather(" in line or "all-gather-start(" in line:
            shape = re.search(r"= \(?[a-z0-9]+\[([0-9,]*)\]", line)
            dims = [int(d) for d in shape.group(1).split(",") if d] if shape else []
            counts.append(int(np.prod(dims)) if dims else 1)
    return counts


def _assert_no_weight_gathered(compiled_text: str):
    # The smallest stored weight here (4-bit codes) has K * N / 2 elements; results have
    # M * max(K, N), NF4's scale codes K * N / 64.
    big = [c for c in _gathered(compiled_text) if c >= K * N // 8]
    assert not big, f"an all-gather of {big} elements (a weight) in:\n{compiled_text[:4000]}"


def _close(got, want, tol=1e-4):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.max(np.abs(want)))


@pytest.mark.parametrize("kind", sorted(AXIS_TYPES))
@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("wspec", [P(None, "tp"), P("tp", None)], ids=["split-n", "split-k"])
def test_sharded_weight_runs_on_its_shards(kind, fmt, wspec):
    mesh = _mesh(kind)
    w, x = _data()
    q = FORMATS[fmt](w)
    dense = np.asarray(q.materialize(), np.float64)
    qs = shard_like_logical(q, NamedSharding(mesh, wspec))
    xs = jax.device_put(jnp.asarray(x), NamedSharding(mesh, P("dp", None)))
    f = jax.jit(implicit(lambda x, w: x @ w))
    compiled = f.lower(xs, qs).compile().as_text()
    _assert_no_weight_gathered(compiled)
    if wspec == P("tp", None):
        assert "all-reduce" in compiled  # the partial products over K are summed
    y = f(xs, qs)
    _close(y, np.asarray(x, np.float64) @ dense)
    if wspec == P(None, "tp"):
        # Rows split like x's, columns like the weight's, as for a dense dot.
        assert tuple(y.sharding.spec) == ("dp", "tp")


@pytest.mark.parametrize("fmt", ["int8", "int4", "nf4-dq"])
@pytest.mark.parametrize("wspec", [P(None, "tp"), P("tp", None)], ids=["split-n", "split-k"])
def test_gradients_and_transposed_products_stay_on_shards(fmt, wspec):
    mesh = _mesh("auto")
    w, x = _data(1)
    q = FORMATS[fmt](w)
    dense = jnp.asarray(q.materialize())
    qs = shard_like_logical(q, NamedSharding(mesh, wspec))
    xs = jax.device_put(jnp.asarray(x), NamedSharding(mesh, P("dp", None)))
    c = np.random.default_rng(2).standard_normal((M, N)).astype(np.float32)

    def loss(x, w):
        return jnp.sum(jnp.tanh(x @ w) * c)

    grad = jax.jit(jax.grad(implicit(loss)))
    _assert_no_weight_gathered(grad.lower(xs, qs).compile().as_text())
    _close(grad(xs, qs), jax.grad(loss)(jnp.asarray(x), dense), tol=1e-3)
    # x @ W.T (tied embeddings) contracts over N.
    xt = np.random.default_rng(3).standard_normal((M, N)).astype(np.float32)
    xts = jax.device_put(jnp.asarray(xt), NamedSharding(mesh, P("dp", None)))
    ft = jax.jit(implicit(lambda a, w: a @ w.T))
    _assert_no_weight_gathered(ft.lower(xts, qs).compile().as_text())
    _close(ft(xts, qs), xt.astype(np.float64) @ np.asarray(dense, np.float64).T)


@pytest.mark.parametrize("kind", sorted(AXIS_TYPES))
def test_megatron_mlp_keeps_the_hidden_activations_split(kind):
    """Column-parallel up-projection, row-parallel down-projection: the hidden activations
    stay split over tp, and the one collective is the down-projection's sum."""
    mesh = _mesh(kind)
    rng = np.random.default_rng(4)
    up = ArrayInt4.quantize(rng.standard_normal((K, 4 * N)).astype(np.float32), block_size=64)
    down = ArrayInt4.quantize(rng.standard_normal((4 * N, K)).astype(np.float32), block_size=64)
    ups = up.with_mesh_and_axis((mesh, P(None, "tp")))  # eformer's spelling
    downs = shard_like_logical(down, NamedSharding(mesh, P("tp", None)))
    x = rng.standard_normal((M, K)).astype(np.float32)
    xs = jax.device_put(jnp.asarray(x), NamedSharding(mesh, P("dp", None)))
    f = jax.jit(implicit(lambda x, a, b: jax.nn.gelu(x @ a) @ b))
    compiled = f.lower(xs, ups, downs).compile().as_text()
    assert not _gathered(compiled), compiled[:4000]
    want = jax.nn.gelu(x @ up.materialize()) @ down.materialize()
    y = f(xs, ups, downs)
    _close(y, want, tol=1e-3)
    assert tuple(y.sharding.spec)[:1] == ("dp",)


def test_activations_split_along_k_meet_a_whole_weight():
    """x split along K (a column-parallel layer's output) times a replicated weight: x is
    gathered (the small operand), the weight stays whole, the result is right."""
    mesh = _mesh("auto")
    w, x = _data(8)
    q = ArrayNF4.quantize(w, block_size=64)
    xs = jax.device_put(jnp.asarray(x), NamedSharding(mesh, P("dp", "tp")))
    f = jax.jit(implicit(lambda x, w: x @ w))
    _assert_no_weight_gathered(f.lower(xs, q).compile().as_text())
    _close(f(xs, q), x.astype(np.float64) @ np.asarray(q.materialize(), np.float64))


def test_codes_split_through_scale_blocks_are_gathered_and_still_right():
    """Stored rows split where a scale block would be cut (placed by hand, not through
    shard_like_logical, which refuses it): the weight is gathered, the result is right."""
    mesh = _mesh("auto")
    w, x = _data(5)
    q = ArrayInt8.quantize(w, block_size=256)  # 2 blocks over tp = 4
    placed = jax.tree.map(
        lambda a: jax.device_put(a, NamedSharding(mesh, P("tp", None) if a.shape[0] == K else P())),
        q,
    )
    y = jax.jit(implicit(lambda x, w: x @ w))(jnp.asarray(x), placed)
    _close(y, x.astype(np.float64) @ np.asarray(q.materialize(), np.float64))


def test_one_device_and_shard_map_programs_call_the_kernel_directly():
    mesh = _mesh("auto")
    w, x = _data(6)
    q = ArrayInt8.quantize(w, block_size=32)
    f = jax.jit(implicit(lambda x, w: x @ w))
    assert "CustomSPMDPartitioning" not in f.lower(jnp.asarray(x), q).as_text()
    qs = shard_like_logical(q, NamedSharding(mesh, P(None, "tp")))
    g = jax.jit(
        jax.shard_map(
            implicit(lambda x, w: x @ w),
            mesh=mesh,
            in_specs=(P(), P(None, "tp")),
            out_specs=P(None, "tp"),
        )
    )
    text = g.lower(jnp.asarray(x), qs).as_text()
    assert "CustomSPMDPartitioning" not in text
    _close(g(jnp.asarray(x), qs), x.astype(np.float64) @ np.asarray(q.materialize(), np.float64))


@pytest.mark.parametrize("wspec", [P(None, "tp"), P("tp", None)], ids=["split-n", "split-k"])
def test_scan_over_a_sharded_stack_runs_each_layer_on_its_shards(wspec):
    """A stack of layers split like each layer (leading axis whole), run by `lax.scan`."""
    mesh = _mesh("auto")
    rng = np.random.default_rng(7)
    layers = rng.standard_normal((3, K, K)).astype(np.float32) / np.sqrt(K)
    stack = jax.vmap(lambda w: ArrayInt4.quantize(w, block_size=64))(layers)
    dense = np.asarray(stack.materialize(), np.float64)
    placed = shard_like_logical(stack, NamedSharding(mesh, P(None, *wspec)))
    x = rng.standard_normal((M, K)).astype(np.float32)
    xs = jax.device_put(jnp.asarray(x), NamedSharding(mesh, P("dp", None)))

    def model(h, stack):
        return jax.lax.scan(lambda h, w: (h @ w, None), h, stack)[0]

    f = jax.jit(implicit(model))
    _assert_no_weight_gathered(f.lower(xs, placed).compile().as_text())
    want = x.astype(np.float64)
    for layer in dense:
        want = want @ layer
    _close(f(xs, placed), want, tol=1e-3)


def test_export_under_an_abstract_mesh_lowers_without_devices():
    """jax.export of a program for 8 devices it does not have (an abstract mesh): JAX refuses
    primitives that need devices there, so the product lowers directly (no partitioner
    callback, which an exported artifact could not hold)."""
    w, x = _data(9)
    q = ArrayInt4.quantize(w, block_size=64)
    mesh = jax.sharding.AbstractMesh((8,), ("tp",), axis_types=(jax.sharding.AxisType.Auto,))
    f = jax.jit(implicit(lambda x, w: x @ w))
    spec = jax.ShapeDtypeStruct((M, K), jnp.float32, sharding=NamedSharding(mesh, P("tp", None)))
    with jax.sharding.use_abstract_mesh(mesh):
        exported = jax.export.export(f, platforms=["cpu"])(spec, q)
    assert exported.nr_devices == 8
    assert "CustomSPMDPartitioning" not in exported.mlir_module()


def test_gspmd_partitioner_splits_the_same_way():
    """With Shardy off (GSPMD's own propagation: the rule's infer_sharding_from_operands)."""
    mesh = _mesh("auto")
    previous = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", False)
    try:
        w, x = _data(10)
        for spec in (P(None, "tp"), P("tp", None)):
            q = ArrayInt4.quantize(w, block_size=64)
            qs = shard_like_logical(q, NamedSharding(mesh, spec))
            xs = jax.device_put(jnp.asarray(x), NamedSharding(mesh, P("dp", None)))
            f = jax.jit(implicit(lambda x, w: x @ w))
            _assert_no_weight_gathered(f.lower(xs, qs).compile().as_text())
            _close(f(xs, qs), x.astype(np.float64) @ np.asarray(q.materialize(), np.float64))
    finally:
        jax.config.update("jax_use_shardy_partitioner", previous)


def test_without_jaxs_devices_during_lowering_set_the_product_is_still_right(monkeypatch):
    """A JAX release without its private set of primitives that want devices during lowering
    (``_jax_internals.request_devices_during_lowering``) still computes the product (from
    jax 0.11 on gathered operands, without the per-shard rule)."""
    from jax._src import dispatch

    monkeypatch.setattr(dispatch, "prim_requires_devices_during_lowering", set())
    mesh = _mesh("auto")
    w, x = _data(5)
    q = FORMATS["int4"](w)
    qs = shard_like_logical(q, NamedSharding(mesh, P(None, "tp")))
    xs = jax.device_put(jnp.asarray(x), NamedSharding(mesh, P("dp", None)))
    y = jax.jit(implicit(lambda x, w: x @ w * 1.0))(xs, qs)
    _close(y, np.asarray(x, np.float64) @ np.asarray(q.materialize(), np.float64))

"""How a quantized matmul splits over devices when its operands are sharded (GSPMD, Shardy).

A kernel call is opaque to XLA's partitioner: without a rule it gathers every operand onto
every device and each device computes the whole product, so a weight sharded for tensor
parallelism would be all-gathered on every call (its memory and its work times the device
count). Through ``custom_partitioning`` each device instead runs the kernel on its own
shard:

* the weight's split of N (``x @ W``'s columns) splits the result's columns;
* its split of K, where each shard holds whole scale blocks (or the weight has one block,
  as per-channel int8 does, whose scales every shard keeps), splits ``x`` the same way and
  the partial products are summed across those devices (in float32);
* the activations' split of their rows (M) splits the result's rows;
* ``x @ W.T`` (the gradient of ``x @ W``) contracts over N: the same rule, the roles of N
  and K swapped.

The weight's placement decides: the activations are resharded to match it (they are the
small operand), never the other way round, and a split of K that would cut a scale block
or a byte's two 4-bit rows is gathered as before. NF4's double-quantized scales reach each
device's double-quant kernel still compressed, as its own slice of the scale codes and of
their group scales, where that slice holds whole groups (the groups run along the scale
array's rows, so a split of N needs N and each shard's columns to be multiples of the group
size); otherwise the codes are gathered (1/block_size of the weight) and each device
expands the scales and keeps its slice. Programs on one device, inside ``shard_map``
(already local) and lowered for ``jax.export`` (whose artifacts may not hold the
partitioner's callback) call the kernel directly.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.extend.core as jex_core
import jax.numpy as jnp
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec

from jaxcore.kernels import _dq_scales, _formats

Axes = tuple[str, ...]


def _axes(spec: PartitionSpec, dim: int) -> Axes:
    """The mesh axes dimension ``dim`` of ``spec`` is split over (``()``: not split)."""
    entry = spec[dim] if dim < len(spec) else None
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, (tuple, list)) else (entry,)


def _spec_of(shape_with_sharding) -> PartitionSpec:
    sharding = getattr(shape_with_sharding, "sharding", None)
    if isinstance(sharding, NamedSharding):
        return sharding.spec
    return PartitionSpec()


def _entry(axes: Axes):
    return None if not axes else axes[0] if len(axes) == 1 else axes


class _Plan(NamedTuple):
    """Mesh axes of one product's dimensions: the activations' rows, the weight's logical
    rows K and columns N (``()`` where a dimension stays whole)."""

    m: Axes
    k: Axes
    n: Axes


def _size(mesh, axes: Axes) -> int:
    return math.prod(mesh.shape[a] for a in axes)


def _plan(mesh, arg_shapes, fmt: str, block_size: int) -> _Plan:
    """The weight keeps its split of N, and of K where shards hold whole blocks; the
    activations keep their split of M on the mesh axes the weight leaves free."""
    x, qvalue = arg_shapes[0], arg_shapes[1]
    wspec = _spec_of(qvalue)
    k_axes, n_axes = _axes(wspec, 0), _axes(wspec, 1)
    k = _formats.logical_rows(fmt, qvalue.shape[0])
    blocks = k // block_size
    parts = _size(mesh, k_axes)
    if k_axes and (
        k % parts
        or (blocks > 1 and blocks % parts)
        # A 4-bit byte holds two rows: each shard needs whole bytes (an even share of K).
        or (fmt != "int8" and (k // parts) % 2)
    ):
        k_axes = ()
    if set(k_axes) & set(n_axes):
        k_axes = ()
    taken = set(k_axes) | set(n_axes)
    m_axes = tuple(a for a in _axes(_spec_of(x), 0) if a not in taken)
    return _Plan(m_axes, k_axes, n_axes)


def result_sharding(x_aval, qvalue_aval, *, transposed: bool, fmt: str, block_size: int):
    """The sharding of the product's result in sharding-in-types (Explicit mesh axes), as
    the partitioner lays it out; ``None`` where no operand is split over an Explicit axis."""
    shardings = [getattr(a, "sharding", None) for a in (x_aval, qvalue_aval)]
    mesh = next(
        (s.mesh for s in shardings if isinstance(s, NamedSharding) and not s.mesh.empty), None
    )
    if mesh is None:
        return None
    explicit = {
        name
        for name, kind in zip(mesh.axis_names, mesh.axis_types)
        if kind == jax.sharding.AxisType.Explicit
    }
    if not explicit:
        return None
    plan = _plan(mesh, (x_aval, qvalue_aval), fmt, block_size)
    keep = lambda axes: tuple(a for a in axes if a in explicit)  # noqa: E731
    columns = plan.k if transposed else plan.n
    return NamedSharding(mesh, PartitionSpec(_entry(keep(plan.m)), _entry(keep(columns))))


def _shardings(mesh, plan: _Plan, transposed: bool, scale_blocks: int, dq: bool, local: bool):
    """(operand shardings, result sharding) of the plan (``local``: shard-local dq scales)."""
    named = lambda *dims: NamedSharding(mesh, PartitionSpec(*(_entry(d) for d in dims)))  # noqa: E731
    contracted, columns = (plan.n, plan.k) if transposed else (plan.k, plan.n)
    x = named(plan.m, contracted)
    qvalue = named(plan.k, plan.n)
    out = named(plan.m, columns)
    scale = named(plan.k if scale_blocks > 1 else (), plan.n)
    if dq:
        replicated = NamedSharding(mesh, PartitionSpec())
        # Shard-local: the codes split like the scales they encode; the group scales (1/256
        # of the codes) stay whole and each device slices its own.
        codes = scale if local else replicated
        return (x, qvalue, codes, replicated, replicated), out
    return (x, qvalue, scale), out


def _dq_local(mesh, plan: _Plan, n: int, scale_blocks: int) -> bool:
    """Whether each device's slice of the (blocks, n) scale codes holds whole groups of
    ``_dq_scales.GROUP_SIZE`` consecutive codes (row-major), so it can be decoded alone."""
    group = _dq_scales.GROUP_SIZE
    if plan.n:
        return n % group == 0 and (n // _size(mesh, plan.n)) % group == 0
    if plan.k and scale_blocks > 1:
        return (scale_blocks // _size(mesh, plan.k) * n) % group == 0
    return True  # the codes stay whole


def _local_group_scales(mesh, plan: _Plan, group_scale, n: int, shard_shape, blocks: int):
    """This device's group scales for its ``shard_shape`` (rows, columns) slice of the
    (blocks, n) scale codes, which `_dq_local` has checked holds whole groups."""
    group = _dq_scales.GROUP_SIZE
    rows, n_local = shard_shape
    split_rows = bool(plan.k) and rows < blocks
    if plan.n:
        table = group_scale.reshape(blocks, n // group)
        if split_rows:
            start = _shard_index(mesh, plan.k) * rows
            table = jax.lax.dynamic_slice_in_dim(table, start, rows, axis=0)
        per_row = n_local // group
        start = _shard_index(mesh, plan.n) * per_row
        return jax.lax.dynamic_slice_in_dim(table, start, per_row, axis=1).reshape(-1)
    if split_rows:
        count = rows * n // group
        start = _shard_index(mesh, plan.k) * count
        return jax.lax.dynamic_slice_in_dim(group_scale, start, count)
    return group_scale


def _shard_index(mesh, axes: Axes):
    """This device's position along the mesh axes ``axes`` (major to minor)."""
    index = jnp.int32(0)
    for a in axes:
        index = index * mesh.shape[a] + jax.lax.axis_index(a)
    return index


class _Product(NamedTuple):
    """What the partitioner needs of one primitive: its forward and a local config."""

    forward: Callable[..., Any]  # (x2d, qvalue, scale, cfg) -> out, on one device's shards
    traced: Callable[..., Any]  # (cfg, ((shape, dtype), ...)) -> the whole dispatch's jaxpr
    transposed: bool
    dq: bool
    # (x2d, qvalue, codes, group_scale, offset, cfg) -> out, on one device's shards (dq only)
    forward_dq: Callable[..., Any] | None = None


def _local_cfg(cfg, k_local: int, scale_blocks: int):
    # A one-block weight (per-channel scales) split along K: each shard is one block.
    return cfg._replace(block_size=k_local) if scale_blocks == 1 else cfg


def _make(product: _Product) -> Callable[..., Any]:
    """The ``custom_partitioning`` function of one primitive (``cfg`` static, last)."""

    def call_traced(*args):
        # The kernel dispatch as traced once on the operands' plain shapes (what the direct
        # lowering runs): re-tracing jnp code on avals split over Explicit mesh axes fails
        # outside their mesh.
        *operands, cfg = args
        shapes = tuple((tuple(a.shape), a.dtype) for a in operands)
        return jex_core.jaxpr_as_fun(product.traced(cfg, shapes))(*operands)[0]

    # Under its own jit: custom_partitioning refuses a traced function with constants (NF4's
    # code book), which a nested jit keeps inside its own jaxpr.
    call = jax.jit(call_traced, static_argnums=(5 if product.dq else 3,))

    def layout(cfg, mesh, arg_shapes):
        """(plan, K, scale blocks, shard-local dq scales, operand shardings, result sharding)."""
        plan = _plan(mesh, arg_shapes, cfg.fmt, cfg.block_size)
        k = _formats.logical_rows(cfg.fmt, arg_shapes[1].shape[0])
        blocks = k // cfg.block_size
        dq_local = (
            product.dq
            and product.forward_dq is not None
            and _dq_local(mesh, plan, arg_shapes[1].shape[1], blocks)
        )
        shardings = _shardings(mesh, plan, product.transposed, blocks, product.dq, dq_local)
        return (plan, k, blocks, dq_local, *shardings)

    def infer(cfg, mesh, arg_shapes, result_shape):
        del result_shape
        return layout(cfg, mesh, arg_shapes)[-1]

    def partition(cfg, mesh, arg_shapes, result_shape):
        del result_shape
        plan, k, blocks, dq_local, args, out = layout(cfg, mesh, arg_shapes)
        k_local = k // _size(mesh, plan.k)
        local = _local_cfg(cfg, k_local, blocks)
        reduced = plan.n if product.transposed else plan.k
        # Partial products are summed in float32, then rounded once.
        run_cfg = local.returning(jnp.float32) if reduced else local
        n = arg_shapes[1].shape[1]

        def lower_fn(x2d, qvalue, *scales):
            if dq_local:
                codes, group_scale, offset = scales
                group_scale = _local_group_scales(mesh, plan, group_scale, n, codes.shape, blocks)
                assert product.forward_dq is not None  # dq_local requires it
                out = product.forward_dq(x2d, qvalue, codes, group_scale, offset, run_cfg)
            else:
                if product.dq:
                    scales = (_local_scales(mesh, plan, scales, qvalue.shape[1], k_local, cfg),)
                out = product.forward(x2d, qvalue, *scales, run_cfg)
            if reduced:
                out = jax.lax.psum(out, reduced).astype(cfg.out_dtype)
            return out

        return mesh, lower_fn, out, args

    def rule(cfg, mesh, operand_types, result_types):
        # Shardy's view: K is blocks (b) x stored rows per block (r) x rows per byte (p, 4-bit
        # only, never split), so a split of K in x and in the codes is one split; the
        # contracted factors are reductions. Size-1 factors are left out (Shardy refuses them
        # in a compound dimension), and only factors never a whole dimension get a size.
        del mesh, result_types
        pair = cfg.fmt != "int8"
        stored_rows = operand_types[1].shape[0]
        blocks = stored_rows * (2 if pair else 1) // cfg.block_size
        sizes = {"b": blocks, "r": stored_rows // blocks, "p": 2 if pair else 1}
        compound: set[str] = set()

        def dim(*names: str) -> str:
            kept = [n for n in names if sizes[n] > 1]
            if len(kept) > 1:
                compound.update(kept)
                return f"({' '.join(kept)})"
            return kept[0] if kept else "one"

        k, w = dim("b", "r", "p"), f"{dim('b', 'r')} n"
        x = f"m {'n' if product.transposed else k}"
        scales = ", c d, g, " if product.dq else ", b n"
        result = f"m {k}" if product.transposed else "m n"
        rule_text = f"{x}, {w}{scales} -> {result}"
        whole = set(re.sub(r"\([^)]*\)", " ", rule_text).replace(",", " ").split())
        contracted = ("n",) if product.transposed else ("b", "r")
        # Factor names in order of first use: Shardy wants each kind's list in that order.
        used = list(dict.fromkeys(re.findall(r"[a-z]+", rule_text)))
        factors: dict[str, Any] = {f: sizes[f] for f in compound - whole}
        factors["reduction_factors"] = tuple(f for f in used if f in contracted)
        factors["need_replication_factors"] = tuple(f for f in used if f in ("p", "c", "d", "g"))
        return rule_text, factors

    fn = custom_partitioning(call, static_argnums=(5 if product.dq else 3,))
    fn.def_partition(
        partition=partition,
        infer_sharding_from_operands=infer,
        sharding_rule=rule,
    )
    return fn


def _local_scales(mesh, plan: _Plan, dq_parts, n_local: int, k_local: int, cfg):
    """This device's block scales from the gathered double-quantized ones."""
    codes, group_scale, offset = dq_parts
    full = _dq_scales.expand_scales(codes, group_scale, offset)
    blocks = full.shape[0]
    if blocks > 1 and plan.k:
        rows = k_local // cfg.block_size
        start = _shard_index(mesh, plan.k) * rows
        full = jax.lax.dynamic_slice_in_dim(full, start, rows, axis=0)
    if plan.n:
        start = _shard_index(mesh, plan.n) * n_local
        full = jax.lax.dynamic_slice_in_dim(full, start, n_local, axis=1)
    return full


_FUNCTIONS: dict[Any, Callable[..., Any]] = {}


def register(prim, forward, traced, *, transposed: bool, dq: bool = False, forward_dq=None) -> None:
    """Makes ``prim`` (operands ``x2d, qvalue, *scales``) partition by the rules above.

    Args:
      prim: the primitive.
      forward: ``(x2d, qvalue, scale, cfg) -> out``, the kernel dispatch each device runs
        on its shards (for ``dq``, with the scales already expanded).
      traced: ``(cfg, operand shapes and dtypes) -> ClosedJaxpr`` of ``prim``'s whole
        dispatch (cached), what a program that is not split runs.
      transposed: whether ``prim`` computes ``x @ W.T``.
      dq: whether its scales are double-quantized (codes, group scales, offset).
      forward_dq: for ``dq``, ``(x2d, qvalue, codes, group_scale, offset, cfg) -> out``, the
        dispatch each device runs on its shard of the compressed scales where that shard
        holds whole groups; without it every device expands the scales.
    """
    _FUNCTIONS[prim] = _make(_Product(forward, traced, transposed, dq, forward_dq))


def partitioned(prim) -> Callable[..., Any] | None:
    """The partitioned call of ``prim`` (``fn(x2d, qvalue, *scales, cfg)``), if registered."""
    return _FUNCTIONS.get(prim)

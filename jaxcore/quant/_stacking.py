"""Indexing a stack of quantized weights keeps it quantized under `jaxcore.implicit.implicit`.

A model's layers (or a mixture's experts) are often stored as one stack, shape
(L, ..., K, N), and picked out by index: ``stack[i]``, ``stack[i:j]``, ``stack[idx]``,
``lax.dynamic_index_in_dim(stack, i)``, or a reshape or broadcast of the leading dimensions.
Those are the primitives ``slice``, ``squeeze``, ``dynamic_slice``, ``gather``, ``reshape``
and ``broadcast_in_dim``; on the leading (stacking) dimensions they act on every stored
array the same way (codes, scales and double-quantization scales all carry the leading
dimensions first), so the result is the same kind of quantized array and its matmuls still
run the quantized kernel.

Without these handlers the whole stack was materialized (L dense matrices) for each
index, and the matmul that followed ran XLA's dense dot. A single matrix picked out of a
stack with one leading axis (``stack[i]``, static or traced) is a
`jaxcore.quant._layer.StackLayer` where a kernel reads it in place. A static slice of the
matrix axes stays quantized too where it keeps whole blocks (a fused QKV or gate/up weight
split by columns: ``w[:, :d]``). Other operations that reach into the matrix axes (an embedding's
row lookup ``E[tokens]``, a slice through a block) dequantize: the handlers defer to the
dense operation on the materialized weight, which XLA fuses with the dequantization so
only the entries read are decoded.
"""

from __future__ import annotations

import math
import typing as tp

import jax
import jax.numpy as jnp
from jax import lax

from jaxcore.implicit import materialize_handler, register
from jaxcore.kernels._formats import logical_rows
from jaxcore.quant import _layer
from jaxcore.quant._arrays import QuantizedArray


def _n_lead(q: QuantizedArray) -> int:
    """How many leading (stacking) dimensions ``q`` has in front of its 2-D matrix."""
    return len(q.shape) - 2


def _map_leading(q: QuantizedArray, fn: tp.Callable[[jax.Array, int], jax.Array]):
    """Applies ``fn(leaf, trailing)`` to each stored array; ``trailing`` = its matrix-side rank.

    Every stored array has ``q``'s leading dimensions first, then ``trailing`` of its own
    (2 for codes and scales, 1 for double-quantization group scales, 0 for the offset).
    """
    n_lead = _n_lead(q)
    return jax.tree_util.tree_map(lambda leaf: fn(leaf, leaf.ndim - n_lead), q)


def _dense(primitive, operands: tp.Sequence[tp.Any], params: dict) -> jax.Array:
    """The primitive on the materialized weight (for an operation on the matrix axes)."""
    return materialize_handler(primitive, *operands, params=params)


def _same_kind(q: QuantizedArray) -> tp.Any:
    """``q``'s class, typed to construct from (qvalue, scale, block_size, axis=, dtype=).

    All three formats take those; the base class declares no constructor of its own.
    """
    return type(q)


def _plain_scales(q: QuantizedArray) -> QuantizedArray:
    """``q`` with float32 block scales (double-quantized ones expanded), the same weight."""
    if getattr(q, "scale_group_scale", None) is None:
        return q
    return _same_kind(q)(q.qvalue, q.block_scales(), q.block_size, axis=q.axis, dtype=q.dtype)


def _slice_matrix(q: QuantizedArray, rows: tuple, cols: tuple) -> QuantizedArray | None:
    """The logical ``q[..., r0:r1, c0:c1:step]`` as a quantized array, or ``None``.

    ``rows``/``cols`` are (start, limit, stride) on the logical matrix axes. Along the
    stored columns (the axis the blocks do not run along) any slice keeps codes and scales
    aligned; along the blocked axis only whole blocks do (start and limit multiples of
    ``block_size``, stride 1). Double-quantized scales are grouped across columns, so a
    matrix slice of such a weight keeps its scales as float32.
    """
    blocked, stored_cols = (rows, cols) if q.axis == 0 else (cols, rows)
    start, limit, stride = blocked
    if stride != 1 or start % q.block_size or limit % q.block_size:
        return None
    q = _plain_scales(q)
    per_code_row = logical_rows(q.fmt, 1)  # 2 for the packed 4-bit formats
    row_cuts = (start // per_code_row, limit // per_code_row)
    block_cuts = (start // q.block_size, limit // q.block_size)
    c0, c1, cstep = stored_cols
    qvalue = q.qvalue[..., row_cuts[0] : row_cuts[1], c0:c1:cstep]
    scale = q.scale[..., block_cuts[0] : block_cuts[1], c0:c1:cstep]
    return _same_kind(q)(qvalue, scale, q.block_size, axis=q.axis, dtype=q.dtype)


@register("slice")
def _slice(primitive, operand: QuantizedArray, *, start_indices, limit_indices, strides=None):
    params = dict(start_indices=start_indices, limit_indices=limit_indices, strides=strides)
    n = _n_lead(operand)
    strides = tuple(strides) if strides is not None else (1,) * len(operand.shape)

    def leaf_slice(leaf, trailing):
        tail = tuple(leaf.shape[n:])
        return lax.slice(
            leaf,
            tuple(start_indices[:n]) + (0,) * trailing,
            tuple(limit_indices[:n]) + tail,
            strides[:n] + (1,) * trailing,
        )

    rows, cols = ((start_indices[a], limit_indices[a], strides[a]) for a in (n, n + 1))
    full = ((0, operand.shape[n], 1), (0, operand.shape[n + 1], 1))
    if (rows, cols) == full:
        one = n == 1 and limit_indices[0] == start_indices[0] + 1
        layer = (
            _layer.layer_of(operand, jnp.int32(start_indices[0]), keepdims=True) if one else None
        )
        return layer if layer is not None else _map_leading(operand, leaf_slice)
    sliced = _slice_matrix(operand, rows, cols)
    if sliced is None:
        return _dense(primitive, (operand,), params)
    return _map_leading(sliced, leaf_slice)


@register("squeeze")
def _squeeze(primitive, operand: QuantizedArray, *, dimensions):
    n = _n_lead(operand)
    dims = tuple(d % len(operand.shape) for d in dimensions)
    if any(d >= n for d in dims):
        return _dense(primitive, (operand,), {"dimensions": dimensions})
    return _map_leading(operand, lambda leaf, _: lax.squeeze(leaf, dims))


@register("dynamic_slice")
def _dynamic_slice(primitive, operand: QuantizedArray, *start_indices: jax.Array, slice_sizes):
    n = _n_lead(operand)
    if tuple(slice_sizes[n:]) != tuple(operand.shape[n:]):
        return _dense(primitive, (operand, *start_indices), {"slice_sizes": slice_sizes})
    # A full-size slice of the matrix axes starts at 0 whatever its (clamped) start says.
    lead_starts = list(start_indices[:n])
    if n == 1 and slice_sizes[0] == 1:
        layer = _layer.layer_of(operand, lead_starts[0], keepdims=True)
        if layer is not None:
            return layer

    def leaf_slice(leaf, trailing):
        starts = lead_starts + [0] * trailing
        return lax.dynamic_slice(leaf, starts, tuple(slice_sizes[:n]) + tuple(leaf.shape[n:]))

    return _map_leading(operand, leaf_slice)


def _leading_gather(
    operand: QuantizedArray, dimension_numbers, slice_sizes, mode, out_rank: int
) -> tuple[int, ...] | None:
    """Where a ``gather`` picks along the leading dimensions only, keeping whole matrices last.

    Returns the positions in the index vector that address leading dimensions, or ``None``
    when the gather reaches into the matrix axes. A start index on a matrix axis whose slice
    is the whole axis is allowed where it is clamped (``vmap`` of ``dynamic_slice`` makes
    those): the slice then starts at 0 whatever the index.
    """
    n = _n_lead(operand)
    dn = dimension_numbers
    clamped = mode in (lax.GatherScatterMode.CLIP, lax.GatherScatterMode.PROMISE_IN_BOUNDS)
    whole_matrices = tuple(slice_sizes[n:]) == tuple(operand.shape[n:])
    ok = (
        whole_matrices
        and all(d < n for d in dn.collapsed_slice_dims)
        and (clamped or all(d < n for d in dn.start_index_map))
        and not tuple(getattr(dn, "operand_batching_dims", ()))
        and tuple(dn.offset_dims[-2:]) == (out_rank - 2, out_rank - 1)
    )
    if not ok:
        return None
    return tuple(i for i, d in enumerate(dn.start_index_map) if d < n)


@register("gather")
def _gather(
    primitive,
    operand: QuantizedArray,
    indices: jax.Array,
    *,
    dimension_numbers,
    slice_sizes,
    mode,
    fill_value=None,
    **params,
):
    all_params = dict(
        params,
        dimension_numbers=dimension_numbers,
        slice_sizes=slice_sizes,
        mode=mode,
        fill_value=fill_value,
    )
    mode = lax.GatherScatterMode.from_any(mode)
    out_rank = indices.ndim - 1 + len(dimension_numbers.offset_dims)
    keep = _leading_gather(operand, dimension_numbers, slice_sizes, mode, out_rank)
    # Out-of-range picks in "fill" mode hold NaN scales (the default fill, and ``jnp``'s
    # explicit NaN) or, for a fill of 0, zero codes and scales: both materialize to what the
    # dense result holds. Other fills cannot be stored as codes.
    nan_fill = fill_value is None or math.isnan(fill_value)
    if keep is None or not (nan_fill or fill_value == 0):
        return _dense(primitive, (operand, indices), all_params)
    n = _n_lead(operand)
    if len(keep) < len(dimension_numbers.start_index_map):
        # Dropping the matrix axes' (clamped) starts can repeat or unsort the index vectors.
        params = dict(params, indices_are_sorted=False, unique_indices=False)
    lead_indices = indices[..., list(keep)]
    start_index_map = tuple(dimension_numbers.start_index_map[i] for i in keep)
    lead_offsets = tuple(dimension_numbers.offset_dims[:-2])

    def leaf_fill(leaf):
        if jnp.issubdtype(leaf.dtype, jnp.floating):
            return None if nan_fill else 0.0  # None: NaN
        return None if nan_fill else 0  # codes: any (their scale is NaN), or zero

    def leaf_gather(leaf, trailing):
        leaf_dn = dimension_numbers._replace(
            offset_dims=lead_offsets + tuple(range(out_rank - 2, out_rank - 2 + trailing)),
            start_index_map=start_index_map,
        )
        return lax.gather(
            leaf,
            lead_indices,
            leaf_dn,
            tuple(slice_sizes[:n]) + tuple(leaf.shape[n:]),
            mode=mode,
            fill_value=leaf_fill(leaf),
            **params,
        )

    return _map_leading(operand, leaf_gather)


@register("reshape")
def _reshape(primitive, operand: QuantizedArray, *, new_sizes, dimensions=None, **params):
    n = _n_lead(operand)
    new_sizes = tuple(new_sizes)
    all_params = dict(params, new_sizes=new_sizes, dimensions=dimensions)
    if dimensions is not None or len(new_sizes) < 2 or new_sizes[-2:] != tuple(operand.shape[n:]):
        return _dense(primitive, (operand,), all_params)
    new_lead = new_sizes[:-2]
    return _map_leading(operand, lambda leaf, _: leaf.reshape(new_lead + tuple(leaf.shape[n:])))


@register("broadcast_in_dim")
def _broadcast_in_dim(primitive, operand: QuantizedArray, *, shape, broadcast_dimensions, **params):
    n = _n_lead(operand)
    shape, dims = tuple(shape), tuple(broadcast_dimensions)
    all_params = dict(params, shape=shape, broadcast_dimensions=dims)
    new_n = len(shape) - 2
    keeps_matrices = shape[new_n:] == tuple(operand.shape[n:]) and dims[n:] == (new_n, new_n + 1)
    if not keeps_matrices or any(d >= new_n for d in dims[:n]):
        return _dense(primitive, (operand,), all_params)
    if shape == tuple(operand.shape) and dims == tuple(range(len(shape))):
        return operand  # ``expand_dims`` with no new axes (``jnp`` indexing emits it)

    def leaf_broadcast(leaf, trailing):
        tail = tuple(leaf.shape[n:])
        leaf_dims = dims[:n] + tuple(range(new_n, new_n + trailing))
        return lax.broadcast_in_dim(leaf, shape[:new_n] + tail, leaf_dims)

    return _map_leading(operand, leaf_broadcast)

"""Placing a quantized array's stored arrays by a sharding of its *logical* shape.

A quantized weight is sharded as the dense weight it stands for: ``P("x", None)`` splits
its logical rows over mesh axis ``"x"``. The stored arrays have other shapes (codes packed
two or four rows per byte, one scale per block, the matrix stored transposed when
``axis=1``), so each array class maps a logical spec onto each of its stored arrays
(``_stored_partition``): the codes and block scales are split along the same logical
axes, and small side arrays (double-quantization group scales and offset) are replicated,
as is a scale axis of size 1 (one block: per-channel or per-matrix scales).

This is eformer's ``with_sharding`` / ``with_mesh_and_axis``; eformer keeps the sharding
as a static field and re-applies it when materializing, while jaxcore places the arrays
once and lets JAX propagate the sharding (the quantized matmul runs on the placed shards).
"""

from __future__ import annotations

import math
from typing import Any

import jax
from jax.sharding import NamedSharding, PartitionSpec


def named_sharding(mesh_and_axis: Any, owner: str) -> NamedSharding:
    """Builds a ``NamedSharding`` from eformer's ``(mesh, axis_spec)`` pair.

    Args:
        mesh_and_axis: ``(mesh, spec)`` where ``spec`` is ``None`` (replicated), a
            ``PartitionSpec``, a tuple/list of per-axis entries, or one mesh axis name
            (the first logical axis is split over it).
        owner: class name for messages.

    Returns:
        The ``NamedSharding``.

    Raises:
        TypeError: if ``mesh_and_axis`` is not a ``(Mesh, spec)`` pair.
    """
    if not isinstance(mesh_and_axis, (tuple, list)) or len(mesh_and_axis) != 2:
        raise TypeError(
            f"{owner}.with_mesh_and_axis expects a (mesh, axis_spec) pair, got {mesh_and_axis!r}"
        )
    mesh, axis = mesh_and_axis
    if not isinstance(mesh, jax.sharding.Mesh):
        raise TypeError(
            f"{owner}.with_mesh_and_axis: the first element must be a jax.sharding.Mesh, got "
            f"{type(mesh).__name__}"
        )
    if axis is None:
        spec = PartitionSpec()
    elif isinstance(axis, PartitionSpec):
        spec = axis
    elif isinstance(axis, (tuple, list)):
        spec = PartitionSpec(*axis)
    else:
        spec = PartitionSpec(axis)
    return NamedSharding(mesh, spec)


def _mesh_axes(entry: Any) -> tuple[str, ...]:
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, (tuple, list)) else (entry,)


def shard_like_logical(arr: Any, sharding: Any) -> Any:
    """Returns ``arr`` with every stored array placed according to a logical sharding.

    Args:
        arr: a quantized array (any class with ``_stored_partition``).
        sharding: ``None`` (returns ``arr``), a ``NamedSharding`` (arrays are
            ``device_put``, or constrained with ``with_sharding_constraint`` when traced),
            or a ``PartitionSpec`` (constrained against the mesh in context, as
            ``jax.lax.with_sharding_constraint`` does).

    Returns:
        An array of the same class holding the placed stored arrays.

    Raises:
        ValueError: if the spec names more axes than ``arr`` has, or a stored axis
            is not divisible by the mesh axes it is split over.
        TypeError: for another kind of ``sharding``.
    """
    if sharding is None:
        return arr
    owner = type(arr).__name__
    if isinstance(sharding, NamedSharding):
        mesh, spec = sharding.mesh, sharding.spec
    elif isinstance(sharding, PartitionSpec):
        mesh, spec = None, sharding
    else:
        raise TypeError(
            f"{owner}.with_sharding expects a NamedSharding, a PartitionSpec or None, got "
            f"{type(sharding).__name__}"
        )
    ndim = len(arr.shape)
    if len(spec) > ndim:
        raise ValueError(
            f"{owner}.with_sharding: spec {spec} has {len(spec)} entries but the weight has "
            f"{ndim} axes (shape {tuple(arr.shape)})"
        )
    logical = tuple(spec) + (None,) * (ndim - len(spec))
    pairs, treedef = jax.tree_util.tree_flatten_with_path(arr)
    placed = []
    for path, leaf in pairs:
        name = getattr(path[-1], "name", str(path[-1])) if path else ""
        leaf_spec = arr._stored_partition(name, leaf, logical)
        # A stored axis of size 1 (one block of scales: per-channel or per-matrix) holds
        # the same value for every shard: replicated, not split.
        leaf_spec = tuple(
            None if entry is not None and leaf.shape[axis] == 1 else entry
            for axis, entry in enumerate(leaf_spec)
        )
        if mesh is not None:
            for axis, entry in enumerate(leaf_spec):
                parts = math.prod(mesh.shape[a] for a in _mesh_axes(entry))
                if leaf.shape[axis] % parts:
                    raise ValueError(
                        f"{owner}.with_sharding: spec {spec} splits stored array {name!r} "
                        f"(shape {tuple(leaf.shape)}) axis {axis} of size {leaf.shape[axis]} "
                        f"over mesh axes {_mesh_axes(entry)} of {parts} devices, which do not "
                        "divide it"
                    )
            target = NamedSharding(mesh, PartitionSpec(*leaf_spec))
            if isinstance(leaf, jax.core.Tracer):
                placed.append(jax.lax.with_sharding_constraint(leaf, target))
            else:
                placed.append(jax.device_put(leaf, target))
        else:
            placed.append(jax.lax.with_sharding_constraint(leaf, PartitionSpec(*leaf_spec)))
    return jax.tree_util.tree_unflatten(treedef, placed)

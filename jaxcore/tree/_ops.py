"""Leaf-wise combinators over pytrees: stack, concat, zeros_like, where."""

from __future__ import annotations

from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from jaxcore.tree._structure import flatten_like, path_str
from jaxcore.tree._tree_map import align_trees

T = TypeVar("T")

_tu = jax.tree_util


def _leaf_columns(
    func: str, trees: tuple[Any, ...]
) -> tuple[Any, list[tuple[Any, ...]], list[Any]]:
    """Aligns ``__tree_match__`` nodes, checks structures and returns (treedef,
    per-leaf groups, leaf paths)."""
    if not trees:
        raise ValueError(f"{func} needs at least one pytree, got none")
    trees = align_trees(func, trees)
    paths_and_leaves, treedef = _tu.tree_flatten_with_path(trees[0])
    paths = [path for path, _ in paths_and_leaves]
    columns = [[leaf for _, leaf in paths_and_leaves]]
    columns += flatten_like(func, treedef, trees[0], trees[1:])
    return treedef, list(zip(*columns)), paths


def tree_stack(*trees: T) -> T:
    """Stacks pytrees leaf-wise along a new leading axis.

    Args:
        *trees: one or more pytrees with the same structure; corresponding leaves
            must have the same shape. Nodes with ``__tree_match__`` are aligned
            first (as in :func:`tree_map`), so e.g. two label-indexed nodes with
            different vocabularies are merged instead of rejected.

    Returns:
        A pytree whose leaves have shape ``(len(trees), *leaf.shape)``.

    Raises:
        ValueError: if no tree is given, the structures differ (the first
            differing path is named) or corresponding leaves differ in shape.
    """
    treedef, groups, paths = _leaf_columns("tree_stack", trees)
    out = []
    for path, group in zip(paths, groups):
        shapes = [np.shape(x) for x in group]
        if any(s != shapes[0] for s in shapes):
            raise ValueError(
                f"tree_stack: leaves at {path_str(path)} have different "
                f"shapes {shapes}; stacking needs equal shapes"
            )
        out.append(jnp.stack(group))
    return treedef.unflatten(out)


def tree_concat(*trees: T) -> T:
    """Concatenates pytrees leaf-wise along the leading axis.

    Args:
        *trees: one or more pytrees with the same structure (``__tree_match__``
            nodes are aligned first); corresponding leaves must have at least one
            dimension and equal trailing shapes.

    Returns:
        A pytree whose leaves are the inputs' leaves concatenated on axis 0.

    Raises:
        ValueError: if no tree is given, the structures differ (the first
            differing path is named), a leaf is a scalar, or trailing shapes differ.
    """
    treedef, groups, paths = _leaf_columns("tree_concat", trees)
    out = []
    for path, group in zip(paths, groups):
        where = path_str(path)
        shapes = [np.shape(x) for x in group]
        if any(len(s) == 0 for s in shapes):
            raise ValueError(
                f"tree_concat: leaf at {where} is a scalar (shapes {shapes}); "
                "concatenation needs a leading axis (use tree_stack for scalars)"
            )
        if any(s[1:] != shapes[0][1:] for s in shapes):
            raise ValueError(
                f"tree_concat: leaves at {where} have shapes {shapes}; all "
                "dimensions but the first must match"
            )
        out.append(jnp.concatenate(group, axis=0))
    return treedef.unflatten(out)


def tree_zeros_like(tree: T) -> T:
    """Returns a pytree of zeros with the shape and dtype of each leaf of ``tree``."""
    return _tu.tree_map(jnp.zeros_like, tree)


def tree_where_broadcast_last(accept: Any, tree1: T, tree2: T) -> T:
    """Selects leaf-wise between two pytrees, broadcasting ``accept`` over trailing dims.

    ``accept`` indexes the leading dimensions of every leaf (typically a batch
    mask of shape ``(batch,)`` against leaves of shape ``(batch, ...)``); it is
    padded with trailing singleton axes to each leaf's rank, so unlike plain
    ``jnp.where`` it aligns on the left.

    Args:
        accept: boolean array whose shape is broadcast-compatible with the leading
            ``accept.ndim`` dimensions of every leaf.
        tree1: pytree chosen where ``accept`` is True.
        tree2: pytree with ``tree1``'s structure, chosen where it is False.
            ``__tree_match__`` nodes of the two trees are aligned first.

    Returns:
        A pytree with ``tree1``'s structure.

    Raises:
        ValueError: if the structures differ (naming the first differing path),
            or a leaf has fewer dimensions than ``accept`` or incompatible
            leading dimensions.
    """
    accept = jnp.asarray(accept)
    treedef, groups, paths = _leaf_columns("tree_where_broadcast_last", (tree1, tree2))
    out = []
    for path, (a, b) in zip(paths, groups):
        a = jnp.asarray(a)
        b = jnp.asarray(b)
        rank = max(a.ndim, b.ndim)
        where = path_str(path)
        if rank < accept.ndim:
            raise ValueError(
                f"tree_where_broadcast_last: leaf at {where} has shape {a.shape} / "
                f"{b.shape}, fewer dimensions than accept with shape {accept.shape}"
            )
        cond = accept.reshape(accept.shape + (1,) * (rank - accept.ndim))
        try:
            np.broadcast_shapes(cond.shape, a.shape, b.shape)
        except ValueError:
            raise ValueError(
                f"tree_where_broadcast_last: accept with shape {accept.shape} does not "
                f"broadcast against the leading dimensions of the leaf at {where} "
                f"(shapes {a.shape} and {b.shape})"
            ) from None
        out.append(jnp.where(cond, a, b))
    return treedef.unflatten(out)

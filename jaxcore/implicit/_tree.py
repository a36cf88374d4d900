"""Tree utilities that treat implicit arrays as leaves, and nesting inspection."""

from __future__ import annotations

import typing as tp

import jax
import numpy as np

from jaxcore.implicit import _base

_tu = jax.tree_util


def leaf_predicate(x: tp.Any) -> bool:
    """Returns whether ``x`` is an implicit array (the ``is_leaf`` of the helpers below)."""
    return isinstance(x, _base.ImplicitArray)


def _combine(is_leaf: tp.Callable[[tp.Any], bool] | None) -> tp.Callable[[tp.Any], bool]:
    if is_leaf is None:
        return leaf_predicate
    return lambda x: leaf_predicate(x) or bool(is_leaf(x))


def tree_map_with_implicit(f, tree, *rest, is_leaf=None):
    """``jax.tree_util.tree_map`` that stops at implicit arrays (and at ``is_leaf``)."""
    return _tu.tree_map(f, tree, *rest, is_leaf=_combine(is_leaf))


def tree_map_with_path_with_implicit(f, tree, *rest, is_leaf=None):
    """``jax.tree_util.tree_map_with_path`` that stops at implicit arrays."""
    return _tu.tree_map_with_path(f, tree, *rest, is_leaf=_combine(is_leaf))


def tree_flatten_with_implicit(tree, is_leaf=None):
    """``jax.tree_util.tree_flatten`` that keeps implicit arrays as leaves."""
    return _tu.tree_flatten(tree, is_leaf=_combine(is_leaf))


def tree_flatten_with_path_with_implicit(tree, is_leaf=None):
    """``jax.tree_util.tree_flatten_with_path`` that keeps implicit arrays as leaves."""
    return _tu.tree_flatten_with_path(tree, is_leaf=_combine(is_leaf))


def tree_leaves_with_implicit(tree, is_leaf=None):
    """``jax.tree_util.tree_leaves`` that keeps implicit arrays as leaves."""
    return _tu.tree_leaves(tree, is_leaf=_combine(is_leaf))


def tree_structure_with_implicit(tree, is_leaf=None):
    """``jax.tree_util.tree_structure`` that keeps implicit arrays as leaves."""
    return _tu.tree_structure(tree, is_leaf=_combine(is_leaf))


def is_array(element: tp.Any) -> bool:
    """Returns whether ``element`` is a dense array: NumPy array/scalar or ``jax.Array``."""
    if isinstance(element, _base.ImplicitArray):
        return False
    return isinstance(element, (np.ndarray, np.generic, jax.Array))


class _Placeholder:
    """Stands in for one leaf while building the structure of a one-layer flatten."""

    __slots__ = ()


def flatten_one_implicit_layer(tree: tp.Any) -> tuple[list[tp.Any], tp.Any]:
    """Flattens ``tree``, opening its outermost implicit arrays by exactly one layer.

    Dense leaves stay leaves; each outermost implicit array contributes its children,
    with implicit arrays nested in them kept as (unopened) leaves.

    Args:
        tree: Any pytree.

    Returns:
        ``(leaves, treedef)`` with ``jax.tree_util.tree_unflatten(treedef, leaves)``
        rebuilding ``tree``.
    """

    def open_one(node: tp.Any) -> tp.Any:
        if not isinstance(node, _base.ImplicitArray):
            return _Placeholder()
        return _tu.tree_map(
            lambda _: _Placeholder(),
            node,
            is_leaf=lambda x: x is not node and isinstance(x, _base.ImplicitArray),
        )

    prototype = tree_map_with_implicit(open_one, tree)
    treedef = _tu.tree_structure(prototype)
    leaves: list[tp.Any] = []
    for leaf in tree_leaves_with_implicit(tree):
        if isinstance(leaf, _base.ImplicitArray):
            leaves.extend(
                _tu.tree_leaves(
                    leaf, is_leaf=lambda x, n=leaf: x is not n and isinstance(x, _base.ImplicitArray)
                )
            )
        else:
            leaves.append(leaf)
    return leaves, treedef


def implicit_depth(tree: tp.Any) -> int:
    """Returns how deeply implicit arrays nest in ``tree`` (0: none, 1: not nested, ...)."""
    depth = 0
    leaves = tree_leaves_with_implicit(tree)
    while any(isinstance(leaf, _base.ImplicitArray) for leaf in leaves):
        depth += 1
        next_leaves: list[tp.Any] = []
        for leaf in leaves:
            if isinstance(leaf, _base.ImplicitArray):
                next_leaves.extend(flatten_one_implicit_layer(leaf)[0])
        leaves = next_leaves
    return depth

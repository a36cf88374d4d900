"""``tree_map`` with ``__tree_match__`` alignment of nodes across trees."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import jax

from jaxcore.tree._structure import IsLeaf, flatten, flatten_like

_tu = jax.tree_util


def _has_tree_match(x: Any) -> bool:
    # A type-level lookup: much cheaper than isinstance() on a runtime Protocol,
    # and it is called once per node.
    return hasattr(type(x), "__tree_match__")


def _align(node: Any, others: tuple[Any, ...]) -> tuple[Any, ...]:
    aligned = node.__tree_match__(*others)
    if not isinstance(aligned, tuple) or len(aligned) != 1 + len(others):
        raise TypeError(
            f"{type(node).__name__}.__tree_match__ must return a tuple of "
            f"{1 + len(others)} aligned nodes (self first), got "
            f"{type(aligned).__name__}"
            + (f" of length {len(aligned)}" if isinstance(aligned, tuple) else "")
        )
    return aligned


def tree_map(
    fn: Callable[..., Any],
    tree: Any,
    *trees: Any,
    is_leaf: IsLeaf = None,
) -> Any:
    """Applies ``fn`` to corresponding leaves of one or more pytrees.

    Like ``jax.tree.map`` (``tree`` fixes the output structure and must be a
    prefix of every other tree), plus alignment: a node whose type defines
    ``__tree_match__`` (see :class:`SupportsTreeMatch`) is first reconciled with
    the nodes at the same position in ``trees``, and the aligned nodes replace
    the originals. If the aligned node is itself a pytree node and not marked by
    ``is_leaf``, its children are mapped recursively (with further alignment);
    otherwise ``fn`` receives the aligned nodes.

    Args:
        fn: function applied to each tuple of aligned leaves.
        tree: primary pytree; determines the output structure.
        *trees: further pytrees, each with ``tree``'s structure as a prefix.
        is_leaf: optional predicate for extra leaf types.

    Returns:
        A pytree with ``tree``'s structure holding ``fn``'s results.

    Raises:
        ValueError: if a tree's structure differs; the message names the first
            differing path.
        TypeError: if a ``__tree_match__`` returns something other than a tuple
            of the right length.
    """
    if is_leaf is None:
        stop = _has_tree_match
    else:

        def stop(x: Any) -> bool:
            return _has_tree_match(x) or is_leaf(x)

    leaves, treedef = flatten(tree, is_leaf=stop)
    groups: Iterable[tuple[Any, ...]]
    if trees:
        columns = flatten_like("tree_map", treedef, tree, trees, is_leaf=stop, prefix=True)
        groups = zip(leaves, *columns)
    else:
        groups = ((leaf,) for leaf in leaves)
    out = [_map_group(fn, group, is_leaf) for group in groups]
    return treedef.unflatten(out)


def _map_group(fn: Callable[..., Any], group: tuple[Any, ...], is_leaf: IsLeaf) -> Any:
    node = group[0]
    if not _has_tree_match(node):
        return fn(*group)
    aligned = _align(node, group[1:])
    head = aligned[0]
    if is_leaf is not None and is_leaf(node):
        return fn(*aligned)
    # Descend exactly one level into the aligned node; the children are mapped by
    # tree_map, which handles nested alignment and further structure.
    children, node_def = flatten(head, is_leaf=lambda y: y is not head)
    # num_leaves == 1: a real leaf; a childless node (num_leaves == 0) is rebuilt
    # as is, like jax.tree.map does.
    if _tu.treedef_is_leaf(node_def) and node_def.num_leaves == 1:
        return fn(*aligned)
    columns = flatten_like("tree_map", node_def, head, aligned[1:], is_leaf=None, prefix=True)
    mapped = [
        tree_map(fn, child, *rest, is_leaf=is_leaf) for child, *rest in zip(children, *columns)
    ]
    return node_def.unflatten(mapped)


def align_trees(func: str, trees: tuple[Any, ...]) -> tuple[Any, ...]:
    """Replaces every ``__tree_match__`` node of ``trees`` by its aligned counterpart.

    Used by the helpers that need the trees' structures to agree exactly (stack,
    concat, where, scatter): two label-indexed nodes with different vocabularies
    have different static data, so they would not compare equal until aligned.
    Trees without such nodes are returned as they are (one flatten of the first
    tree decides that).

    Args:
        func: public function name for error messages.
        trees: one or more pytrees with the same structure (up to alignment).

    Returns:
        The trees, aligned node by node (same count and order).

    Raises:
        ValueError: if the structures differ outside aligned nodes (naming the first
            differing path).
        TypeError: if a ``__tree_match__`` returns something other than a tuple of
            the right length.
    """
    leaves, treedef = flatten(trees[0], is_leaf=_has_tree_match)
    if not any(_has_tree_match(leaf) for leaf in leaves):
        return trees
    columns = flatten_like(func, treedef, trees[0], trees[1:], is_leaf=_has_tree_match)
    out: list[list[Any]] = [[] for _ in trees]
    for group in zip(leaves, *columns):
        if _has_tree_match(group[0]):
            group = _align_node(func, group)
        for column, node in zip(out, group):
            column.append(node)
    return tuple(treedef.unflatten(column) for column in out)


def _align_node(func: str, group: tuple[Any, ...]) -> tuple[Any, ...]:
    """Aligns one position's nodes, then the ``__tree_match__`` nodes below them."""
    aligned = _align(group[0], group[1:])
    head = aligned[0]
    children, node_def = flatten(head, is_leaf=lambda y: y is not head)
    if _tu.treedef_is_leaf(node_def) and node_def.num_leaves <= 1:
        return aligned
    try:
        rest = [node_def.flatten_up_to(node) for node in aligned[1:]]
    except (ValueError, TypeError) as err:
        raise ValueError(
            f"{func}: {type(head).__name__}.__tree_match__ returned nodes whose "
            f"structures still differ: {err}"
        ) from None
    per_child = [align_trees(func, column) for column in zip(children, *rest)]
    return tuple(node_def.unflatten([child[t] for child in per_child]) for t in range(len(aligned)))

"""Structure inspection and mismatch diagnostics for multi-tree helpers.

JAX's own mismatch errors print two whole treedefs; for large trees that hides
where they differ. :func:`check_same_structure` and :func:`flatten_like` raise
``ValueError`` naming the first differing path (``jax.tree_util.keystr``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import jax

from jaxcore.tree._protocols import PyTreeDef

KeyPath = tuple[Any, ...]
IsLeaf = Callable[[Any], bool] | None

_tu = jax.tree_util


def tree_structure(x: Any, is_leaf: IsLeaf = None) -> PyTreeDef[Any]:
    """Returns the pytree structure of ``x``.

    Args:
        x: pytree to inspect.
        is_leaf: optional predicate marking extra leaf types.

    Returns:
        The ``PyTreeDef`` of ``x``.
    """
    # jaxlib ships no stubs for its treedef type: the protocol is its typed view.
    return cast(PyTreeDef[Any], _tu.tree_structure(x, is_leaf=is_leaf))


def flatten(x: Any, is_leaf: IsLeaf = None) -> tuple[list[Any], PyTreeDef[Any]]:
    """``jax.tree_util.tree_flatten`` with the treedef typed as :class:`PyTreeDef`."""
    leaves, treedef = _tu.tree_flatten(x, is_leaf=is_leaf)
    return leaves, cast(PyTreeDef[Any], treedef)


def flatten_with_path(
    x: Any, is_leaf: IsLeaf = None
) -> tuple[list[tuple[KeyPath, Any]], PyTreeDef[Any]]:
    """``jax.tree_util.tree_flatten_with_path`` with the treedef typed as :class:`PyTreeDef`."""
    pairs, treedef = _tu.tree_flatten_with_path(x, is_leaf=is_leaf)
    return pairs, cast(PyTreeDef[Any], treedef)


def path_str(path: KeyPath) -> str:
    """Renders a key path like ``jax.tree_util.keystr`` (``<root>`` when empty)."""
    return _tu.keystr(path) if path else "<root>"


def _one_level(x: Any, is_leaf: IsLeaf) -> tuple[list[tuple[Any, Any]], Any] | None:
    """Returns ``x``'s direct ``(key, child)`` pairs and node treedef, or None for a leaf."""
    if is_leaf is not None and is_leaf(x):
        return None
    pairs, node_def = flatten_with_path(x, is_leaf=lambda y: y is not x)
    # A one-node treedef is a leaf only if it holds one leaf: None, () and {} are
    # childless nodes (num_leaves == 0), not leaves.
    if _tu.treedef_is_leaf(node_def) and node_def.num_leaves == 1:
        return None
    return [(path[0], child) for path, child in pairs], node_def


def _describe(x: Any, level: tuple[list[tuple[Any, Any]], Any] | None) -> str:
    if level is None:
        return f"leaf of type {type(x).__name__}"
    if x is None:
        return "None"
    pairs, node_def = level
    keys = ", ".join(_tu.keystr((k,)) for k, _ in pairs) or "none"
    data = node_def.node_data()
    static = ""
    if data is not None and not isinstance(x, (dict, list, tuple)):
        static = f" and static data {data[1]!r}"
    return f"{type(x).__name__} node with children [{keys}]{static}"


def first_mismatch(
    reference: Any, other: Any, *, is_leaf: IsLeaf = None, prefix: bool = False
) -> tuple[KeyPath, str] | None:
    """Finds the first path where ``other``'s structure departs from ``reference``.

    Args:
        reference: the tree whose structure is expected.
        other: the tree being checked.
        is_leaf: extra leaf predicate applied to both trees.
        prefix: if True, ``reference`` only needs to be a structural prefix of
            ``other`` (a reference leaf may face any subtree), as in ``tree_map``.

    Returns:
        ``(path, description)`` of the first difference in depth-first order, or
        ``None`` if the structures agree.
    """
    stack: list[tuple[KeyPath, Any, Any]] = [((), reference, other)]
    while stack:
        path, a, b = stack.pop()
        level_a = _one_level(a, is_leaf)
        if level_a is None and prefix:
            continue
        level_b = _one_level(b, is_leaf)
        if level_a is None and level_b is None:
            continue
        if level_a is None or level_b is None or level_a[1] != level_b[1]:
            return path, (f"expected {_describe(a, level_a)}, got {_describe(b, level_b)}")
        children = [
            (path + (key,), child_a, child_b)
            for (key, child_a), (_, child_b) in zip(level_a[0], level_b[0])
        ]
        stack.extend(reversed(children))
    return None


def mismatch_error(
    func: str,
    reference: Any,
    other: Any,
    position: int,
    *,
    is_leaf: IsLeaf = None,
    prefix: bool = False,
    cause: Exception | None = None,
) -> ValueError:
    """Builds the ``ValueError`` for a structure mismatch between two input trees.

    Args:
        func: name of the public function, for the message.
        reference: first input tree.
        other: the mismatching tree.
        position: 0-based position of ``other`` among the function's trees.
        is_leaf: leaf predicate used by the caller.
        prefix: whether ``reference`` only needs to be a prefix of ``other``.
        cause: JAX's original error, used when no difference can be located.

    Returns:
        The error to raise.
    """
    found = first_mismatch(reference, other, is_leaf=is_leaf, prefix=prefix)
    if found is None:
        detail = str(cause) if cause is not None else "structures differ"
        return ValueError(f"{func}: tree #{position} does not match tree #0: {detail}")
    path, what = found
    return ValueError(
        f"{func}: tree #{position} does not match the structure of tree #0; first "
        f"difference at {path_str(path)}: {what}"
    )


def flatten_like(
    func: str,
    treedef: Any,
    reference: Any,
    others: Sequence[Any],
    *,
    is_leaf: IsLeaf = None,
    prefix: bool = False,
) -> list[list[Any]]:
    """Flattens each of ``others`` to ``treedef``'s leaves, with readable errors.

    Args:
        func: public function name for error messages.
        treedef: structure of ``reference`` (flattened with ``is_leaf``).
        reference: the first tree.
        others: remaining trees, positions 1, 2, ... in messages.
        is_leaf: leaf predicate used to build ``treedef``.
        prefix: allow ``others`` to be deeper than ``reference`` at its leaves.

    Returns:
        One leaf list per tree in ``others``.

    Raises:
        ValueError: naming the first differing path of the first bad tree.
    """
    out = []
    for position, other in enumerate(others, start=1):
        if not prefix:
            leaves, other_def = flatten(other, is_leaf=is_leaf)
            if other_def != treedef:
                raise mismatch_error(func, reference, other, position, is_leaf=is_leaf)
            out.append(leaves)
            continue
        try:
            out.append(treedef.flatten_up_to(other))
        except (ValueError, TypeError) as err:
            raise mismatch_error(
                func, reference, other, position, is_leaf=is_leaf, prefix=True, cause=err
            ) from None
    return out


def check_same_structure(func: str, trees: Sequence[Any], is_leaf: IsLeaf = None) -> Any:
    """Checks that all ``trees`` have one structure and returns it.

    Args:
        func: public function name for error messages.
        trees: at least one pytree.
        is_leaf: optional leaf predicate.

    Returns:
        The shared treedef.

    Raises:
        ValueError: naming the first differing path.
    """
    treedef = tree_structure(trees[0], is_leaf=is_leaf)
    for position, other in enumerate(trees[1:], start=1):
        if tree_structure(other, is_leaf=is_leaf) != treedef:
            raise mismatch_error(func, trees[0], other, position, is_leaf=is_leaf)
    return treedef


def assert_same_structure(*trees: Any, is_leaf: IsLeaf = None) -> None:
    """Checks that all ``trees`` have exactly the same pytree structure.

    Unlike comparing treedefs by hand, a failure names the first differing path
    (and what differs there: node type, keys, static data, or leaf vs node).

    Args:
        *trees: pytrees to compare (zero or one tree always passes).
        is_leaf: optional predicate marking extra leaf types.

    Raises:
        ValueError: naming the first tree and path that differ from ``trees[0]``.
    """
    if len(trees) > 1:
        check_same_structure("assert_same_structure", trees, is_leaf)

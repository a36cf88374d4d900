"""Tree utilities that treat implicit arrays as leaves, and nesting inspection."""

from __future__ import annotations

import functools
import typing as tp

import jax
import numpy as np

from jaxcore.implicit import _base

_tu = jax.tree_util


def leaf_predicate(x: tp.Any) -> bool:
    """Returns whether ``x`` is an implicit array (the ``is_leaf`` of the helpers below)."""
    return isinstance(x, _base.ImplicitArray)


def combine_leaf_predicate(
    base_fn: tp.Callable[..., tp.Any], is_leaf: tp.Callable[[tp.Any], bool]
) -> tp.Callable[..., tp.Any]:
    """Wraps a ``jax.tree_util`` function so that ``is_leaf`` values are always leaves.

    The wrapper takes ``base_fn``'s positional arguments and an optional extra leaf
    predicate, as ``is_leaf=`` or ``new_is_leaf=``: a value is a leaf when either
    predicate says so.

    Args:
        base_fn: A tree function taking ``is_leaf=`` (``jax.tree_util.tree_map``...).
        is_leaf: The predicate every call applies.

    Returns:
        The wrapped function.
    """
    base_is_leaf = is_leaf  # the wrapper's own is_leaf= is the extra predicate

    @functools.wraps(base_fn)
    def wrapped(*args: tp.Any, is_leaf: tp.Any = None, new_is_leaf: tp.Any = None) -> tp.Any:
        if is_leaf is not None and new_is_leaf is not None:
            raise TypeError(
                f"{base_fn.__name__}_with_implicit: pass the extra leaf predicate as is_leaf= "
                "or as new_is_leaf=, not both"
            )
        extra = is_leaf if is_leaf is not None else new_is_leaf
        return base_fn(*args, is_leaf=_combine(base_is_leaf, extra))

    return wrapped


def _combine(
    base: tp.Callable[[tp.Any], bool], extra: tp.Callable[[tp.Any], bool] | None
) -> tp.Callable[[tp.Any], bool]:
    if extra is None:
        return base
    return lambda x: base(x) or bool(extra(x))


def _with_implicit(base_fn: tp.Callable[..., tp.Any], doc: str) -> tp.Callable[..., tp.Any]:
    fn = combine_leaf_predicate(base_fn, leaf_predicate)
    fn.__name__ = fn.__qualname__ = f"{base_fn.__name__}_with_implicit"
    fn.__module__ = "jaxcore.implicit"
    fn.__doc__ = doc
    return fn


tree_map_with_implicit = _with_implicit(
    _tu.tree_map,
    """``jax.tree_util.tree_map(f, tree, *rest)`` that stops at implicit arrays (and at
    the optional ``is_leaf=``/``new_is_leaf=`` predicate).""",
)
tree_map_with_path_with_implicit = _with_implicit(
    _tu.tree_map_with_path,
    """``jax.tree_util.tree_map_with_path`` that stops at implicit arrays.""",
)
tree_flatten_with_implicit = _with_implicit(
    _tu.tree_flatten,
    """``jax.tree_util.tree_flatten`` that keeps implicit arrays as leaves.""",
)
tree_flatten_with_path_with_implicit = _with_implicit(
    _tu.tree_flatten_with_path,
    """``jax.tree_util.tree_flatten_with_path`` that keeps implicit arrays as leaves.""",
)
tree_leaves_with_implicit = _with_implicit(
    _tu.tree_leaves,
    """``jax.tree_util.tree_leaves`` that keeps implicit arrays as leaves.""",
)
tree_structure_with_implicit = _with_implicit(
    _tu.tree_structure,
    """``jax.tree_util.tree_structure`` that keeps implicit arrays as leaves.""",
)


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
            leaves.extend(_tu.tree_leaves(leaf, is_leaf=_nested_in(leaf)))
        else:
            leaves.append(leaf)
    return leaves, treedef


def _nested_in(node: tp.Any) -> tp.Callable[[tp.Any], bool]:
    """The ``is_leaf`` that stops at implicit arrays nested inside ``node``."""
    return lambda x: x is not node and isinstance(x, _base.ImplicitArray)


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

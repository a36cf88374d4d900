"""``tree_scatter_set``: ``x.at[idxs].set(v)`` over a pytree with per-node arguments."""

from __future__ import annotations

from typing import Any, TypeVar

import jax.numpy as jnp

from jaxcore.tree._protocols import SCATTER_ARG_NAMES, ScatterArgs
from jaxcore.tree._structure import check_same_structure, flatten_with_path, path_str
from jaxcore.tree._tree_map import align_trees

T = TypeVar("T")


# Arguments of the gather side of an index: accepted, not passed to ``.set``.
_GATHER_ONLY = ("fill_value",)


def _has_scatter_args(x: Any) -> bool:
    return hasattr(type(x), "scatter_args")


def _checked_args(args: Any, source: str) -> dict[str, Any]:
    if not isinstance(args, dict):
        raise TypeError(
            f"tree_scatter_set: {source} must be a dict (ScatterArgs), got {type(args).__name__}"
        )
    unknown = set(args) - SCATTER_ARG_NAMES
    if unknown:
        raise TypeError(
            f"tree_scatter_set: unknown scatter argument(s) {sorted(unknown)} in "
            f"{source}; allowed: {sorted(SCATTER_ARG_NAMES)}"
        )
    return args


def tree_scatter_set(item: T, value: T, idxs: Any, args: ScatterArgs) -> T:
    """Sets ``leaf.at[idxs]`` to the matching leaf of ``value`` throughout a pytree.

    Nodes implementing :class:`HasScatterArgs` supply defaults for their whole
    subtree (e.g. a padded buffer that needs ``mode="drop"`` so out-of-range
    indices are ignored). Arguments given by the caller take precedence over a
    node's ``scatter_args`` (as in kUPS: the caller knows its indices), and the
    arguments in force above a node take precedence over the node's own.
    ``fill_value`` is accepted and not passed on (it only affects gathers). An
    empty index array leaves ``item`` unchanged. Nodes with ``__tree_match__`` are
    aligned between ``item`` and ``value`` first.

    Args:
        item: pytree of arrays to update.
        value: pytree with ``item``'s structure holding the new values (each
            broadcastable to ``leaf[idxs]``).
        idxs: integer index array (or any index accepted by ``.at[...]``).
        args: scatter keyword arguments (:class:`ScatterArgs`): ``mode``,
            ``indices_are_sorted``, ``unique_indices``, ``wrap_negative_indices``
            and ``fill_value``.

    Returns:
        The updated pytree, with ``item``'s (aligned) structure.

    Raises:
        ValueError: if ``value``'s structure differs (naming the first differing
            path), or a leaf cannot be updated (naming its path and shapes).
        TypeError: if ``args`` or a node's ``scatter_args`` has unknown keys.
    """
    base = dict(_checked_args(args, "args"))
    item, value = align_trees("tree_scatter_set", (item, value))
    check_same_structure("tree_scatter_set", (item, value))
    if getattr(idxs, "size", None) == 0:
        return item
    return _scatter(item, value, idxs, base, ())


def _scatter(item: Any, value: Any, idxs: Any, args: dict[str, Any], prefix: tuple) -> Any:
    if _has_scatter_args(item):
        own = _checked_args(item.scatter_args, f"{type(item).__name__}.scatter_args")
        args = {**own, **args}

    def is_node(y: Any) -> bool:
        return y is not item and _has_scatter_args(y)

    pairs, treedef = flatten_with_path(item, is_leaf=is_node)
    # Structures were checked once at the top, so this cannot fail.
    values = treedef.flatten_up_to(value)
    set_args = {k: v for k, v in args.items() if k not in _GATHER_ONLY}
    out = []
    for (path, leaf), new in zip(pairs, values):
        path = prefix + tuple(path)
        if is_node(leaf):
            out.append(_scatter(leaf, new, idxs, args, path))
            continue
        leaf = jnp.asarray(leaf)
        try:
            out.append(leaf.at[idxs].set(new, **set_args))
        except (ValueError, TypeError, IndexError) as err:
            raise ValueError(
                f"tree_scatter_set: cannot set the leaf at {path_str(path)} "
                f"(shape {leaf.shape}) at indices of shape {jnp.shape(idxs)} to a value "
                f"of shape {jnp.shape(new)} with {set_args}: {err}"
            ) from err
    return treedef.unflatten(out)

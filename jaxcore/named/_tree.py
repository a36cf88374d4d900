"""Pytree helpers that treat every ``NamedArray`` as one leaf.

``jax.tree`` would descend into a ``NamedArray`` and hand its raw array to ``fn``, losing
the axis names; these helpers stop at the ``NamedArray`` so ``fn`` sees (and may return)
named arrays. ``scan_aware_map`` additionally maps ``fn`` over each layer of a ``Stacked``
container (the scan-over-layers pattern), so per-layer code never sees the layer axis.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from jaxcore.named._array import NamedArray
from jaxcore.named._axis import Axis, AxisSelector

__all__ = [
    "Stacked",
    "flatten",
    "leaves",
    "map",
    "resize_axis",
    "scan_aware_map",
    "scan_aware_tree_map",
    "structure",
    "tree_flatten",
    "tree_leaves",
    "tree_map",
    "tree_structure",
    "tree_unflatten",
    "unflatten",
]


def _is_named(x: Any) -> bool:
    return isinstance(x, NamedArray)


def _with_named_leaves(is_leaf: Callable[[Any], bool] | None) -> Callable[[Any], bool]:
    if is_leaf is None:
        return _is_named
    return lambda x: isinstance(x, NamedArray) or bool(is_leaf(x))


def map(
    fn: Callable[..., Any], tree: Any, *rest: Any, is_leaf: Callable[[Any], bool] | None = None
) -> Any:
    """Like ``jax.tree.map`` but ``NamedArray`` values are leaves.

    Args:
      fn: called on each leaf of ``tree`` (and the matching leaves of ``rest``).
      tree: the pytree to map over.
      *rest: pytrees with the same structure as ``tree``.
      is_leaf: extra leaf predicate, combined with "is a NamedArray".

    Returns:
      A pytree of ``fn``'s results with ``tree``'s structure.
    """
    return jax.tree.map(fn, tree, *rest, is_leaf=_with_named_leaves(is_leaf))


def flatten(tree: Any, *, is_leaf: Callable[[Any], bool] | None = None) -> tuple[list[Any], Any]:
    """Like ``jax.tree.flatten`` but ``NamedArray`` values are leaves.

    Returns:
      ``(leaves, treedef)``; ``unflatten(treedef, leaves)`` rebuilds ``tree``.
    """
    return jax.tree.flatten(tree, is_leaf=_with_named_leaves(is_leaf))


def unflatten(treedef: Any, leaves: Iterable[Any]) -> Any:
    """Rebuilds a pytree from ``flatten``'s ``treedef`` and a list of leaves."""
    return jax.tree.unflatten(treedef, list(leaves))


def leaves(tree: Any, *, is_leaf: Callable[[Any], bool] | None = None) -> list[Any]:
    """Like ``jax.tree.leaves`` but ``NamedArray`` values are leaves."""
    return jax.tree.leaves(tree, is_leaf=_with_named_leaves(is_leaf))


def structure(tree: Any, *, is_leaf: Callable[[Any], bool] | None = None) -> Any:
    """Like ``jax.tree.structure`` but ``NamedArray`` values are leaves."""
    return jax.tree.structure(tree, is_leaf=_with_named_leaves(is_leaf))


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True)
class Stacked:
    """A pytree of per-layer values stacked along a layer axis (the scan-over-layers pattern).

    Every ``NamedArray`` in ``stacked`` has ``block`` as an axis; every other array leaf has
    the layers along its leading dimension.

    Attributes:
      stacked: the stacked pytree.
      block: the layer axis.
    """

    stacked: Any
    block: Axis

    def __post_init__(self):
        if not isinstance(self.block, Axis):
            raise TypeError(f"Stacked.block must be an Axis, got {self.block!r}")

    def tree_flatten(self):
        return (self.stacked,), self.block

    @classmethod
    def tree_unflatten(cls, block, children):
        obj = object.__new__(cls)
        object.__setattr__(obj, "stacked", children[0])
        object.__setattr__(obj, "block", block)
        return obj


def stack_axis(node: Any) -> Axis | None:
    """The layer axis of a stacked node, or ``None`` for anything else.

    A stacked node is this module's :class:`Stacked` (axis ``block``) or a layer stack such
    as ``hax.nn.Stacked`` (a ``stacked`` field and an ``Axis`` named ``Block``).
    """
    if isinstance(node, Stacked):
        return node.block
    if isinstance(node, type) or not hasattr(node, "stacked"):
        return None
    for name in ("Block", "block"):
        axis = getattr(node, name, None)
        if isinstance(axis, Axis):
            return axis
    return None


def _restack(node: Any, inner: Any) -> Any:
    """``node`` with its ``stacked`` pytree replaced by ``inner``."""
    if isinstance(node, Stacked):
        return Stacked(inner, node.block)
    return dataclasses.replace(node, stacked=inner)


def _unstack_map(
    fn: Callable[..., Any],
    block: Axis,
    trees: Sequence[Any],
    is_leaf: Callable[[Any], bool] | None = None,
) -> Any:
    """Applies ``fn`` to each layer of ``trees`` with ``jax.vmap`` over the ``block`` axis."""
    raw_in = []
    specs = []
    for tree in trees:
        flat, treedef = flatten(tree)
        raws: list[Any] = []
        axes: list[tuple[Axis, ...] | None] = []
        for leaf in flat:
            if isinstance(leaf, NamedArray):
                if block.name not in leaf._names:
                    raise ValueError(
                        f"scan_aware_map: a NamedArray in Stacked has axes {leaf.axes} without the "
                        f"layer axis {block.name!r}"
                    )
                at = leaf._names.index(block.name)
                if leaf.axes[at].size != block.size:
                    raise ValueError(
                        f"scan_aware_map: layer axis {block.name!r} has size {leaf.axes[at].size}, "
                        f"Stacked says {block.size}"
                    )
                raws.append(jax.numpy.moveaxis(leaf.array, at, 0))
                axes.append(leaf.axes[:at] + leaf.axes[at + 1 :])
            else:
                raws.append(leaf)
                axes.append(None)  # a positional leaf: nothing to rename
        raw_in.append(raws)
        specs.append((treedef, axes))

    out_meta: list = []

    def per_layer(*raw_trees):
        rebuilt = []
        for raws, (treedef, axes) in zip(raw_trees, specs):
            leaves_ = [r if ax is None else NamedArray(r, ax) for r, ax in zip(raws, axes)]
            rebuilt.append(unflatten(treedef, leaves_))
        result = scan_aware_map(fn, *rebuilt, is_leaf=is_leaf)
        flat, treedef = flatten(result)
        out_meta.append((treedef, [x.axes if isinstance(x, NamedArray) else None for x in flat]))
        return [x.array if isinstance(x, NamedArray) else x for x in flat]

    raw_out = jax.vmap(per_layer)(*raw_in)
    treedef, axes = out_meta[-1]
    out_leaves = [r if ax is None else NamedArray(r, (block, *ax)) for r, ax in zip(raw_out, axes)]
    return unflatten(treedef, out_leaves)


def scan_aware_map(
    fn: Callable[..., Any], tree: Any, *rest: Any, is_leaf: Callable[[Any], bool] | None = None
) -> Any:
    """Like ``map``, but maps ``fn`` over each layer of every stacked node.

    Stacked nodes are :class:`Stacked` and layer stacks such as ``hax.nn.Stacked``.

    Inside a ``Stacked`` node ``fn`` sees one layer's leaves (``NamedArray`` values without
    the layer axis); the results are stacked back, with the layer axis first. With no
    ``Stacked`` nodes this is exactly ``map``.

    Args:
      fn: called on each leaf (per layer inside ``Stacked``).
      tree: the pytree.
      *rest: pytrees with the same structure (their ``Stacked`` nodes must line up).
      is_leaf: extra leaf predicate.

    Returns:
      The mapped pytree.
    """

    def stop(x):
        return stack_axis(x) is not None or (is_leaf is not None and bool(is_leaf(x)))

    def visit(x, *others):
        block = stack_axis(x)
        if block is not None:
            for o in others:
                if stack_axis(o) != block:
                    raise ValueError(
                        f"scan_aware_map: Stacked over {block} does not line up with {o!r}"
                    )
            inner = _unstack_map(fn, block, [x.stacked, *(o.stacked for o in others)], is_leaf)
            return _restack(x, inner)
        return fn(x, *others)

    return map(visit, tree, *rest, is_leaf=stop)


# ``jax.tree_util``-style spellings of the same helpers.
tree_map = map
scan_aware_tree_map = scan_aware_map
tree_flatten = flatten
tree_unflatten = unflatten
tree_leaves = leaves
tree_structure = structure


def resize_axis(tree: Any, old_axis: AxisSelector, new_size: int, key: Any = None) -> Any:
    """Every ``NamedArray`` in ``tree`` with ``old_axis``, resized along it to ``new_size``.

    Shrinking keeps the first ``new_size`` entries. Growing appends entries: the array's
    mean, or with a ``key`` draws from a normal distribution (truncated at two standard
    deviations) with the array's mean and standard deviation, each array with its own
    subkey. Used to grow or trim a vocabulary axis across a whole model.

    Args:
        tree: A pytree; ``NamedArray`` leaves without the axis and other leaves are kept.
        old_axis: The axis (or its name) to resize.
        new_size: Its new size.
        key: An optional PRNG key for random new entries.

    Returns:
        The tree with the axis resized to ``Axis(name, new_size)``.

    Raises:
        ValueError: if ``new_size`` is negative, or ``old_axis`` is an ``Axis`` whose size
            differs from an array's.
    """
    name = old_axis.name if isinstance(old_axis, Axis) else old_axis
    if new_size < 0:
        raise ValueError(f"resize_axis: the new size of {name!r} must be >= 0, got {new_size}")
    resized = [x for x in leaves(tree) if isinstance(x, NamedArray) and name in x._names]
    keys = list(jax.random.split(key, len(resized))) if key is not None and resized else []
    subkey = iter(keys)

    def resize(x: Any) -> Any:
        if not (isinstance(x, NamedArray) and name in x._names):
            return x
        pos = x._names.index(name)
        old = x.axes[pos]
        if isinstance(old_axis, Axis) and old_axis.size != old.size:
            raise ValueError(f"resize_axis: {old_axis} has size {old.size} in an array")
        axes = x.axes[:pos] + (Axis(name, new_size),) + x.axes[pos + 1 :]
        raw = x.array
        if new_size <= old.size:
            return NamedArray._new(jax.lax.slice_in_dim(raw, 0, new_size, axis=pos), axes)
        extra_shape = raw.shape[:pos] + (new_size - old.size,) + raw.shape[pos + 1 :]
        mean = jnp.mean(raw)
        if key is None:
            extra = jnp.full(extra_shape, mean, raw.dtype)
        else:
            noise = jax.random.truncated_normal(next(subkey), -2.0, 2.0, extra_shape)
            extra = (mean + jnp.std(raw) * noise).astype(raw.dtype)
        return NamedArray._new(jnp.concatenate([raw, extra], axis=pos), axes)

    return map(resize, tree)

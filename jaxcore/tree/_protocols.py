"""Typing protocols for tree utilities: treedefs, alignment and scatter hooks."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, Protocol, TypedDict, TypeVar, runtime_checkable

from jax.lax import GatherScatterMode

T_co = TypeVar("T_co", covariant=True)


class PyTreeDef(Protocol[T_co]):
    """Typed view of ``jax.tree_util.PyTreeDef`` for a tree of type ``T_co``."""

    @property
    def num_leaves(self) -> int:
        """Number of leaves in the structure."""
        ...

    @property
    def num_nodes(self) -> int:
        """Number of nodes (internal nodes and leaves) in the structure."""
        ...

    def unflatten(self, leaves: Iterable[Any], /) -> T_co:
        """Rebuilds a ``T_co`` from leaves in flattening order."""
        ...

    def flatten_up_to(self, xs: Any, /) -> list[Any]:
        """Flattens ``xs`` down to this structure's leaves (a structural prefix)."""
        ...

    def children(self) -> list[Any]:
        """Returns the treedefs of the root's children."""
        ...


@runtime_checkable
class SupportsTreeMatch(Protocol):
    """A pytree node that aligns itself with its counterparts before mapping.

    :func:`jaxcore.tree.tree_map` calls ``node.__tree_match__(*others)`` where
    ``others`` are the nodes at the same position in the other input trees. It
    must return a tuple of ``1 + len(others)`` aligned nodes (``self``'s
    replacement first) which replace the originals for the rest of the map, e.g.
    two label-indexed arrays merging their vocabularies so integer codes agree.
    """

    def __tree_match__(self, *others: Any) -> tuple[Any, ...]:
        """Returns ``(self, *others)`` aligned with each other."""
        ...


class ScatterArgs(TypedDict, total=False):
    """Keyword arguments of ``x.at[idxs].set(value, **args)`` (and of ``.get``).

    ``fill_value`` belongs to gathers (``x.at[idxs].get(mode="fill", fill_value=...)``);
    index types carry it in the same dict as their scatter arguments, so
    :func:`jaxcore.tree.tree_scatter_set` accepts it and leaves it out of the
    ``set`` call (a scatter with ``mode="fill"`` drops out-of-range updates).
    """

    mode: GatherScatterMode | Literal["clip", "drop", "promise_in_bounds", "fill"] | None
    indices_are_sorted: bool
    unique_indices: bool
    wrap_negative_indices: bool
    fill_value: Any


SCATTER_ARG_NAMES = frozenset(ScatterArgs.__annotations__)


@runtime_checkable
class HasScatterArgs(Protocol):
    """A pytree node that overrides scatter arguments for its subtree.

    :func:`jaxcore.tree.tree_scatter_set` merges ``node.scatter_args`` over the
    arguments inherited from above before updating the node's leaves (for
    example a padded buffer asking for ``mode="drop"``).
    """

    @property
    def scatter_args(self) -> ScatterArgs:
        """Scatter keyword arguments for every leaf below this node."""
        ...

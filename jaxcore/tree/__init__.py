"""jaxcore.tree: frozen pytree dataclasses and tree utilities.

Public API (re-exports only; implementations live in private modules).
"""

from jaxcore.tree._dataclass import dataclass, field, lens_field
from jaxcore.tree._ops import (
    tree_concat,
    tree_stack,
    tree_where_broadcast_last,
    tree_zeros_like,
)
from jaxcore.tree._post_init import no_post_init, skip_post_init_if_disabled
from jaxcore.tree._protocols import (
    HasScatterArgs,
    PyTreeDef,
    ScatterArgs,
    SupportsTreeMatch,
)
from jaxcore.tree._scatter import tree_scatter_set
from jaxcore.tree._structure import assert_same_structure, tree_structure
from jaxcore.tree._tree_map import tree_map

__all__ = [
    "HasScatterArgs",
    "PyTreeDef",
    "ScatterArgs",
    "SupportsTreeMatch",
    "assert_same_structure",
    "dataclass",
    "field",
    "lens_field",
    "no_post_init",
    "skip_post_init_if_disabled",
    "tree_concat",
    "tree_map",
    "tree_scatter_set",
    "tree_stack",
    "tree_structure",
    "tree_where_broadcast_last",
    "tree_zeros_like",
]

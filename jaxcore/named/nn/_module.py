"""``module``: the class decorator every ``hax.nn`` layer is built with.

It is ``jaxcore.tree.dataclass`` (a frozen dataclass registered as a pytree: arrays are
leaves, ``field(static=True)`` values live in the treedef), declared with
``typing.dataclass_transform`` so that type checkers see the generated ``__init__`` of each
layer and ``jaxcore.tree.field`` as its field specifier.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, dataclass_transform

import jaxcore.tree as jtree
from jaxcore.named import state_dict

__all__ = ["module"]

T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(jtree.field,))
def module(cls: type[T], /) -> type[T]:
    """Makes ``cls`` a frozen pytree dataclass (``jaxcore.tree.dataclass``).

    As Haliax's layers, each gets ``to_state_dict(prefix=None)`` and
    ``from_state_dict(state_dict, prefix=None)`` methods (unless it defines its own).
    """
    for name, fn in (
        ("to_state_dict", _to_state_dict),
        ("from_state_dict", _from_state_dict),
    ):
        if not hasattr(cls, name):
            setattr(cls, name, fn)
    return jtree.dataclass(cls)


def _to_state_dict(self: Any, prefix: str | None = None) -> dict[str, Any]:
    """This layer's state dict: torch-style dotted keys to positional arrays."""
    return state_dict.module_to_state_dict(self, prefix)


def _from_state_dict(self: Any, sd: Mapping[str, Any], prefix: str | None = None) -> Any:
    """A copy of this layer with its arrays taken from the state dict ``sd``."""
    return state_dict.module_from_state_dict(self, sd, prefix)

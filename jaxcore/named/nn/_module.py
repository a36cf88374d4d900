"""``module``: the class decorator every ``hax.nn`` layer is built with.

It is ``jaxcore.tree.dataclass`` (a frozen dataclass registered as a pytree: arrays are
leaves, ``field(static=True)`` values live in the treedef), declared with
``typing.dataclass_transform`` so that type checkers see the generated ``__init__`` of each
layer and ``jaxcore.tree.field`` as its field specifier.
"""

from __future__ import annotations

from typing import TypeVar, dataclass_transform

import jaxcore.tree as jtree

__all__ = ["module"]

T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(jtree.field,))
def module(cls: type[T], /) -> type[T]:
    """Makes ``cls`` a frozen pytree dataclass (``jaxcore.tree.dataclass``)."""
    return jtree.dataclass(cls)

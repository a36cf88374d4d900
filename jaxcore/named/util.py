"""Small predicates and helpers Haliax code imports from ``haliax.util`` (``hax.util``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

import jax
import numpy as np

from jaxcore.named._array import NamedArray

__all__ = ["ensure_tuple", "is_jax_or_hax_array_like", "is_named_array", "replace_fields"]


def is_named_array(x: Any) -> TypeGuard[NamedArray]:
    """True if ``x`` is a ``NamedArray`` (the ``is_leaf`` predicate for named pytrees)."""
    return isinstance(x, NamedArray)


def is_jax_or_hax_array_like(x: Any) -> bool:
    """True for ``NamedArray``, ``jax.Array``, NumPy arrays and shape stand-ins.

    A ``NamedArray`` counts whatever its storage (a tracer, an array or a
    ``jax.ShapeDtypeStruct``); other objects count if they have a shape and a dtype.
    """
    if isinstance(x, NamedArray):
        return True
    if isinstance(x, (jax.Array, np.ndarray, np.generic, jax.ShapeDtypeStruct)):
        return True
    return hasattr(x, "shape") and hasattr(x, "dtype")


def ensure_tuple(x: Any) -> tuple:
    """``x`` as a tuple: sequences (not strings) are converted, anything else is wrapped.

    Args:
        x: A value or a sequence of values.

    Returns:
        ``tuple(x)`` for a list/tuple/sequence, ``()`` for ``None``, else ``(x,)``.
    """
    if x is None:
        return ()
    if isinstance(x, Sequence) and not isinstance(x, str):
        return tuple(x)
    return (x,)


def replace_fields(node: Any, updates: Mapping[str, Any]) -> Any:
    """A copy of dataclass ``node`` with some fields replaced, without rerunning ``__init__``.

    Rebuilding a module from its parts (as ``jax.tree.unflatten`` does) must not redo the
    checks or the initialization its constructor performs.

    Args:
        node: A dataclass instance (a ``jaxcore.tree`` or equinox module).
        updates: New values by field name.

    Returns:
        The new instance.

    Raises:
        ValueError: if ``updates`` names a field ``node`` does not have.
    """
    names = {f.name for f in dataclasses.fields(node)}
    unknown = set(updates) - names
    if unknown:
        raise ValueError(f"{type(node).__name__} has no fields {sorted(unknown)}")
    new = object.__new__(type(node))
    for name in names:
        object.__setattr__(new, name, updates[name] if name in updates else getattr(node, name))
    return new

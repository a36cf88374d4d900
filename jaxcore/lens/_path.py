"""Parsing user-facing lens paths into JAX key entries."""

from __future__ import annotations

import operator
from typing import Any

import jax

_tu = jax.tree_util
Step = Any  # GetAttrKey | DictKey | SequenceKey | FlattenedIndexKey
_KEY_TYPES = (_tu.GetAttrKey, _tu.DictKey, _tu.SequenceKey, _tu.FlattenedIndexKey)


def parse_steps(parts: tuple[Any, ...]) -> tuple[Step, ...]:
    """Turns lens path components into a tuple of JAX key entries.

    Accepted components: ``"name"`` or dotted ``"a.b.c"`` (attribute, or key of a
    mapping), ``int`` (sequence index), JAX key entries (``GetAttrKey``,
    ``DictKey``, ``SequenceKey``, ``FlattenedIndexKey``), key paths (tuples of key
    entries, as from ``jax.tree_util.tree_flatten_with_path``) and objects with a
    ``steps`` attribute (other lenses).

    Args:
        parts: the components.

    Returns:
        The flattened tuple of key entries.

    Raises:
        TypeError: for an unsupported component type.
        ValueError: for an empty or malformed dotted name.
    """
    steps: list[Step] = []
    for part in parts:
        if isinstance(part, str):
            names = part.split(".")
            if not part or any(not name for name in names):
                raise ValueError(f"lens path component {part!r} is not a valid (dotted) field name")
            steps.extend(_tu.GetAttrKey(name) for name in names)
        elif isinstance(part, _KEY_TYPES):
            steps.append(part)
        elif isinstance(part, bool):
            raise TypeError(f"lens path component {part!r}: booleans are not indices")
        elif isinstance(part, int) or hasattr(type(part), "__index__"):
            steps.append(_tu.SequenceKey(operator.index(part)))
        elif isinstance(part, tuple):
            steps.extend(parse_steps(part))
        elif hasattr(part, "steps") and isinstance(part.steps, tuple):
            steps.extend(part.steps)
        else:
            raise TypeError(
                f"lens path component {part!r} of type {type(part).__name__} is not "
                "supported; use field names (str), indices (int), JAX key entries or lenses"
            )
    return tuple(steps)

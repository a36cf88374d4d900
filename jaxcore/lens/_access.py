"""One-step structural access and functional update of pytree nodes.

``get_step`` reads one child; ``set_step`` returns a copy of the node with that
child replaced, without mutating the original. Dataclass fields are replaced via
``dataclasses.replace`` so ``__init__`` checks (static-field validation,
``__post_init__`` unless suppressed by ``jaxcore.tree.no_post_init``) run on the
updated object.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, MutableMapping
from typing import Any

import jax

from jaxcore.lens._path import Step
from jaxcore.tree._structure import path_str

_tu = jax.tree_util


class LensPathError(LookupError):
    """A lens path does not exist in (or cannot be updated on) an object."""


def _children(obj: Any) -> tuple[list[tuple[Any, Any]], Any]:
    """Direct ``(key, child)`` pairs and one-level treedef of a pytree node."""
    pairs, node_def = _tu.tree_flatten_with_path(obj, is_leaf=lambda y: y is not obj)
    return [(path[0], child) for path, child in pairs], node_def


def _is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(type(obj), "_fields")


def _key_of(step: Step) -> Any:
    if isinstance(step, _tu.GetAttrKey):
        return step.name
    if isinstance(step, (_tu.DictKey, _tu.FlattenedIndexKey)):
        return step.key
    return step.idx


def _fail(obj: Any, step: Step, where: tuple[Step, ...], why: str) -> LensPathError:
    return LensPathError(
        f"lens {path_str(where)}: cannot focus {_tu.keystr((step,))} on an object of type "
        f"{type(obj).__name__}: {why}"
    )


def _available(obj: Any) -> str:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return "fields " + ", ".join(f.name for f in dataclasses.fields(obj))
    if isinstance(obj, Mapping):
        return f"keys {list(obj.keys())!r}"
    if isinstance(obj, (list, tuple)):
        return f"length {len(obj)}"
    try:
        pairs, _ = _children(obj)
    except Exception:  # pragma: no cover - defensive for exotic nodes
        return "no children"
    return "children " + (", ".join(_tu.keystr((k,)) for k, _ in pairs) or "none")


def get_step(obj: Any, step: Step, where: tuple[Step, ...]) -> Any:
    """Returns the child of ``obj`` selected by ``step``.

    Args:
        obj: the node.
        step: a JAX key entry.
        where: the steps from the root to ``obj``, for error messages.

    Returns:
        The child.

    Raises:
        LensPathError: if the child does not exist.
    """
    if isinstance(step, _tu.FlattenedIndexKey):
        pairs, _ = _children(obj)
        if not 0 <= step.key < len(pairs):
            raise _fail(obj, step, where, f"it has {len(pairs)} children")
        return pairs[step.key][1]
    key = _key_of(step)
    if isinstance(obj, Mapping) and not isinstance(step, _tu.SequenceKey):
        if key not in obj:
            raise _fail(obj, step, where, f"no such key; available {_available(obj)}")
        return obj[key]
    if isinstance(step, _tu.GetAttrKey):
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            names = {f.name for f in dataclasses.fields(obj)}
            if key not in names:
                raise _fail(obj, step, where, f"no such field; available {_available(obj)}")
        if not hasattr(obj, key):
            raise _fail(obj, step, where, f"no such attribute; available {_available(obj)}")
        return getattr(obj, key)
    if isinstance(step, _tu.SequenceKey):
        if not isinstance(obj, (list, tuple)):
            raise _fail(obj, step, where, "indices need a list or tuple")
        if not -len(obj) <= key < len(obj):
            raise _fail(obj, step, where, f"index out of range for {_available(obj)}")
        return obj[key]
    raise _fail(obj, step, where, f"{type(obj).__name__} is not a mapping")


def set_step(obj: Any, step: Step, value: Any, where: tuple[Step, ...]) -> Any:
    """Returns a copy of ``obj`` whose child at ``step`` is ``value``.

    Args:
        obj: the node (never mutated).
        step: a JAX key entry that exists in ``obj`` (the caller has read it with
            ``get_step``, which raises the precise error otherwise).
        value: the new child.
        where: the steps from the root to ``obj``, for error messages.

    Returns:
        The updated copy.

    Raises:
        LensPathError: if the node type cannot be rebuilt with a new child.
    """
    key = _key_of(step)
    if isinstance(step, _tu.FlattenedIndexKey):
        pairs, node_def = _children(obj)
        children = [child for _, child in pairs]
        children[key] = value
        return node_def.unflatten(children)
    if isinstance(obj, Mapping) and not isinstance(step, _tu.SequenceKey):
        if isinstance(obj, MutableMapping):
            new = copy.copy(obj)
            new[key] = value
            return new
        return _set_via_pytree(obj, step, value, where)
    if isinstance(step, _tu.GetAttrKey):
        # A dataclass instance (not a dataclass type, which is no pytree node).
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            field = next(f for f in dataclasses.fields(obj) if f.name == key)
            if field.init:
                return dataclasses.replace(obj, **{key: value})
            rebuilt = copy.copy(obj)
            object.__setattr__(rebuilt, key, value)
            return rebuilt
        if _is_namedtuple(obj):
            return obj._replace(**{key: value})
        return _set_via_pytree(obj, step, value, where)
    # SequenceKey on a list or tuple (validated by get_step).
    items = list(obj)
    items[key] = value
    if isinstance(obj, list):
        return type(obj)(items) if type(obj) is not list else items
    if _is_namedtuple(obj):
        return type(obj)(*items)
    return type(obj)(items) if type(obj) is not tuple else tuple(items)


def _set_via_pytree(obj: Any, step: Step, value: Any, where: tuple[Step, ...]) -> Any:
    pairs, node_def = _children(obj)
    for i, (key, _) in enumerate(pairs):
        if key == step:
            children = [child for _, child in pairs]
            children[i] = value
            return node_def.unflatten(children)
    raise _fail(
        obj,
        step,
        where,
        "the value is readable but is not a pytree child of this node, so it cannot "
        f"be replaced; settable {_available(obj)}",
    )

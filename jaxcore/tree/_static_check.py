"""Values stored in static (treedef) fields: what is allowed and how they compare.

Static fields go into the treedef. JAX never hashes a custom node's static data; its
``jit`` cache compares treedefs, and so static values, with ``==``. That works for
hashable values and for plain containers (``dict``, ``list``), but breaks for values
whose ``==`` does not return one bool: a NumPy array (``==`` is elementwise, so the
comparison raises "truth value ... is ambiguous"), and any tuple, dict or frozen
dataclass holding one.

So, as kUPS does, static fields accept unhashable values, and flattening keeps the
cache correct like this:

* a static value that is hashable is stored as is and compared with its own ``==``
  (the fast path: ints, strings, tuples of them, dtypes, ...);
* when any static value of an object is unhashable, the object's static data becomes
  a :class:`StaticData`, which compares (and hashes) a *content key* computed from the
  values at flatten time: containers element by element, NumPy arrays (and concrete
  JAX arrays) by type, dtype, shape and bytes, dataclasses by their ``compare=True``
  fields, and any other unhashable object by identity (the key keeps the object alive,
  so its ``id`` cannot be reused while a cache entry refers to it).

Because the key is recomputed at every flatten, mutating a list or array in place
and calling a jitted function again retraces instead of reusing a stale program.

Tracers are still rejected: a tracer in the treedef leaks out of its trace.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

# Values of these exact types are hashable and compare sanely: no key needed.
_PLAIN_TYPES = frozenset({int, float, str, bool, type(None), bytes, complex, type})


def check_static_value(label: str, value: Any) -> None:
    """Raises ``TypeError`` if ``value`` is a tracer (the one thing a static field cannot hold).

    Only the value itself is inspected (cheap, it runs in ``__init__``); a tracer nested
    inside a container is found when the object is flattened (:func:`static_key`).

    Args:
        label: what holds the value, for the message (e.g. ``"Point.tag"``).
        value: the value assigned to the static field.

    Raises:
        TypeError: if ``value`` is a JAX tracer.
    """
    if isinstance(value, jax.core.Tracer):
        raise _tracer_error(label, value)


def _tracer_error(label: str, value: Any) -> TypeError:
    return TypeError(
        f"{label} is a static field (field(static=True)) but holds a JAX tracer of "
        f"shape {tuple(np.shape(value))} and dtype {getattr(value, 'dtype', '?')}. Static "
        "values are part of the treedef, so a traced value there would leak out of its "
        "trace; declare the field with static=False (a pytree child) instead."
    )


class _Identity:
    """Key for an unhashable object with no content rule: equal only to itself."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj  # a strong reference: the id stays unique while the key lives

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Identity) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __repr__(self) -> str:
        return f"<identity of {type(self.obj).__name__} at {id(self.obj):#x}>"


def _array_key(kind: str, arr: np.ndarray, label: str) -> tuple[Any, ...]:
    if arr.dtype.hasobject:
        return (kind, arr.dtype.str, arr.shape, tuple(static_key(v, label) for v in arr.ravel()))
    return (kind, arr.dtype.str, arr.shape, np.ascontiguousarray(arr).tobytes())


def static_key(value: Any, label: str) -> Any:
    """Returns a hashable key with the equality the ``jit`` cache should use for ``value``.

    Args:
        value: a static value (any Python object).
        label: the static field's name, for error messages.

    Returns:
        ``value`` itself when it is hashable, otherwise a hashable tuple describing its
        content (see the module docstring).

    Raises:
        TypeError: if ``value`` contains a JAX tracer.
    """
    kind = type(value)
    if kind in _PLAIN_TYPES:
        return value
    if isinstance(value, jax.core.Tracer):
        raise _tracer_error(label, value)
    if isinstance(value, np.ndarray):
        return _array_key("ndarray", value, label)
    if isinstance(value, jax.Array):
        return _array_key("jax.Array", np.asarray(value), label)
    try:
        hash(value)
    except TypeError:
        pass
    else:
        return value
    if isinstance(value, dict):
        return (
            kind,
            frozenset((static_key(k, label), static_key(v, label)) for k, v in value.items()),
        )
    if isinstance(value, (list, tuple)):
        return (kind, tuple(static_key(v, label) for v in value))
    if isinstance(value, (set, frozenset)):
        return (kind, frozenset(static_key(v, label) for v in value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (
            kind,
            tuple(
                (f.name, static_key(getattr(value, f.name), label))
                for f in dataclasses.fields(value)
                if f.compare
            ),
        )
    return (kind, _Identity(value))


class StaticData:
    """The static data of a pytree dataclass with unhashable static values.

    Holds the values themselves (handed back on unflatten) and their content key
    (used for ``==`` and ``hash``, i.e. by the ``jit`` cache and treedef comparison).
    """

    __slots__ = ("values", "key")

    def __init__(self, values: tuple[Any, ...], key: tuple[Any, ...]) -> None:
        self.values = values
        self.key = key

    def __eq__(self, other: object) -> bool:
        return type(other) is StaticData and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return repr(self.values)


def keyed(values: tuple[Any, ...], names: tuple[str, ...], owner: str) -> StaticData:
    """Wraps an object's static values with their content key."""
    return StaticData(values, tuple(static_key(v, f"{owner}.{n}") for v, n in zip(values, names)))

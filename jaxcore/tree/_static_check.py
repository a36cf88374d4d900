"""Validation of values stored in static (treedef) fields.

Static fields are part of the treedef: JAX hashes and compares them on every
``jit`` cache lookup. An array there either fails late with an obscure error or
silently recompiles on every call (and tracers leak), so they are rejected when
the object is built.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np


def check_static_value(label: str, value: Any) -> None:
    """Raises ``TypeError`` unless ``value`` may live in a static field.

    Args:
        label: what holds the value, for the message (e.g. ``"Point.tag"``).
        value: the value assigned to the static field.

    Raises:
        TypeError: if ``value`` is a JAX array (tracers included), a NumPy array,
            or is not hashable.
    """
    if isinstance(value, (jax.Array, np.ndarray)):
        kind = "JAX" if isinstance(value, jax.Array) else "NumPy"
        raise TypeError(
            f"{label} is a static field (field(static=True)) but was given a "
            f"{kind} array of shape {tuple(np.shape(value))} and dtype "
            f"{getattr(value, 'dtype', '?')}. Static fields are hashed into the "
            "treedef on every jit call, so arrays there cause recompilation or "
            "errors; declare the field with static=False or store a hashable "
            "Python value (e.g. a tuple or int)."
        )
    try:
        hash(value)
    except TypeError as err:
        raise TypeError(
            f"{label} is a static field (field(static=True)) but its value "
            f"of type {type(value).__name__} is not hashable ({err}). Static "
            "fields must be hashable so that jit can cache on them; use a tuple "
            "instead of a list, a frozenset instead of a set, or make the field "
            "non-static."
        ) from err

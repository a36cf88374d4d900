"""JAX helpers that understand pytrees holding ``NamedArray`` values (``hax.jax_utils``).

* ``tree_checkpoint_name`` tags every array of a pytree for a remat policy (what
  ``jax.ad_checkpoint.checkpoint_name`` does for one array).
* ``filter_checkpoint`` is ``jax.checkpoint`` for functions whose arguments and results
  mix arrays with anything else (modules, axes, callables): only array leaves are traced,
  the rest is passed through as static Python values, as ``equinox.filter_checkpoint``
  does. Haliax exports it as ``hax.filter_checkpoint``; this one needs no equinox.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import numpy as np
from jax.ad_checkpoint import checkpoint_name

__all__ = ["filter_checkpoint", "is_jax_array_like", "tree_checkpoint_name"]

T = TypeVar("T")


def is_jax_array_like(x: Any) -> bool:
    """True for arrays JAX traces (``jax.Array``, NumPy arrays and scalars), not Python numbers."""
    return isinstance(x, (jax.Array, np.ndarray, np.generic))


def tree_checkpoint_name(x: T, name: str) -> T:
    """Names every array leaf of ``x`` for gradient-checkpoint policies.

    ``jax.checkpoint_policies.save_only_these_names(name)`` (and the other name-based
    policies) then apply to the whole tree. Non-array leaves pass through unchanged;
    ``NamedArray`` values keep their axes (only the array inside is named).

    Args:
      x: any pytree.
      name: the checkpoint name.
    """
    if not isinstance(name, str):
        raise TypeError(f"tree_checkpoint_name: name must be a str, got {name!r}")
    return jax.tree.map(
        lambda leaf: checkpoint_name(leaf, name) if is_jax_array_like(leaf) else leaf, x
    )


def _split(tree: Any) -> tuple[list[int], list[Any], list[Any], Any]:
    leaves, treedef = jax.tree.flatten(tree)
    dyn_at = [i for i, leaf in enumerate(leaves) if is_jax_array_like(leaf)]
    static = [None if is_jax_array_like(leaf) else leaf for leaf in leaves]
    return dyn_at, [leaves[i] for i in dyn_at], static, treedef


def _join(dyn_at: list[int], dyn: list[Any], static: list[Any], treedef: Any) -> Any:
    full = list(static)
    for i, v in zip(dyn_at, dyn):
        full[i] = v
    return jax.tree.unflatten(treedef, full)


def filter_checkpoint(
    fun: Callable | None = None, *, prevent_cse: bool = True, policy: Callable | None = None
) -> Callable:
    """``jax.checkpoint`` that traces only the array leaves of the arguments and the result.

    Usable as ``@filter_checkpoint`` or ``@filter_checkpoint(policy=...)``. Non-array leaves
    (Python numbers, callables, axes, static module fields) are closed over instead of
    traced, so functions taking modules can be rematerialized without partitioning them by
    hand.

    Args:
      fun: the function to rematerialize in the backward pass.
      prevent_cse: passed to ``jax.checkpoint``.
      policy: a ``jax.checkpoint_policies`` policy saying which intermediates to keep.

    Returns:
      The wrapped function (same signature and results as ``fun``).
    """
    if fun is None:
        return functools.partial(filter_checkpoint, prevent_cse=prevent_cse, policy=policy)

    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
        dyn_at, dyn, static, treedef = _split((args, kwargs))
        out_meta: list = []

        def inner(dyn_in):
            a, kw = _join(dyn_at, dyn_in, static, treedef)
            o_at, o_dyn, o_static, o_def = _split(fun(*a, **kw))
            out_meta.append((o_at, o_static, o_def))
            return o_dyn

        out_dyn = jax.checkpoint(inner, prevent_cse=prevent_cse, policy=policy)(dyn)
        o_at, o_static, o_def = out_meta[-1]
        return _join(o_at, out_dyn, o_static, o_def)

    return wrapper

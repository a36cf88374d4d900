"""The straight-through estimator, for quantisation-aware training."""

from __future__ import annotations

import functools
import typing as tp

import jax
import jax.numpy as jnp

from jaxcore.implicit import _base
from jaxcore.implicit import _materialize


def ste(func: tp.Callable[..., tp.Any]) -> tp.Callable[..., tp.Any]:
    """Makes ``func(x, *args)`` pass gradients straight through to ``x``.

    The forward pass is ``func`` (e.g. quantise, round); the backward pass treats it as
    the identity in ``x`` and as constant in the other arguments. ``func``'s output
    must have ``x``'s shape; a cotangent that is an implicit array is materialised.

    Args:
        func: A function whose first argument is the array to pass gradients to.

    Returns:
        The wrapped function, with positional arguments only.
    """

    @jax.custom_vjp
    def straight_through(x, *args):
        return func(x, *args)

    def fwd(x, *args):
        # Residuals: a scalar carrying x's dtype, and one empty pytree per extra argument.
        return func(x, *args), (jnp.zeros((), jnp.result_type(x)), (None,) * len(args))

    def bwd(res, g):
        x_dtype_carrier, rest = res
        g = jax.tree_util.tree_map(
            lambda leaf: _materialize.materialize_nested(leaf, full=True),
            g,
            is_leaf=_base.is_implicit,
        )
        return (g.astype(x_dtype_carrier.dtype), *rest)

    straight_through.defvjp(fwd, bwd)

    @functools.wraps(func)
    def wrapper(x, *args):
        return straight_through(x, *args)

    return wrapper

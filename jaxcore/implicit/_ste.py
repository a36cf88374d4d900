"""The straight-through estimator, for quantisation-aware training."""

from __future__ import annotations

import functools
import typing as tp

import jax
import jax.numpy as jnp

from jaxcore.implicit import _base


def ste(func: tp.Callable[..., tp.Any]) -> tp.Callable[..., tp.Any]:
    """Makes ``func(x, *args)`` pass gradients straight through to ``x``.

    The forward pass is ``func`` (e.g. fake-quantise, round); the backward pass treats
    it as the identity in ``x`` and as constant in the other arguments, so ``func``'s
    output must have ``x``'s shape. ``func`` may return an implicit array for use in
    the forward pass, but then its cotangent is one with respect to the implicit
    array's *children*, which says nothing about the dense array, so differentiating
    through it raises; differentiate through a dense output instead (e.g.
    ``ste(lambda w: ArrayNF4.quantize(w).materialize())``).

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
        if isinstance(g, _base.ImplicitArray):
            raise TypeError(
                f"ste({getattr(func, '__name__', func)}) returned a {type(g).__name__}; "
                "its cotangent is with respect to the children, not the dense array, so "
                "it cannot pass straight through. Make the ste-wrapped function return "
                "a dense array (e.g. call .materialize() on the result)."
            )
        return (g.astype(x_dtype_carrier.dtype), *rest)

    straight_through.defvjp(fwd, bwd)

    @functools.wraps(func)
    def wrapper(x, *args):
        return straight_through(x, *args)

    return wrapper

"""Differentiation helpers: ``non_differentiable`` and ``sequential_vmap_with_vjp``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import jax.custom_batching  # noqa: F401  (jax.custom_batching.sequential_vmap)
import numpy as np

R = TypeVar("R")


@jax.custom_jvp
def _identity_no_jvp(x: Any) -> Any:
    return x


@_identity_no_jvp.defjvp
def _raise_on_jvp(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> Any:
    shapes = jax.tree_util.tree_map(np.shape, primals[0])
    # "not differentiable" is the phrase kUPS's message (and its users' tests) use.
    raise NotImplementedError(
        f"non_differentiable: this value is not differentiable (it was marked with "
        f"non_differentiable; leaf shapes {shapes}); wrap it in "
        "jax.lax.stop_gradient if a zero gradient is intended"
    )


def non_differentiable(x: Any) -> Any:
    """Identity on the pytree ``x`` that raises if anything differentiates through it.

    Unlike ``jax.lax.stop_gradient`` (which silently yields zero gradients), any
    ``jvp``/``grad``/``vjp`` whose tangent reaches ``x`` raises
    ``NotImplementedError``; ``jit`` and ``vmap`` work normally.

    Args:
        x: a pytree of arrays.

    Returns:
        ``x`` unchanged.
    """
    return _identity_no_jvp(x)


def sequential_vmap_with_vjp(func: Callable[..., R]) -> Callable[..., R]:
    """Makes ``func`` loop over the batch under ``vmap`` instead of batching it, with a VJP.

    Called directly, the result is just ``func``. Under ``jax.vmap`` (or anything that
    batches, such as ``jnp.vectorize``) it does not use ``func``'s batching rules:
    it runs ``func`` once per batch element in a ``jax.lax.map`` loop
    (``jax.custom_batching.sequential_vmap``), for functions without batching rules
    (host callbacks, custom calls) or too large to batch. Reverse-mode derivatives
    (``grad``/``vjp``) are defined by a custom VJP whose backward pass is itself
    looped the same way, so under ``vmap`` memory stays at one element's residuals.
    Arguments that ``vmap`` does not batch (``in_axes=None``) are passed to every
    call unchanged.

    Args:
        func: function of positional arguments (pytrees of arrays).

    Returns:
        A function with ``func``'s signature and results.

    Raises:
        TypeError: if ``func`` is not callable.
    """
    if not callable(func):
        raise TypeError(f"sequential_vmap_with_vjp expects a callable, got {type(func).__name__}")

    looped = jax.custom_vjp(jax.custom_batching.sequential_vmap(func))

    def fwd(*args: Any) -> tuple[Any, tuple[Any, ...]]:
        return looped(*args), args

    def bwd(args: tuple[Any, ...], cotangent: Any) -> tuple[Any, ...]:
        def pullback(ct: Any, *element_args: Any) -> tuple[Any, ...]:
            return jax.vjp(func, *element_args)[1](ct)

        return sequential_vmap_with_vjp(pullback)(cotangent, *args)

    looped.defvjp(fwd, bwd)

    @functools.wraps(func)
    def wrapper(*args: Any) -> Any:
        return looped(*args)

    return wrapper

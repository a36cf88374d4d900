"""Differentiation helpers: ``non_differentiable`` and ``sequential_vmap_with_vjp``."""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

import jax
import numpy as np

R = TypeVar("R")


@jax.custom_jvp
def _identity_no_jvp(x: Any) -> Any:
    return x


@_identity_no_jvp.defjvp
def _raise_on_jvp(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> Any:
    shapes = jax.tree_util.tree_map(np.shape, primals[0])
    raise NotImplementedError(
        f"non_differentiable: attempted to differentiate through a value marked "
        f"non-differentiable (leaf shapes {shapes}); wrap it in "
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


def _batch_size(func_name: str, args: tuple[Any, ...]) -> int:
    sizes = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(args)[0]:
        shape = np.shape(leaf)
        where = f"argument {path[0].idx}{jax.tree_util.keystr(path[1:])}"
        if not shape:
            raise ValueError(
                f"sequential_vmap_with_vjp({func_name}): {where} is a scalar; every "
                "leaf needs a leading batch axis"
            )
        sizes[where] = shape[0]
    if not sizes:
        raise ValueError(f"sequential_vmap_with_vjp({func_name}): no array arguments to map over")
    if len(set(sizes.values())) > 1:
        raise ValueError(
            f"sequential_vmap_with_vjp({func_name}): leading (batch) sizes differ: {sizes}"
        )
    return next(iter(sizes.values()))


def sequential_vmap_with_vjp(func: Callable[..., R]) -> Callable[..., R]:
    """Maps ``func`` over the leading axis one element at a time, with a custom VJP.

    The forward pass is ``jax.lax.map`` (a loop, not ``vmap``), for functions
    without batching rules (host callbacks, custom calls) or too large to batch.
    The backward pass is also a ``lax.map`` that recomputes each element's VJP,
    so memory stays at one element's residuals instead of the whole batch's.

    Args:
        func: function of positional array arguments (pytrees allowed) for one
            batch element.

    Returns:
        A function taking the same arguments with an extra leading batch axis on
        every leaf and returning ``func``'s outputs stacked along that axis.
        Differentiable with ``grad``/``vjp`` (reverse mode).

    Raises:
        TypeError: if ``func`` is not callable.
    """
    if not callable(func):
        raise TypeError(f"sequential_vmap_with_vjp expects a callable, got {type(func).__name__}")
    name = getattr(func, "__qualname__", repr(func))

    def forward(*args: Any) -> Any:
        _batch_size(name, args)
        return jax.lax.map(lambda element: func(*element), args)

    mapped = jax.custom_vjp(forward)

    def fwd(*args: Any) -> tuple[Any, tuple[Any, ...]]:
        return forward(*args), args

    def bwd(args: tuple[Any, ...], cotangent: Any) -> tuple[Any, ...]:
        def one(element: tuple[tuple[Any, ...], Any]) -> tuple[Any, ...]:
            element_args, element_ct = element
            _, pullback = jax.vjp(func, *element_args)
            return pullback(element_ct)

        return jax.lax.map(one, (args, cotangent))

    mapped.defvjp(fwd, bwd)

    @functools.wraps(func)
    def wrapper(*args: Any) -> Any:
        return mapped(*args)

    return wrapper

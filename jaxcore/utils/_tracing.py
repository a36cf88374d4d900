"""Detecting JAX tracing: ``is_traced`` and the ``no_jax_tracing`` guard."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import jax

C = TypeVar("C", bound=Callable[..., Any])


class NotJaxCompatibleError(RuntimeError):
    """Raised when a function marked ``no_jax_tracing`` receives traced values."""


def is_traced(x: Any) -> bool:
    """Returns whether any leaf of the pytree ``x`` is a JAX tracer.

    True inside ``jit``/``vmap``/``grad`` etc. for values derived from the
    transformed function's inputs; False for concrete arrays and Python values.
    """
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(x))


def _first_traced(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    for i, arg in enumerate(args):
        if is_traced(arg):
            return f"positional argument {i}"
    for name, arg in kwargs.items():
        if is_traced(arg):
            return f"argument {name!r}"
    return None


def no_jax_tracing(fn: C) -> C:
    """Marks ``fn`` as unusable under JAX transformations.

    The wrapper inspects every argument pytree; if any leaf is a tracer (the call
    happens inside ``jit``, ``vmap``, ``grad``, ...) it raises
    :class:`NotJaxCompatibleError` naming the function and argument instead of
    letting host-side code fail obscurely or silently bake in a trace-time value.

    Args:
        fn: host-side function (I/O, NumPy-only code, data-dependent Python).

    Returns:
        The guarded function, with ``fn``'s signature and metadata.

    Raises:
        TypeError: if ``fn`` is not callable.
    """
    if not callable(fn):
        raise TypeError(f"no_jax_tracing expects a callable, got {type(fn).__name__}")
    name = getattr(fn, "__qualname__", repr(fn))

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        where = _first_traced(args, kwargs)
        if where is not None:
            raise NotJaxCompatibleError(
                f"{name} is marked no_jax_tracing but its {where} is a JAX tracer: "
                "call it outside jit/vmap/grad (on concrete values)"
            )
        return fn(*args, **kwargs)

    return guarded  # type: ignore[return-value]

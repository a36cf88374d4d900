"""Opt-in suppression of ``__post_init__`` validation (``no_post_init``).

Frozen pytree containers often check invariants in ``__post_init__``. Structural
updates (lens ``set`` chains, deserialization) can pass through intermediate
objects that violate those invariants; a class opts into suppression by
decorating its ``__post_init__`` with :func:`skip_post_init_if_disabled`, and a
caller suppresses it for a block with :func:`no_post_init`.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])

# A ContextVar (not a global flag) so threads and asyncio tasks do not leak the
# suppression into each other.
_POST_INIT_DISABLED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "jaxcore_tree_post_init_disabled", default=False
)


@contextlib.contextmanager
def no_post_init() -> Iterator[None]:
    """Suppress opted-in ``__post_init__`` methods inside the ``with`` block.

    Only ``__post_init__`` methods decorated with
    :func:`skip_post_init_if_disabled` are skipped; everything else (including the
    static-field checks of :func:`jaxcore.tree.dataclass`) still runs. Blocks nest;
    leaving the innermost block restores the previous state.

    Yields:
        None.
    """
    token = _POST_INIT_DISABLED.set(True)
    try:
        yield
    finally:
        _POST_INIT_DISABLED.reset(token)


def post_init_disabled() -> bool:
    """Returns whether the current context is inside :func:`no_post_init`."""
    return _POST_INIT_DISABLED.get()


def skip_post_init_if_disabled(post_init: _F) -> _F:
    """Makes ``post_init`` a no-op while inside :func:`no_post_init`.

    Args:
        post_init: a ``__post_init__`` method (usually the invariant checks of a
            frozen container).

    Returns:
        A wrapper with the same signature that returns ``None`` without calling
        ``post_init`` when validation is disabled, and calls it otherwise.

    Raises:
        TypeError: if ``post_init`` is not callable.
    """
    if not callable(post_init):
        raise TypeError(
            "skip_post_init_if_disabled expects a __post_init__ method, got "
            f"{type(post_init).__name__}: {post_init!r}"
        )

    @functools.wraps(post_init)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _POST_INIT_DISABLED.get():
            return None
        return post_init(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]

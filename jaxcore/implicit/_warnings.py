"""The warning issued when an implicit array falls back to materialization.

It is issued once per (primitive, implicit type) per process. It can be switched off
for the whole process with the environment variable
``JAXCORE_IMPLICIT_WARN_MATERIALIZE=0`` (read when the warning would be issued), for
a block of code with ``with materialization_warnings(False):``, or per class with
``class MyArray(ImplicitArray, warn_on_materialize=False)``.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
import typing as tp
import warnings

ENV_VAR = "JAXCORE_IMPLICIT_WARN_MATERIALIZE"
_FALSE_VALUES = frozenset({"0", "false", "no", "off"})


class MaterializationWarning(UserWarning):
    """An implicit array was materialized because no handler matched a primitive."""


_enabled: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "jaxcore_implicit_materialize_warnings", default=True
)
_warned: set[tuple[str, type]] = set()
_lock = threading.Lock()


@contextlib.contextmanager
def materialization_warnings(enabled: bool) -> tp.Iterator[None]:
    """Turns the fallback-materialization warning on or off inside a ``with`` block.

    Args:
        enabled: Whether to warn inside the block.

    Yields:
        Nothing.
    """
    token = _enabled.set(bool(enabled))
    try:
        yield
    finally:
        _enabled.reset(token)


def _env_allows() -> bool:
    return os.environ.get(ENV_VAR, "1").strip().lower() not in _FALSE_VALUES


_generation = 0


def warnings_state() -> tuple[bool, int]:
    """(whether fallback warnings are on, how often they were reset).

    Fallback warnings are issued while tracing; code that caches traces keys them on
    this, so that re-enabling or resetting warnings is not hidden by a cached trace.
    """
    return (_enabled.get() and _env_allows(), _generation)


_consultations = 0


def consultations() -> int:
    """How often :func:`warn_materialize` has been called (whether or not it warned).

    A cached trace during which this did not change issued no warning and would
    issue none with the switches set differently, so it need not key on them.
    """
    return _consultations


def warn_materialize(primitive: tp.Any, implicit_type: type) -> None:
    """Warns (once per primitive and type) that ``implicit_type`` is being materialized."""
    global _consultations
    _consultations += 1
    key = (str(primitive), implicit_type)
    if key in _warned:
        return
    if (
        not _enabled.get()
        or not _env_allows()
        or not getattr(implicit_type, "warn_on_materialize", True)
    ):
        return
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(
        f"No handler registered for primitive '{primitive}' with "
        f"{implicit_type.__name__} operands; materializing the {implicit_type.__name__}. "
        f"Register one with jaxcore.implicit.register('{primitive}'), or silence this "
        f"with {ENV_VAR}=0 or jaxcore.implicit.materialization_warnings(False).",
        MaterializationWarning,
        stacklevel=3,
    )


def reset_materialization_warnings() -> None:
    """Forgets which (primitive, type) pairs already warned, so they warn again."""
    global _generation
    with _lock:
        _warned.clear()
        _generation += 1

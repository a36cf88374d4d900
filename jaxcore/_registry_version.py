"""One counter that every jaxcore registry bumps when it changes.

jaxcore caches traces of code that consults its registries (primitive handlers in
``jaxcore.implicit``, kernels in ``jaxcore.kernels``). A cache keyed on
:func:`current` cannot replay a trace made before a handler or kernel was
registered or removed.
"""

from __future__ import annotations

import itertools

_counter = itertools.count(1)
_version = 0


def bump() -> None:
    """Records that a registry changed (call after the change is visible)."""
    global _version
    _version = next(_counter)


def current() -> int:
    """The number of registry changes so far; equal values mean nothing changed."""
    return _version

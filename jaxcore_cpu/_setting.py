"""A process-wide choice that can also be scoped with ``with`` (ISA, precision)."""

from __future__ import annotations

from collections.abc import Callable


class Setting:
    """What a setter returns: used as a context manager, it restores the previous choice.

    Attributes:
      previous: the choice in force before the call.
      current: the choice the call made.
    """

    def __init__(self, previous: str, current: str, restore: Callable[[str], None]):
        self.previous = previous
        self.current = current
        self._restore = restore

    def __enter__(self) -> Setting:
        return self

    def __exit__(self, *exc) -> None:
        self._restore(self.previous)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(previous={self.previous!r}, current={self.current!r})"

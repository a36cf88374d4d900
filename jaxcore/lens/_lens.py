"""The ``Lens`` type: a path into nested (frozen) pytrees with get/set/apply."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jaxcore.lens._access import get_step, set_step
from jaxcore.lens._path import Step, parse_steps
from jaxcore.tree._structure import path_str


class Lens:
    """A focus on one location inside nested pytrees (dataclasses, dicts, lists, ...).

    A lens is an immutable path of JAX key entries. ``get`` reads the focused
    value; ``set`` and ``apply`` return an updated copy of the whole object,
    rebuilding every node on the path and sharing everything else, so frozen
    dataclasses can be updated functionally (also inside ``jit``). Dataclass
    nodes are rebuilt with ``dataclasses.replace``: their static-field checks and
    ``__post_init__`` run, unless suppressed with ``jaxcore.tree.no_post_init``.
    """

    __slots__ = ("_steps",)
    _steps: tuple[Step, ...]

    def __init__(self, steps: tuple[Step, ...] = ()) -> None:
        """Builds a lens from a path (prefer :func:`focus`).

        Args:
            steps: JAX key entries from the root to the focused value (or any
                components :func:`focus` accepts; they are parsed here).
        """
        object.__setattr__(self, "_steps", parse_steps(tuple(steps)))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Lens is immutable; cannot set {name!r}")

    @property
    def steps(self) -> tuple[Step, ...]:
        """The key entries from the root to the focused value."""
        return self._steps

    def focus(self, *path: Any) -> Lens:
        """Returns a lens that focuses further into this lens's target.

        Args:
            *path: path components, as accepted by :func:`jaxcore.lens.focus`.

        Returns:
            The composed lens.
        """
        return Lens(self._steps + path)

    def get(self, obj: Any) -> Any:
        """Returns the value at this lens's path in ``obj``.

        Raises:
            LensPathError: naming the first step that does not exist.
        """
        for i, step in enumerate(self._steps):
            obj = get_step(obj, step, self._steps[:i])
        return obj

    def set(self, obj: Any, value: Any) -> Any:
        """Returns a copy of ``obj`` with the focused value replaced by ``value``.

        Raises:
            LensPathError: if the path does not exist or a node cannot be rebuilt.
        """
        return self._update(obj, 0, lambda _: value)

    def apply(self, obj: Any, fn: Callable[[Any], Any]) -> Any:
        """Returns a copy of ``obj`` with the focused value replaced by ``fn(value)``.

        Raises:
            LensPathError: if the path does not exist or a node cannot be rebuilt.
        """
        return self._update(obj, 0, fn)

    def _update(self, obj: Any, index: int, fn: Callable[[Any], Any]) -> Any:
        if index == len(self._steps):
            return fn(obj)
        step = self._steps[index]
        where = self._steps[:index]
        child = get_step(obj, step, where)
        return set_step(obj, step, self._update(child, index + 1, fn), where)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Lens) and other._steps == self._steps

    def __hash__(self) -> int:
        return hash(("jaxcore.lens.Lens", self._steps))

    def __repr__(self) -> str:
        return f"Lens({path_str(self._steps)})"


def _as_lens(path: Any) -> Lens:
    if isinstance(path, Lens):
        return path
    if isinstance(path, (tuple, list)):
        return Lens(tuple(path))
    return Lens((path,))


def focus(*path: Any) -> Lens:
    """Creates a lens on a field path.

    Args:
        *path: components from the root: field or key names (``"params"``, or
            dotted ``"params.w"``; on a mapping a name is a key), integer indices,
            JAX key entries or key paths, or other lenses to compose.

    Returns:
        The lens; ``focus()`` with no components focuses on the root.

    Raises:
        TypeError: for an unsupported component.
        ValueError: for an empty or malformed dotted name.
    """
    return Lens(path)


def get(obj: Any, path: Any) -> Any:
    """Returns the value at ``path`` (a :class:`Lens` or a :func:`focus` path) in ``obj``."""
    return _as_lens(path).get(obj)


def set(obj: Any, path: Any, value: Any) -> Any:  # noqa: A001 - lens vocabulary
    """Returns a copy of ``obj`` with the value at ``path`` replaced by ``value``."""
    return _as_lens(path).set(obj, value)


def apply(obj: Any, path: Any, fn: Callable[[Any], Any]) -> Any:
    """Returns a copy of ``obj`` with the value at ``path`` replaced by ``fn(value)``."""
    return _as_lens(path).apply(obj, fn)

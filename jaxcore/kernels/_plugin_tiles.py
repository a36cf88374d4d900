"""Per-call-site overrides of a plugin's tile table (``jaxcore_gpu.block_config``, ...).

Each plugin keeps its own tile dataclass and table; what they share is how a user
overrides the table for code traced inside a ``with`` block, and how the override
captured at trace time is re-applied when the kernel is lowered. Part of
:mod:`jaxcore.kernels.plugin_api`.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import types
from collections.abc import Iterator, Mapping


class TileOverrides:
    """The active overrides of one plugin's tile dataclass, scoped to a context.

    Args:
      config_type: the plugin's frozen tile dataclass; overrides name its fields.
      name: the name of the underlying :class:`contextvars.ContextVar`.
    """

    def __init__(self, config_type: type, name: str):
        self._type_name = config_type.__name__
        self._fields = frozenset(f.name for f in dataclasses.fields(config_type))
        self._var: contextvars.ContextVar[Mapping[str, int]] = contextvars.ContextVar(
            name, default=types.MappingProxyType({})
        )

    @contextlib.contextmanager
    def override(self, **fields: int) -> Iterator[None]:
        """Overrides the table's tiles for quantized matmuls traced inside the block.

        Nested blocks add to (and may replace) the fields of the enclosing one. The
        override is read when a call is traced: a function whose trace ``jax.jit``
        already cached for the same argument shapes keeps the tiles it was traced with.

        Args:
          **fields: any field of the tile dataclass; the others keep the table's choice.

        Raises:
          TypeError: a name that is not a field of the tile dataclass.
        """
        unknown = sorted(set(fields) - self._fields)
        if unknown:
            raise TypeError(
                f"unknown {self._type_name} field(s) {unknown}; fields are {sorted(self._fields)}"
            )
        token = self._var.set({**self._var.get(), **fields})
        try:
            yield
        finally:
            self._var.reset(token)

    def active(self) -> dict[str, int]:
        """The fields overridden in the current context (a copy)."""
        return dict(self._var.get())

    def current(self) -> tuple[tuple[str, int], ...]:
        """The active overrides as a hashable, sorted tuple (a primitive's static argument)."""
        return tuple(sorted(self._var.get().items()))

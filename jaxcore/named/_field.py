"""``hax.field``: dataclass fields for named modules, static or not."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jaxcore.tree as jtree


def field(
    *,
    static: bool = False,
    default: Any = dataclasses.MISSING,
    default_factory: Any = dataclasses.MISSING,
    init: bool = True,
    repr: bool = True,  # noqa: A002 - mirrors dataclasses.field
    hash: bool | None = None,  # noqa: A002 - mirrors dataclasses.field
    compare: bool = True,
    metadata: Mapping[Any, Any] | None = None,
    kw_only: Any = dataclasses.MISSING,
    axis_names: tuple[str, ...] | None = None,
    converter: Any = None,
) -> Any:
    """A field of a ``jaxcore.tree.dataclass`` (or equinox) module.

    ``static=True`` keeps the value out of the pytree's leaves (axes, sizes, callables,
    flags): ``jit`` treats it as a compile-time constant and ``grad`` never sees it. The
    flag is stored as ``metadata["static"]``, which equinox modules honor too.

    Args:
        static: Whether the field is static (part of the treedef, not a leaf).
        default: The default value.
        default_factory: A zero-argument callable making the default.
        init: Include the field in ``__init__``.
        repr: Include the field in ``__repr__``.
        hash: Include the field in ``__hash__`` (``None``: follow ``compare``).
        compare: Include the field in equality.
        metadata: Extra metadata for the field.
        kw_only: Make the field keyword-only in ``__init__``.
        axis_names: For a field holding a plain (positional) array: the names of its
            dimensions, stored as ``metadata["axis_names"]``. ``pspec_for`` and
            ``infer_resource_partitions`` then shard it like a NamedArray with those axes.
        converter: A function applied to the value at construction; passed on as
            ``metadata["converter"]``, which equinox modules honor.

    Returns:
        A ``dataclasses.Field``.

    Raises:
        ValueError: if both ``default`` and ``default_factory`` are given, or if
            ``axis_names`` is given for a static field (static fields are not arrays).
    """
    if static and axis_names is not None:
        raise ValueError("hax.field: axis_names cannot be given for a static field")
    meta = dict(metadata or {})
    meta["axis_names"] = tuple(axis_names) if axis_names is not None else None
    if converter is not None:
        meta["converter"] = converter
    metadata = meta
    return jtree.field(
        static=static,
        default=default,
        default_factory=default_factory,
        init=init,
        repr=repr,
        hash=hash,
        compare=compare,
        metadata=metadata,
        kw_only=kw_only,
    )

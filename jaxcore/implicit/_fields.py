"""The fields of an implicit array: children or static aux data, and the type registry.

:func:`field` and :func:`aux_field` declare dataclass fields the way ``equinox.field``
does (``static``, ``converter``; fields made by ``equinox.field`` are read the same way),
:func:`field_layout` sorts a class's fields into pytree children and aux data, and
:data:`IMPLICIT_TYPES` holds every :class:`~jaxcore.implicit.ImplicitArray` subclass, so
:func:`is_implicit` is a set lookup. The bottom layer of the package: it imports no other
``jaxcore.implicit`` module.
"""

from __future__ import annotations

import dataclasses
import typing as tp

AUX_METADATA_KEY = "jaxcore_implicit_aux"
# equinox.field's metadata keys, which jaxcore's own field helpers also write.
STATIC_METADATA_KEY = "static"
CONVERTER_METADATA_KEY = "converter"
# Every ImplicitArray subclass, filled by ImplicitArray.__init_subclass__ (see is_implicit).
IMPLICIT_TYPES: set[type] = set()
_LAYOUT_ATTR = "_jaxcore_implicit_layout"


def aux_field(
    metadata: tp.Mapping[str, tp.Any] | None = None,
    *,
    converter: tp.Callable[[tp.Any], tp.Any] | None = None,
    **kwargs: tp.Any,
) -> tp.Any:
    """Declares a dataclass field of an :class:`ImplicitArray` as static metadata.

    Aux fields are not pytree children: they are not traced, batched or
    differentiated, and they are part of the tree structure (so they must be hashable
    and compare by value, like ``int``, ``str``, dtypes or tuples).

    Args:
        metadata: Extra field metadata to keep alongside the aux marker.
        converter: Called on the value after ``__init__`` (see :func:`field`).
        **kwargs: Forwarded to :func:`dataclasses.field` (``default``, ``kw_only``, ...).

    Returns:
        A :class:`dataclasses.Field` marked as auxiliary.
    """
    return field(metadata=metadata, static=True, converter=converter, **kwargs)


def field(
    *,
    static: bool = False,
    converter: tp.Callable[[tp.Any], tp.Any] | None = None,
    metadata: tp.Mapping[str, tp.Any] | None = None,
    **kwargs: tp.Any,
) -> tp.Any:
    """A dataclass field of an :class:`ImplicitArray`, with equinox's ``static``/``converter``.

    ``static=True`` makes it an aux field (as :func:`aux_field`). ``converter`` is
    called on the field's value once the object is built (after ``__init__`` and
    ``__post_init__``, before any ``__check_init__``), as ``equinox.field(converter=)``
    does; it is not called when JAX rebuilds the object from its leaves. Fields made
    by ``equinox.field`` are honoured the same way (their metadata keys are read).

    Args:
        static: Whether the field is static metadata rather than a pytree child.
        converter: A function applied to the value passed to the constructor.
        metadata: Extra field metadata.
        **kwargs: Forwarded to :func:`dataclasses.field` (``default``, ``kw_only``, ...).

    Returns:
        A :class:`dataclasses.Field`.
    """
    merged = dict(metadata) if metadata else {}
    if static:
        merged[AUX_METADATA_KEY] = True
    if converter is not None:
        merged[CONVERTER_METADATA_KEY] = converter
    return dataclasses.field(metadata=merged, **kwargs)


class _Layout(tp.NamedTuple):
    children: tuple[str, ...]
    aux: tuple[str, ...]


_layouts: dict[type, _Layout] = {}


def field_layout(cls: type) -> _Layout:
    """Returns (and caches on ``cls``) which dataclass fields are children and which aux."""
    layout = _layouts.get(cls)
    if layout is not None:
        return layout
    layout = cls.__dict__.get(_LAYOUT_ATTR)
    if layout is not None:
        _layouts[cls] = layout
        return layout
    own_fields = cls.__dict__.get("__dataclass_fields__")
    if own_fields is None:
        declared = [
            name
            for name, annotation in cls.__dict__.get("__annotations__", {}).items()
            if "ClassVar" not in str(annotation)
        ]
        if declared:
            raise TypeError(
                f"{cls.__name__} declares fields {declared} but is not decorated with "
                "@dataclasses.dataclass; ImplicitArray subclasses must be dataclasses."
            )
    children: list[str] = []
    aux: list[str] = []
    for f in dataclasses.fields(cls):
        if f.name in ("shape", "dtype"):
            continue
        static = f.metadata.get(AUX_METADATA_KEY) or f.metadata.get(STATIC_METADATA_KEY)
        (aux if static else children).append(f.name)
    layout = _Layout(tuple(children), tuple(aux))
    setattr(cls, _LAYOUT_ATTR, layout)
    _layouts[cls] = layout
    return layout


# The code of dataclasses.replace (and of the helper it calls on Python 3.13+): while it


def is_implicit(x: tp.Any) -> bool:
    """Returns whether ``x`` is an :class:`ImplicitArray` instance.

    A set lookup of ``type(x)`` rather than ``isinstance``: ``ImplicitArray`` is an ABC,
    whose ``isinstance`` is slow, and this runs several times per intercepted primitive.
    """
    return type(x) in IMPLICIT_TYPES

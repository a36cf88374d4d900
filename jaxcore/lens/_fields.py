"""``LensField`` annotations and the ``HasLensFields`` mixin."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, TypeVar

from jaxcore.lens._lens import Lens
from jaxcore.tree._dataclass import LENS_KEY

T = TypeVar("T")


class _LensFieldMarker:
    """Annotation metadata marking a dataclass attribute as a lens target."""

    def __repr__(self) -> str:
        return "LensField"


LENS_FIELD = _LensFieldMarker()

#: ``LensField[T]`` annotates an attribute of type ``T`` that is meant to be
#: focused with lenses; at runtime it is ``Annotated[T, LENS_FIELD]``.
LensField = Annotated[T, LENS_FIELD]


class HasLensFields:
    """Mixin giving a dataclass ``cls.lens(field, *more)`` for its lens fields.

    Lens fields are those declared with :func:`jaxcore.tree.lens_field`. The
    classmethod checks the first component names one of them, so typos fail at
    lens construction with the list of valid names.
    """

    @classmethod
    def lens_fields(cls) -> tuple[str, ...]:
        """Names of the fields declared with ``lens_field``.

        Raises:
            TypeError: if the class is not a dataclass.
        """
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"{cls.__qualname__} uses HasLensFields but is not a dataclass")
        return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get(LENS_KEY, False))

    @classmethod
    def lens(cls, name: str, *path: Any) -> Lens:
        """Returns a lens on lens field ``name`` (then ``path`` inside it).

        Args:
            name: a field declared with ``lens_field``.
            *path: further components, as for :func:`jaxcore.lens.focus`.

        Returns:
            The lens.

        Raises:
            TypeError: if the class is not a dataclass.
            ValueError: if ``name`` is not a lens field of the class.
        """
        allowed = cls.lens_fields()
        if name not in allowed:
            raise ValueError(
                f"{cls.__qualname__}.lens({name!r}): not a lens field; lens fields are "
                f"{list(allowed)} (declare fields with jaxcore.tree.lens_field)"
            )
        return Lens((name,) + path)

"""C-level readers of several named fields at once, for the pytree flatten functions.

``jaxcore.tree``'s dataclasses read attributes, ``jaxcore.implicit``'s arrays read their
instance ``__dict__``; JAX calls either flatten for every argument of every jitted call, so
both build their readers once per class from :mod:`operator`'s getters.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any


def tuple_getter(
    names: tuple[str, ...], by: Callable[..., Callable[[Any], Any]] = operator.attrgetter
) -> Callable[[Any], tuple[Any, ...]]:
    """Returns a reader of ``names`` that always gives a tuple (empty, one or more values).

    Args:
        names: The fields to read, in order.
        by: ``operator.attrgetter`` (attributes of the object) or ``operator.itemgetter``
            (items of a mapping, e.g. an instance ``__dict__``).

    Returns:
        A function of one object returning the tuple of its ``names``.

    Example:
        >>> import operator
        >>> point = {"x": 1, "y": 2, "z": 3}
        >>> tuple_getter(("z", "x"), by=operator.itemgetter)(point)
        (3, 1)
        >>> tuple_getter(("y",), by=operator.itemgetter)(point)
        (2,)
        >>> tuple_getter(())(point)
        ()
    """
    if not names:
        return lambda obj: ()
    if len(names) == 1:
        single = by(names[0])
        return lambda obj: (single(obj),)
    return by(*names)

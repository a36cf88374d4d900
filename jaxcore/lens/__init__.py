"""jaxcore.lens: functional get/set/apply on paths inside nested frozen pytrees.

Public API (re-exports only; implementations live in private modules).
"""

from jaxcore.lens._access import LensPathError
from jaxcore.lens._fields import HasLensFields, LensField
from jaxcore.lens._lens import Lens, apply, focus, get, set  # noqa: A004 - lens vocabulary
from jaxcore.tree import lens_field

__all__ = [
    "HasLensFields",
    "Lens",
    "LensField",
    "LensPathError",
    "apply",
    "focus",
    "get",
    "lens_field",
    "set",
]

"""jaxcore.tree: frozen pytree dataclasses and tree utilities.

Public API (re-exports only; implementations live in private modules).
"""

from jaxcore.tree._dataclass import dataclass, field, lens_field
from jaxcore.tree._post_init import no_post_init, skip_post_init_if_disabled

__all__ = [
    "dataclass",
    "field",
    "lens_field",
    "no_post_init",
    "skip_post_init_if_disabled",
]

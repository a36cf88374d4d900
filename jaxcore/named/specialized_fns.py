"""Specialized named functions (``hax.specialized_fns``): ``top_k``.

Haliax keeps ``top_k`` in this submodule; it is the same function as ``hax.top_k``.
"""

from jaxcore.named._ops import top_k

__all__ = ["top_k"]

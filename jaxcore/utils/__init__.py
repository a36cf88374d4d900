"""jaxcore.utils: typed JAX transformation wrappers and numerical helpers.

Public API (re-exports only; implementations live in private modules).
"""

from jaxcore.utils._autodiff import non_differentiable, sequential_vmap_with_vjp
from jaxcore.utils._numerics import isin, kahan_summation
from jaxcore.utils._random import key_chain
from jaxcore.utils._tracing import NotJaxCompatibleError, is_traced, no_jax_tracing
from jaxcore.utils._transforms import jit, linearize, shard_map, vectorize

__all__ = [
    "NotJaxCompatibleError",
    "is_traced",
    "isin",
    "jit",
    "kahan_summation",
    "key_chain",
    "linearize",
    "no_jax_tracing",
    "non_differentiable",
    "sequential_vmap_with_vjp",
    "shard_map",
    "vectorize",
]

"""Validation of the float weights handed to the quantisers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

_SUPPORTED = (jnp.float32, jnp.bfloat16, jnp.float16, jnp.float64)


@jax.jit
def _all_finite(x: jax.Array) -> jax.Array:
    """Whether every entry is finite, computed on device (one compiled program per shape)."""
    return jnp.isfinite(x).all()


def check_weight(x, what: str) -> jax.Array:
    """Checks a weight before quantisation and returns it as a jax array.

    Args:
      x: the weight.
      what: the quantiser's name, for messages.

    Returns:
      ``x`` as a jax array.

    Raises:
      TypeError: if ``x`` is not float32/bfloat16/float16/float64.
      ValueError: if ``x`` is not 2-D, or (when its values are known, i.e. outside a
        trace) contains NaN or Inf. Inside ``jit`` the values are unknown; a non-finite
        entry then makes its whole block's scale non-finite, so outputs are NaN, not wrong.
    """
    dtype = getattr(x, "dtype", None)
    dtype = np.dtype(np.asarray(x).dtype if dtype is None else dtype)
    if not any(dtype == np.dtype(d) for d in _SUPPORTED):
        raise TypeError(
            f"{what}: unsupported dtype {dtype}; expected one of "
            f"{[np.dtype(d).name for d in _SUPPORTED]}"
        )
    x = jnp.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"{what}: expected a 2-D (K, N) weight, got shape {x.shape}")
    if not isinstance(x, jax.core.Tracer) and not bool(_all_finite(x)):
        # Only the failing case copies the weight to the host, to name the bad entries.
        host = np.asarray(x, dtype=np.float32)
        bad = np.argwhere(~np.isfinite(host))
        first = tuple(int(i) for i in bad[0])
        raise ValueError(
            f"{what}: weight of shape {x.shape} has {len(bad)} non-finite value(s) (NaN/Inf), "
            f"first at index {first}: {host[first]}"
        )
    return x


def check_block_size(block_size, k: int, *, what: str, even: bool) -> int:
    """Checks that ``block_size`` is a positive (even, if asked) divisor of ``k``.

    Raises:
      TypeError: if it is not an integer.
      ValueError: if it does not divide ``k`` or is odd where an even size is needed.
    """
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)):
        raise TypeError(f"{what}: block_size must be an int, got {block_size!r}")
    block_size = int(block_size)
    if block_size <= 0 or k % block_size:
        raise ValueError(
            f"{what}: block_size={block_size} must be a positive divisor of the blocked axis "
            f"size {k}"
        )
    if even and block_size % 2:
        raise ValueError(f"{what}: block_size={block_size} must be even (two 4-bit values per byte)")
    return block_size

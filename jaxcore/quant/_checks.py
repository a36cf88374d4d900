"""Validation of the float weights handed to the quantizers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

_SUPPORTED = (jnp.float32, jnp.bfloat16, jnp.float16, jnp.float64)


_FLOAT32_MAX = float(np.finfo(np.float32).max)


@jax.jit
def _all_finite(x: jax.Array) -> jax.Array:
    """Whether every entry is finite, computed on device (one compiled program per shape)."""
    return jnp.isfinite(x).all()


def check_weight(x, what: str, check_finite: bool = False) -> jax.Array:
    """Checks a weight before quantization and returns it as a jax array.

    Non-finite values are quantized, not rejected, unless ``check_finite``: a NaN or an
    infinity comes back non-finite from ``materialize`` (see `jaxcore.quant._quantize`), the
    same in eager and jitted code.

    Args:
      x: the weight.
      what: the quantizer's name, for messages.
      check_finite: raise for NaN/Inf instead of quantizing them. Needs concrete values:
        inside ``jit`` it raises a ValueError saying so.

    Returns:
      ``x`` as a jax array.

    Raises:
      TypeError: if ``x`` is not float32/bfloat16/float16/float64.
      ValueError: if ``x`` is not 2-D; if ``check_finite`` and ``x`` holds NaN or Inf (or
        is traced); if a float64 ``x`` holds finite values beyond float32's range, which the
        float32 scales cannot represent (checked when the values are known; inside ``jit``
        those blocks come back non-finite instead).
    """
    dtype = getattr(x, "dtype", None)
    dtype = np.dtype(np.asarray(x).dtype if dtype is None else dtype)
    if not any(dtype == np.dtype(d) for d in _SUPPORTED):
        raise TypeError(
            f"{what}: unsupported dtype {dtype}; expected one of "
            f"{[np.dtype(d).name for d in _SUPPORTED]}"
        )
    traced = isinstance(x, jax.core.Tracer)
    if dtype == np.float64 and not traced:
        # Before jnp.asarray, which (without jax_enable_x64) would turn them into inf.
        host = np.abs(np.asarray(x))
        too_big = np.isfinite(host) & (host > _FLOAT32_MAX)
        if too_big.any():
            raise ValueError(
                f"{what}: float64 weight of shape {host.shape} holds {int(too_big.sum())} "
                f"finite value(s) beyond float32's range ({_FLOAT32_MAX:.6g}), first at index "
                f"{tuple(int(i) for i in np.argwhere(too_big)[0])}: the quantization scales "
                "are float32; scale the weight down before quantizing"
            )
    x = jnp.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"{what}: expected a 2-D (K, N) weight, got shape {x.shape}")
    if check_finite and traced:
        raise ValueError(
            f"{what}: check_finite=True needs the weight's values, which are unknown inside "
            "jit/vmap/grad; check outside the transformation, or leave check_finite=False "
            "(NaN/Inf then come back NaN/Inf from materialize)"
        )
    if check_finite and not bool(_all_finite(x)):
        # Only the failing case copies the weight to the host, to name the bad entries.
        host = np.asarray(x, dtype=np.float32)
        bad = np.argwhere(~np.isfinite(host))
        first = tuple(int(i) for i in bad[0])
        raise ValueError(
            f"{what}: weight of shape {x.shape} has {len(bad)} non-finite value(s) (NaN/Inf), "
            f"first at index {first}: {host[first]}"
        )
    return x


SCALE_DTYPES = ("float32", "float16", "bfloat16")
"""Dtypes the quantizers store block scales in (``scale_dtype``)."""


def check_scale_dtype(scale_dtype, what: str) -> str:
    """The name of a supported scale dtype (`SCALE_DTYPES`), or a TypeError naming them."""
    try:
        name = np.dtype(scale_dtype).name
    except TypeError:
        name = None
    if name not in SCALE_DTYPES:
        raise TypeError(
            f"{what}: scale_dtype={scale_dtype!r} is not supported; expected one of "
            f"{list(SCALE_DTYPES)}"
        )
    return name


def check_scale_range(x: jax.Array, qmax: float, scale_dtype: str, what: str) -> None:
    """Raises when a block's scale (its absmax / ``qmax``) overflows float16 scales.

    Checked when the values are known: inside ``jit`` such blocks come back non-finite
    instead (as blocks holding an infinity do). bfloat16 and float32 cover float32's range.

    Raises:
      ValueError: naming the largest finite value and the largest one the scales allow.
    """
    if scale_dtype != "float16" or isinstance(x, jax.core.Tracer) or x.size == 0:
        return
    largest = float(_largest_finite(x))
    scale = np.float32(largest) / np.float32(qmax)
    with np.errstate(over="ignore"):  # the overflow is what is being checked
        overflows = bool(np.isinf(np.float16(scale)))
    if overflows:
        limit = float(np.finfo(np.float16).max) * qmax
        raise ValueError(
            f"{what}: float16 scales hold at most {float(np.finfo(np.float16).max):g}, but the "
            f"weight's largest finite |value| {largest:.6g} needs a scale of {scale:.6g} "
            f"(|value| / {qmax:g}); with scale_dtype='float16' the weight must stay within "
            f"+-{limit:.6g}: scale it down, or store float32 or bfloat16 scales"
        )


@jax.jit
def _largest_finite(x: jax.Array) -> jax.Array:
    """The largest finite |x| (0 if none), as float32."""
    a = jnp.abs(x.astype(jnp.float32))
    return jnp.max(jnp.where(jnp.isfinite(a), a, jnp.float32(0)), initial=jnp.float32(0))


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
        raise ValueError(
            f"{what}: block_size={block_size} must be even (two 4-bit values per byte)"
        )
    return block_size

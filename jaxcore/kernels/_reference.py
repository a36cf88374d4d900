"""Portable reference kernels for weight-only quantised matmuls.

Every kernel here walks the contracted axis K in steps of whole blocks (or of a divisor of
one large block), dequantises only that (step, N) slab and accumulates in float32, so the
compiled program never holds a float buffer the size of the whole weight. They run on any
XLA backend and are the numerical reference the fused plugin kernels are tested against.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jaxcore.kernels import _formats

# Logical rows dequantised per loop step: large enough to amortise the loop overhead and
# feed the matmul unit, small enough that the slab is a small fraction of a real weight.
_TARGET_STEP_ROWS = 512
# A step smaller than this would make the loop overhead dominate; the kernel then takes the
# whole (large) block in one step instead.
_MIN_STEP_ROWS = 64


def step_rows(fmt: str, k: int, block_size: int, target: int = _TARGET_STEP_ROWS) -> int:
    """Chooses how many logical rows of K one loop step dequantises.

    A step is either a whole number of blocks (when blocks are small) or a divisor of one
    block (when a block, e.g. per-channel int8 with block_size == K, is large), so each step
    needs a contiguous run of scale rows. Packed formats need an even step.

    Args:
      fmt: storage format name.
      k: logical contracted size.
      block_size: logical rows per block (divides ``k``).
      target: the largest step wanted.

    Returns:
      The step, a divisor of ``k``.
    """
    if block_size <= target:
        n_blocks = k // block_size
        group = max(g for g in range(1, n_blocks + 1) if n_blocks % g == 0 and g * block_size <= target)
        return group * block_size
    multiple = 2 if fmt in _formats.PACKED_FORMATS else 1
    divisors = [d for d in range(multiple, target + 1, multiple) if block_size % d == 0]
    best = max(divisors) if divisors else block_size
    return best if best >= _MIN_STEP_ROWS else block_size


def _check_operand(name: str, x2d: jax.Array, size: int, what: str) -> None:
    if x2d.ndim != 2 or x2d.shape[1] != size:
        raise ValueError(f"{name} must have shape (M, {size}) to match the weight's {what}, got {x2d.shape}")
    if not jnp.issubdtype(x2d.dtype, jnp.floating):
        raise TypeError(f"{name} must be floating point, got dtype {x2d.dtype}")


def _slab_loop(fmt: str, qvalue: jax.Array, scale: jax.Array, block_size: int, k: int):
    """Returns (n_steps, step, load) where ``load(i)`` gives step i's (start, slab reader)."""
    step = step_rows(fmt, k, block_size)
    per_row = _formats.rows_per_qvalue_row(fmt)
    scale_rows = max(step // block_size, 1)
    scale_f32 = scale.astype(jnp.float32)

    def load(i, *, scaled: bool = True):
        start = i * step
        qslab = lax.dynamic_slice_in_dim(qvalue, start // per_row, step // per_row, axis=0)
        if not scaled:
            return start, _formats.decode_unscaled(fmt, qslab)
        srows = lax.dynamic_slice_in_dim(scale_f32, start // block_size, scale_rows, axis=0)
        return start, _formats.dequantize_slab(fmt, qslab, srows, block_size)

    return k // step, step, load


def reference_quantized_matmul(
    x2d: jax.Array,
    qvalue: jax.Array,
    scale: jax.Array,
    *,
    fmt: str,
    block_size: int,
    out_dtype=None,
    interpret: bool = False,
) -> jax.Array:
    """Computes ``x2d @ W`` for a quantised (K, N) weight W, one slab of K at a time.

    Args:
      x2d: (M, K) floating activations.
      qvalue: stored codes in the layout of ``fmt`` (see `jaxcore.kernels._formats`).
      scale: (K // block_size, N) float block scales.
      fmt: ``"int8"``, ``"int4"`` or ``"nf4"``.
      block_size: logical rows of K per scale.
      out_dtype: result dtype (default: ``x2d.dtype``); accumulation is float32.
      interpret: accepted for the kernel signature; the reference has no interpret mode.

    Returns:
      (M, N) array of ``out_dtype``.
    """
    del interpret
    k, n = _formats.check_layout(fmt, qvalue, scale, block_size)
    _check_operand("x2d", x2d, k, "contracted size K")
    out_dtype = x2d.dtype if out_dtype is None else out_dtype
    n_steps, step, load = _slab_loop(fmt, qvalue, scale, block_size, k)
    x32 = x2d.astype(jnp.float32)

    def body(i, acc):
        start, w = load(i)
        xs = lax.dynamic_slice_in_dim(x32, start, step, axis=1)
        return acc + jnp.dot(xs, w, precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32)

    acc = lax.fori_loop(0, n_steps, body, jnp.zeros((x2d.shape[0], n), jnp.float32))
    return acc.astype(out_dtype)


def reference_quantized_matmul_transposed(
    x2d: jax.Array,
    qvalue: jax.Array,
    scale: jax.Array,
    *,
    fmt: str,
    block_size: int,
    out_dtype=None,
) -> jax.Array:
    """Computes ``x2d @ W.T`` for a quantised (K, N) weight W, one slab of K at a time.

    This is the product needed for the gradient of ``x @ W`` with respect to ``x``, and for
    contracting a quantised weight along its output axis (e.g. tied embeddings).

    Args:
      x2d: (M, N) floating activations.
      qvalue: stored codes in the layout of ``fmt``.
      scale: (K // block_size, N) float block scales.
      fmt: ``"int8"``, ``"int4"`` or ``"nf4"``.
      block_size: logical rows of K per scale.
      out_dtype: result dtype (default: ``x2d.dtype``); accumulation is float32.

    Returns:
      (M, K) array of ``out_dtype``.
    """
    k, n = _formats.check_layout(fmt, qvalue, scale, block_size)
    _check_operand("x2d", x2d, n, "output size N")
    out_dtype = x2d.dtype if out_dtype is None else out_dtype
    n_steps, step, load = _slab_loop(fmt, qvalue, scale, block_size, k)
    x32 = x2d.astype(jnp.float32)

    def body(i, out):
        start, w = load(i)
        ys = lax.dot_general(
            x32, w, (((1,), (1,)), ((), ())),
            precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32,
        )
        return lax.dynamic_update_slice_in_dim(out, ys, start, axis=1)

    out = lax.fori_loop(0, n_steps, body, jnp.zeros((x2d.shape[0], k), jnp.float32))
    return out.astype(out_dtype)


def reference_scale_gradient(
    a2d: jax.Array,
    b2d: jax.Array,
    qvalue: jax.Array,
    scale: jax.Array,
    *,
    fmt: str,
    block_size: int,
) -> jax.Array:
    """Gradient of ``sum(b2d * (a2d @ W))`` with respect to the block scales of W.

    With W[k, n] = U[k, n] * scale[k // block_size, n] (U the decoded, unscaled codes), the
    derivative is ``sum over k in block, m of a[m, k] * U[k, n] * b[m, n]``; it is computed a
    slab at a time like the matmuls, never forming U in full.

    Args:
      a2d: (M, K) operand contracted with W's rows.
      b2d: (M, N) weights of the output entries (the output cotangent).
      qvalue: stored codes.
      scale: (K // block_size, N) block scales (only their shape and dtype are used).
      fmt: storage format name.
      block_size: logical rows per block.

    Returns:
      Array like ``scale``.
    """
    k, n = _formats.check_layout(fmt, qvalue, scale, block_size)
    _check_operand("a2d", a2d, k, "contracted size K")
    _check_operand("b2d", b2d, n, "output size N")
    n_steps, step, load = _slab_loop(fmt, qvalue, scale, block_size, k)
    a32 = a2d.astype(jnp.float32)
    b32 = b2d.astype(jnp.float32)
    rows_per_step = max(step // block_size, 1)

    def body(i, grad):
        start, u = load(i, scaled=False)
        a_slab = lax.dynamic_slice_in_dim(a32, start, step, axis=1)
        t = lax.dot_general(
            a_slab, b32, (((0,), (0,)), ((), ())),
            precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32,
        )
        partial = (t * u).reshape(rows_per_step, step // rows_per_step, n).sum(axis=1)
        row = start // block_size
        current = lax.dynamic_slice_in_dim(grad, row, rows_per_step, axis=0)
        return lax.dynamic_update_slice_in_dim(grad, current + partial, row, axis=0)

    grad = lax.fori_loop(0, n_steps, body, jnp.zeros(scale.shape, jnp.float32))
    return grad.astype(scale.dtype)

"""Portable reference kernels for weight-only quantized matmuls.

Every kernel here walks the contracted axis K in steps of whole blocks (or of a divisor of
one large block), dequantizes only that (step, N) slab and accumulates in float32, so the
compiled program never holds a float buffer the size of the whole weight. They run on any
XLA backend and are the numerical reference the fused plugin kernels are tested against.

The 4-bit formats pack logical rows 2i and 2i + 1 into one byte row. Rather than
interleaving the unpacked rows, the kernels work in stored-row coordinates: the low nibbles
meet the even columns of the activations and the high nibbles the odd ones.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jaxcore.kernels import _formats

# Logical rows dequantized per loop step: large enough to amortise the loop overhead and
# feed the matmul unit, small enough that the slab is a small fraction of a real weight.
_TARGET_STEP_ROWS = 512
# A step smaller than this would make the loop overhead dominate; the kernel then takes the
# whole (large) block in one step instead.
_MIN_STEP_ROWS = 64
_HIGHEST = lax.Precision.HIGHEST


def step_rows(fmt: str, k: int, block_size: int, target: int = _TARGET_STEP_ROWS) -> int:
    """Chooses how many logical rows of K one loop step dequantizes.

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
        group = max(
            g for g in range(1, n_blocks + 1) if n_blocks % g == 0 and g * block_size <= target
        )
        return group * block_size
    multiple = 2 if fmt in _formats.PACKED_FORMATS else 1
    divisors = [d for d in range(multiple, target + 1, multiple) if block_size % d == 0]
    best = max(divisors) if divisors else block_size
    return best if best >= _MIN_STEP_ROWS else block_size


def _check_operand(name: str, x2d: jax.Array, size: int, what: str) -> None:
    if x2d.ndim != 2 or x2d.shape[1] != size:
        raise ValueError(
            f"{name} must have shape (M, {size}) to match the weight's {what}, got {x2d.shape}"
        )
    if not jnp.issubdtype(x2d.dtype, jnp.floating):
        raise TypeError(f"{name} must be floating point, got dtype {x2d.dtype}")


class _Slabs:
    """Stored-row geometry of one quantized weight and readers for its loop steps."""

    def __init__(self, fmt: str, qvalue: jax.Array, scale: jax.Array, block_size: int, k: int):
        self.fmt = fmt
        self.qvalue = qvalue
        self.scale = scale.astype(jnp.float32)
        per_row = _formats.rows_per_qvalue_row(fmt)
        self.parts = per_row  # logical rows per stored row: 1 (int8) or 2 (packed)
        step = step_rows(fmt, k, block_size)
        self.step = step // per_row  # stored rows per step
        self.block = block_size // per_row  # stored rows per scale row
        self.scale_rows = max(step // block_size, 1)
        self.n_steps = k // step

    def split_columns(self, x32: jax.Array) -> tuple[jax.Array, ...]:
        """Splits (M, K) activations into one (M, K // parts) array per nibble."""
        if self.parts == 1:
            return (x32,)
        return tuple(x32[:, p :: self.parts] for p in range(self.parts))

    def merge_columns(self, outs: tuple[jax.Array, ...]) -> jax.Array:
        """Inverse of `split_columns` for (M, K // parts) results: interleaves them to (M, K)."""
        if self.parts == 1:
            return outs[0]
        m, half = outs[0].shape
        return jnp.stack(outs, axis=-1).reshape(m, half * self.parts)

    def start(self, i):
        return i * self.step

    def read(self, i, *, scaled: bool = True) -> tuple[jax.Array, ...]:
        """Step ``i``'s float32 (step, N) slab for each nibble, scaled unless asked not to."""
        start = self.start(i)
        qslab = lax.dynamic_slice_in_dim(self.qvalue, start, self.step, axis=0)
        parts = _formats.decode_parts(self.fmt, qslab)
        if not scaled:
            return parts
        srows = lax.dynamic_slice_in_dim(self.scale, start // self.block, self.scale_rows, axis=0)
        return tuple(_formats.apply_block_scales(u, srows, self.block) for u in parts)

    def columns(self, x_parts: tuple[jax.Array, ...], i) -> tuple[jax.Array, ...]:
        """Step ``i``'s (M, step) column slab of each split activation."""
        return tuple(lax.dynamic_slice_in_dim(x, self.start(i), self.step, axis=1) for x in x_parts)


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
    """Computes ``x2d @ W`` for a quantized (K, N) weight W, one slab of K at a time.

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
    slabs = _Slabs(fmt, qvalue, scale, block_size, k)
    x_parts = slabs.split_columns(x2d.astype(jnp.float32))

    def body(i, acc):
        for xs, w in zip(slabs.columns(x_parts, i), slabs.read(i)):
            acc = acc + jnp.dot(xs, w, precision=_HIGHEST, preferred_element_type=jnp.float32)
        return acc

    acc = lax.fori_loop(0, slabs.n_steps, body, jnp.zeros((x2d.shape[0], n), jnp.float32))
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
    """Computes ``x2d @ W.T`` for a quantized (K, N) weight W, one slab of K at a time.

    This is the product needed for the gradient of ``x @ W`` with respect to ``x``, and for
    contracting a quantized weight along its output axis (e.g. tied embeddings).

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
    slabs = _Slabs(fmt, qvalue, scale, block_size, k)
    x32 = x2d.astype(jnp.float32)
    contract_n = (((1,), (1,)), ((), ()))

    def body(i, outs):
        return tuple(
            lax.dynamic_update_slice_in_dim(
                out,
                lax.dot_general(
                    x32, w, contract_n, precision=_HIGHEST, preferred_element_type=jnp.float32
                ),
                slabs.start(i),
                axis=1,
            )
            for out, w in zip(outs, slabs.read(i))
        )

    init = tuple(
        jnp.zeros((x2d.shape[0], k // slabs.parts), jnp.float32) for _ in range(slabs.parts)
    )
    outs = lax.fori_loop(0, slabs.n_steps, body, init)
    return slabs.merge_columns(outs).astype(out_dtype)


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
    slabs = _Slabs(fmt, qvalue, scale, block_size, k)
    a_parts = slabs.split_columns(a2d.astype(jnp.float32))
    b32 = b2d.astype(jnp.float32)
    contract_m = (((0,), (0,)), ((), ()))

    def body(i, grad):
        weighted = 0.0
        for a_slab, u in zip(slabs.columns(a_parts, i), slabs.read(i, scaled=False)):
            t = lax.dot_general(
                a_slab, b32, contract_m, precision=_HIGHEST, preferred_element_type=jnp.float32
            )
            weighted = weighted + t * u
        partial = weighted.reshape(slabs.scale_rows, slabs.step // slabs.scale_rows, n).sum(axis=1)
        row = slabs.start(i) // slabs.block
        current = lax.dynamic_slice_in_dim(grad, row, slabs.scale_rows, axis=0)
        return lax.dynamic_update_slice_in_dim(grad, current + partial, row, axis=0)

    grad = lax.fori_loop(0, slabs.n_steps, body, jnp.zeros(scale.shape, jnp.float32))
    return grad.astype(scale.dtype)

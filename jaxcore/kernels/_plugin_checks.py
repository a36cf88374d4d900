"""Argument checks of the plugin kernels: the operand contract of ``quantized_matmul``.

Every backend plugin's fused quantized matmul validates its operands here, so the kernels
of all platforms accept (and reject, with the same errors) exactly the same calls. Part of
:mod:`jaxcore.kernels.plugin_api`.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from jaxcore.kernels._formats import FORMATS, PACKED_FORMATS

KERNEL_DTYPES = (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
"""Activation dtypes the fused kernels compute in; others take the XLA path."""


@dataclasses.dataclass(frozen=True)
class Problem:
    """The static shape of one quantized matmul, in logical and packed rows.

    Attributes:
      m: rows of the activations.
      k: contracted size (logical rows of the weight).
      n: output columns.
      fmt: ``"int8"``, ``"int4"`` or ``"nf4"``.
      block_size: logical weight rows sharing one scale.
      packed: whether two weight rows share a byte (int4, NF4).
      rows_per_qvalue_row: logical weight rows per ``qvalue`` row (2 if ``packed``, else 1).
    """

    m: int
    k: int
    n: int
    fmt: str
    block_size: int

    @property
    def packed(self) -> bool:
        return self.fmt in PACKED_FORMATS

    @property
    def rows_per_qvalue_row(self) -> int:
        return 2 if self.packed else 1

    @property
    def k_packed(self) -> int:
        """Rows of ``qvalue``: K for int8, K // 2 for the nibble-packed formats."""
        return self.k // self.rows_per_qvalue_row

    @property
    def group_packed(self) -> int:
        """``qvalue`` rows sharing one scale row."""
        return self.block_size // self.rows_per_qvalue_row


def check_problem(x, qvalue, scale, *, fmt: str, block_size: int) -> Problem:
    """Validates the operands of a quantized matmul against the layout contract.

    Args:
      x: dense activations, shape (M, K), a floating dtype.
      qvalue: int8 (K, N) for ``int8``; uint8 (K // 2, N) for ``int4``/``nf4``.
      scale: floating (K // block_size, N), the per-block scale (absmax for NF4);
        the kernels read it as float32.
      fmt: the weight format.
      block_size: weight rows per scale row; divides K (even for packed formats).

    Returns:
      The :class:`Problem` describing the shapes.

    Raises:
      ValueError: unknown format, or shapes that do not fit the layout.
      TypeError: wrong dtypes.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown quantized format {fmt!r}; expected one of {FORMATS}")
    if x.ndim != 2:
        raise ValueError(f"x must be 2-D (M, K), got shape {x.shape}")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"x must have a floating dtype, got {x.dtype}")
    m, k = x.shape
    if qvalue.ndim != 2 or scale.ndim != 2:
        raise ValueError(
            f"qvalue and scale must be 2-D, got shapes {qvalue.shape} and {scale.shape}"
        )
    n = qvalue.shape[1]
    if block_size <= 0 or k % block_size:
        raise ValueError(f"block_size {block_size} must be positive and divide K={k}")
    problem = Problem(m=m, k=k, n=n, fmt=fmt, block_size=block_size)
    want_dtype = jnp.uint8 if problem.packed else jnp.int8
    if qvalue.dtype != want_dtype:
        raise TypeError(f"{fmt} qvalue must be {jnp.dtype(want_dtype).name}, got {qvalue.dtype}")
    if problem.packed and block_size % 2:
        raise ValueError(f"{fmt} needs an even block_size, got {block_size}")
    if qvalue.shape != (problem.k_packed, n):
        raise ValueError(
            f"{fmt} qvalue for x of shape {x.shape} must have shape "
            f"{(problem.k_packed, n)}, got {qvalue.shape}"
        )
    if scale.shape != (k // block_size, n):
        raise ValueError(
            f"scale must have shape (K // block_size, N) = {(k // block_size, n)}, "
            f"got {scale.shape}"
        )
    if not jnp.issubdtype(scale.dtype, jnp.floating):
        raise TypeError(f"scale must have a floating dtype, got {scale.dtype}")
    return problem


def prepare_operands(
    x, qvalue, scale, *, fmt: str, block_size: int, out_dtype=None, scale_dtypes=(jnp.float32,)
):
    """What every plugin kernel does first: check the operands and resolve the defaults.

    Args:
      x, qvalue, scale, fmt, block_size: as for :func:`check_problem`.
      out_dtype: the requested result dtype, or ``None`` for ``x.dtype``.
      scale_dtypes: the scale dtypes the kernel reads as they are (16-bit scales, which
        ``jaxcore.quant``'s ``scale_dtype`` stores, save a kernel that converts them in
        place a float32 copy per call); others are converted to float32.

    Returns:
      ``(problem, scale, out_dtype)``: the :class:`Problem`, the scale (float32 unless its
      dtype is in ``scale_dtypes``), and the result dtype as a ``numpy.dtype``.

    Raises:
      ValueError, TypeError: as :func:`check_problem`.
    """
    problem = check_problem(x, qvalue, scale, fmt=fmt, block_size=block_size)
    out_dtype = jnp.dtype(out_dtype if out_dtype is not None else x.dtype)
    if not any(scale.dtype == jnp.dtype(d) for d in scale_dtypes):
        scale = scale.astype(jnp.float32)
    return problem, scale, out_dtype

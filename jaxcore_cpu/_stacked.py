"""The CPU kernel of ``jaxcore.kernels``' stacked product: one matrix of a stack, in place.

``plugin_api.STACKED_KERNEL_NAME``: a scan over stacked quantized layers hands the kernel
the whole stack and the layer index (FFI targets ``..._stacked``, which view the layer where
it lies), instead of a copy XLA would write of the layer on every step. The decisions are
those of the per-matrix registry implementations (which M run native, which precision), so
a stacked layer computes exactly what the same layer stored on its own computes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import numpy as np
from jax import lax

from jaxcore.kernels import plugin_api as _plugin_api

from . import _library, _matmul
from ._matmul import PRECISIONS

_STATIC = ("fmt", "block_size", "out_dtype", "path", "precision", "transposed")


def _layer(operands, index):
    return [lax.dynamic_index_in_dim(a, index, 0, keepdims=False) for a in operands]


def _ffi_kernel(x, qvalue, *operands, platform, **static):
    del platform  # only lowered for cpu
    *scales, index = operands
    if len(scales) == 3:  # double-quantized: codes, group scales, offsets
        dq_group = np.int64(_plugin_api.DQ_GROUP_SIZE)
        target = _library.DQ_STACKED_TARGET_NAME
        return _matmul._ffi(target, x, qvalue, *scales, index=index, dq_group=dq_group, **static)
    return _matmul._ffi(_library.STACKED_TARGET_NAME, x, qvalue, *scales, index=index, **static)


def _reference(x, qvalue, *operands, fmt, block_size, out_dtype, path, precision, transposed):
    del path, precision
    *scales, index = operands
    qvalue, *scales = _layer([qvalue, *scales], index)
    if len(scales) == 3:
        scales = [_plugin_api.expand_dq_scales(*scales)]
    product = _matmul._reference_t if transposed else _matmul._reference
    extra = {} if transposed else {"path": "auto", "precision": "float32"}
    return product(x, qvalue, *scales, fmt=fmt, block_size=block_size, out_dtype=out_dtype, **extra)


_bind = _plugin_api.platform_primitive(
    "jaxcore_cpu_quantized_matmul_stacked",
    _ffi_kernel,
    _reference,
    ("cpu",),
    fallback_for_export=True,
    columns=lambda x, qvalue, *, fmt, transposed, **_: _matmul._columns(fmt, qvalue, transposed),
)
_call = jax.jit(functools.partial(_matmul._native_call, _bind), static_argnames=_STATIC)


def _serves(m: int, fmt: str, transposed: bool, dq: bool, scale_dtype, precision: str) -> bool:
    """Whether the native kernel reads the stack in place: where the per-matrix registry
    implementation would run it, and the kernels read the stack's scales as stored (others
    take the fallback, which converts the one matrix's scales)."""
    if transposed:
        # The transposed kernels read no double-quantized scales: those take the fallback.
        return (
            not dq
            and scale_dtype in _matmul.SCALE_DTYPES
            and _matmul._transposed_native_serves(m, fmt)
        )
    return (dq or scale_dtype in _matmul.SCALE_DTYPES) and _matmul._native_serves(m, precision)


def _make_impl(precision: str) -> Callable[..., jax.Array]:
    def impl(x2d, qvalue, *operands, fmt, block_size, out_dtype, transposed, fallback):
        dq = len(operands) == 4
        if not _serves(x2d.shape[0], fmt, transposed, dq, operands[0].dtype, precision):
            return fallback(x2d, qvalue, *operands)
        return _call(
            x2d,
            qvalue,
            *operands,
            fmt=fmt,
            block_size=int(block_size),
            out_dtype=np.dtype(out_dtype),
            path="auto",
            precision="float32" if transposed else precision,
            transposed=bool(transposed),
        )

    impl.__name__ = impl.__qualname__ = f"quantized_matmul_stacked_impl_{precision}"
    impl.__doc__ = f"""Kernel ``{_plugin_api.STACKED_KERNEL_NAME}`` for ``"cpu"``, ``precision="{precision}"``.

    ``impl(x2d, qvalue, *scales, index, *, fmt, block_size, out_dtype, transposed, fallback)``:
    the native kernel on matrix ``index`` of the stack where the per-matrix implementation
    would run it natively (``x @ W.T`` always in float32, and never with double-quantized
    scales) with scales it reads as stored, else ``fallback``, jaxcore's sliced per-matrix
    product.
    """
    return impl


STACKED_IMPLS_BY_PRECISION: dict[str, Callable[..., jax.Array]] = {
    name: _make_impl(name) for name in PRECISIONS
}
"""The stacked kernel's registry implementation per precision (as ``IMPLS_BY_PRECISION``)."""

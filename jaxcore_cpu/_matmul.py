"""The native CPU quantized matmul as a JAX operation: an XLA FFI call into the library.

:func:`quantized_matmul` binds a primitive (``jaxcore_cpu_quantized_matmul``) that lowers,
on CPU, to a custom call of the FFI target :data:`jaxcore_cpu._library.TARGET_NAME`, which
runs on XLA's intra-op thread pool. Two cases lower to jaxcore's portable reference kernel
instead: any platform other than CPU (a branch of a multi-platform program that never runs
there), and programs lowered for ``jax.export``, whose artifacts must not depend on a
custom call that only this library provides.

The kernels read float32 or bfloat16 activations, the stored codes exactly as
``jaxcore.kernels`` lays them out, and float32, float16 or bfloat16 block scales (16-bit
ones converted inside the call, a task's blocks at a time), and write float32 or bfloat16;
other dtypes are converted around the call. :func:`quantized_matmul_dq` (a second
FFI target) takes NF4's double-quantized scales as stored (int8 codes, group scales, offset)
and expands them inside the call, so no float32 copy is written by XLA on every call.
"""

from __future__ import annotations

import functools
import platform
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxcore.kernels import plugin_api as _plugin_api
from jaxcore.kernels import reference_quantized_matmul, reference_quantized_matmul_transposed

from . import _library

PATHS: dict[str, int] = {"auto": 0, "gemv": 1, "gemm": 2}
"""Kernel paths: ``auto`` picks GEMV for small M and the cache-blocked GEMM otherwise."""

PRECISIONS: dict[str, int] = {"float32": 0, "int8": 1}
"""How activations enter the products.

``float32`` (the default) is exact: decoded weights times float32 activations, float32
accumulation, equal to ``x @ dequantize(W)`` up to float32 rounding. ``int8`` quantizes each
activation row to int8 with one scale per 32 values along K (per 64 for int4 and NF4 whose
``block_size`` is a multiple of 64) and sums integer products, as llama.cpp's CPU kernels
do: roughly twice the arithmetic rate where the weights are 4-bit, at a relative error of
about 1e-3 (worst seen 6e-3 of ``sum |x| |w|``; NF4 codes also round to the int8 grid). It applies to weights whose ``block_size`` is a multiple of 32, and to
every M with the AVX2, AVX-VNNI and AVX-512 VNNI kernels (integer products outrun float32
FMAs there) or to M <= 64 with the portable ones; other calls run in ``float32``. Under
``int8`` a row whose activations hold NaN or infinity comes out all NaN (no int8 code stands
for them).
"""

_FORMAT_CODES = {"int8": 0, "int4": 1, "nf4": 2}
_NATIVE_DTYPES = (np.dtype(jnp.float32), np.dtype(jnp.bfloat16))
SCALE_DTYPES = (np.dtype(jnp.float32), np.dtype(jnp.float16), np.dtype(jnp.bfloat16))
"""Scale dtypes the kernels read as stored (16-bit ones are converted per task, in cache,
so they cost half the bytes from memory); others are converted to float32 first."""


def _logical_rows(fmt: str, qvalue) -> int:
    """K of a weight whose stored codes are ``qvalue`` (..., rows, N) (two rows per byte for
    4-bit); the leading axis, if any, stacks matrices."""
    return qvalue.shape[-2] * (1 if fmt == "int8" else 2)


def _columns(fmt: str, qvalue, transposed: bool) -> int:
    """The result's columns: N of ``x @ W``, or K of ``x @ W.T``."""
    return _logical_rows(fmt, qvalue) if transposed else qvalue.shape[-1]


def _ffi(
    target,
    x,
    qvalue,
    *scales,
    fmt,
    block_size,
    out_dtype,
    path,
    precision,
    transposed=False,
    index=None,
    **extra,
):
    """The custom call of FFI target ``target`` with the attributes every target reads:
    ``x @ W`` (M, N), or with ``transposed`` ``x @ W.T`` (M, K); with ``index``, of matrix
    ``index`` of the stack ``qvalue`` / ``scales`` (the ``..._stacked`` targets)."""
    shape = jax.ShapeDtypeStruct((x.shape[0], _columns(fmt, qvalue, transposed)), out_dtype)
    weights = (qvalue, *scales) if index is None else (index, qvalue, *scales)
    return jax.ffi.ffi_call(target, shape)(
        x,
        *weights,
        fmt=np.int32(_FORMAT_CODES[fmt]),
        block_size=np.int64(block_size),
        path=np.int32(PATHS[path]),
        precision=np.int32(PRECISIONS[precision]),
        transposed=np.int32(transposed),
        **extra,
    )


def _ffi_kernel(x, qvalue, scale, *, platform, **static):
    del platform  # only lowered for cpu
    return _ffi(_library.TARGET_NAME, x, qvalue, scale, **static)


def _reference(x, qvalue, scale, *, fmt, block_size, out_dtype, path, precision):
    del path, precision
    return reference_quantized_matmul(
        x, qvalue, scale, fmt=fmt, block_size=block_size, out_dtype=out_dtype
    )


_bind = _plugin_api.platform_primitive(
    "jaxcore_cpu_quantized_matmul",
    _ffi_kernel,
    _reference,
    ("cpu",),
    fallback_for_export=True,
)


def _ffi_kernel_t(x, qvalue, scale, *, platform, **static):
    del platform  # only lowered for cpu
    return _ffi(
        _library.TARGET_NAME, x, qvalue, scale, precision="float32", transposed=True, **static
    )


def _reference_t(x, qvalue, scale, *, fmt, block_size, out_dtype, path="auto"):
    del path
    return reference_quantized_matmul_transposed(
        x, qvalue, scale, fmt=fmt, block_size=block_size, out_dtype=out_dtype
    )


_bind_t = _plugin_api.platform_primitive(
    "jaxcore_cpu_quantized_matmul_transposed",
    _ffi_kernel_t,
    _reference_t,
    ("cpu",),
    fallback_for_export=True,
    columns=lambda x, qvalue, *, fmt, **_: _logical_rows(fmt, qvalue),
)


def _ffi_kernel_dq(x, qvalue, codes, group_scale, offset, *, platform, **static):
    del platform  # only lowered for cpu
    dq_group = np.int64(_plugin_api.DQ_GROUP_SIZE)
    return _ffi(
        _library.DQ_TARGET_NAME, x, qvalue, codes, group_scale, offset, dq_group=dq_group, **static
    )


def _reference_dq(x, qvalue, codes, group_scale, offset, **static):
    scale = _plugin_api.expand_dq_scales(codes, group_scale, offset)
    return _reference(x, qvalue, scale, **static)


_bind_dq = _plugin_api.platform_primitive(
    "jaxcore_cpu_quantized_matmul_dq",
    _ffi_kernel_dq,
    _reference_dq,
    ("cpu",),
    fallback_for_export=True,
)


def _native_call(bind, x2d, *operands, out_dtype, **static):
    """``bind`` with the activations and result in dtypes the kernels read and write."""
    if x2d.dtype not in _NATIVE_DTYPES:
        x2d = x2d.astype(jnp.float32)
    native_out = out_dtype if out_dtype in _NATIVE_DTYPES else np.dtype(jnp.float32)
    return bind(x2d, *operands, out_dtype=native_out, **static).astype(out_dtype)


# Jit boundaries around the binds: eager calls compile once per shape and settings instead
# of tracing the custom call every time; under an outer jit they are inlined.
_STATIC = ("fmt", "block_size", "out_dtype", "path", "precision")


def _check_settings(path: str, precision: str) -> None:
    if path not in PATHS:
        raise ValueError(f"unknown kernel path {path!r}; expected one of {tuple(PATHS)}")
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; expected one of {tuple(PRECISIONS)}")


def _launch(call, problem, operands, *, block_size, out_dtype, **static) -> jax.Array:
    """``call(*operands, ...)`` once the library has registered its FFI targets (before
    anything is compiled); zeros without a call where there is nothing to read or sum."""
    _library.load()
    if 0 in (problem.m, problem.n, problem.k):
        return jnp.zeros((problem.m, problem.n), out_dtype)
    return call(*operands, block_size=int(block_size), out_dtype=np.dtype(out_dtype), **static)


def _prepare(x2d, qvalue, scale, fmt, block_size, out_dtype):
    """``plugin_api.prepare_operands`` keeping the scale dtypes the kernels read."""
    return _plugin_api.prepare_operands(
        x2d,
        qvalue,
        scale,
        fmt=fmt,
        block_size=block_size,
        out_dtype=out_dtype,
        scale_dtypes=SCALE_DTYPES,
    )


def _check_dq_scales(codes, group_scale, offset) -> None:
    if codes.ndim != 2 or codes.dtype != np.int8:
        raise TypeError(
            f"double-quant scale codes must be a 2-D int8 array, got {codes.dtype} {codes.shape}"
        )
    groups = -(-codes.size // _plugin_api.DQ_GROUP_SIZE)
    if group_scale.shape != (groups,) or not jnp.issubdtype(group_scale.dtype, jnp.floating):
        raise ValueError(
            f"group_scale must be a floating ({groups},) array (one per "
            f"{_plugin_api.DQ_GROUP_SIZE} codes of {codes.shape}), got "
            f"{group_scale.dtype} {group_scale.shape}"
        )
    if np.size(offset) != 1 or not jnp.issubdtype(jnp.result_type(offset), jnp.floating):
        raise ValueError(f"offset must be one floating value, got shape {np.shape(offset)}")


def quantized_matmul_dq(
    x2d: jax.Array,
    qvalue: jax.Array,
    codes: jax.Array,
    group_scale: jax.Array,
    offset: jax.Array,
    *,
    fmt: str = "nf4",
    block_size: int,
    out_dtype=None,
    path: str = "auto",
    precision: str = "float32",
) -> jax.Array:
    """:func:`quantized_matmul` with NF4's double-quantized block scales as stored.

    ``scale = min(codes * group_scale[i // 256] + offset, float32 max)`` over the flat index
    ``i`` of ``codes`` (``jaxcore.quant.ArrayNF4.quantize(..., double_quant=True)``'s
    ``scale``, ``scale_group_scale`` and ``scale_offset``); the kernel expands them into its
    own workspace, where XLA would write a float32 copy on every call.

    Args:
      x2d, qvalue, fmt, block_size, out_dtype, path, precision: as :func:`quantized_matmul`.
      codes: int8 (K // block_size, N) scale codes.
      group_scale: floating (ceil(codes.size / 256),) group scales (read as float32).
      offset: one floating value (read as float32).

    Returns:
      (M, N) array of ``out_dtype``.

    Raises:
      ValueError, TypeError: operands that break the layout, named.
    """
    _check_settings(path, precision)
    _check_dq_scales(codes, group_scale, offset)
    spec = jax.ShapeDtypeStruct(codes.shape, jnp.float32)  # the expanded scales' layout
    problem = _plugin_api.check_problem(x2d, qvalue, spec, fmt=fmt, block_size=block_size)
    out_dtype = jnp.dtype(out_dtype if out_dtype is not None else x2d.dtype)
    group_scale = jnp.asarray(group_scale, jnp.float32)
    offset = jnp.reshape(jnp.asarray(offset, jnp.float32), ())
    return _launch(
        _call_dq,
        problem,
        (x2d, qvalue, codes, group_scale, offset),
        fmt=fmt,
        block_size=block_size,
        out_dtype=out_dtype,
        path=path,
        precision=precision,
    )


_call_dq = jax.jit(functools.partial(_native_call, _bind_dq), static_argnames=_STATIC)


def quantized_matmul(
    x2d: jax.Array,
    qvalue: jax.Array,
    scale: jax.Array,
    *,
    fmt: str,
    block_size: int,
    out_dtype=None,
    path: str = "auto",
    precision: str = "float32",
) -> jax.Array:
    """``x2d @ W`` for a quantized (K, N) weight W, computed by the native CPU kernels.

    This is the kernel ``jaxcore.kernels.quantized_matmul`` runs on CPU once the plugin is
    loaded (with ``path="auto"``); call it directly to force a path (tests, benchmarks).
    It works under ``jit`` and ``vmap``; for derivatives go through
    ``jaxcore.kernels.quantized_matmul``, whose primitive carries the autodiff rules.

    Args:
      x2d: (M, K) floating activations; float32 and bfloat16 are read as they are, other
        dtypes are converted to float32.
      qvalue: the stored codes: int8 (K, N) for ``int8``, nibble-packed uint8 (K // 2, N)
        for ``int4`` and ``nf4`` (the layout of ``jaxcore.kernels``).
      scale: floating (K // block_size, N) block scales; float32, float16 and bfloat16
        are read as stored (:data:`SCALE_DTYPES`), other dtypes converted to float32.
      fmt: ``"int8"``, ``"int4"`` or ``"nf4"``.
      block_size: logical rows of K per scale row (even for the 4-bit formats).
      out_dtype: result dtype; default ``x2d.dtype``. Accumulation is float32.
      path: ``"auto"``, ``"gemv"`` (the small-M kernel) or ``"gemm"`` (the cache-blocked
        kernel); every path accepts every M.
      precision: ``"float32"`` (exact) or ``"int8"`` (int8 activations, see
        :data:`PRECISIONS`).

    Returns:
      (M, N) array of ``out_dtype``.

    Raises:
      ValueError, TypeError: operands that break the layout (the same checks and
        messages as every jaxcore plugin kernel), or an unknown ``path``.
      LibraryNotFoundError, RuntimeError: the native library cannot be loaded.
    """
    _check_settings(path, precision)
    problem, scale, out_dtype = _prepare(x2d, qvalue, scale, fmt, block_size, out_dtype)
    return _launch(
        _call,
        problem,
        (x2d, qvalue, scale),
        fmt=fmt,
        block_size=block_size,
        out_dtype=out_dtype,
        path=path,
        precision=precision,
    )


_call = jax.jit(functools.partial(_native_call, _bind), static_argnames=_STATIC)


def quantized_matmul_transposed(
    x2d: jax.Array,
    qvalue: jax.Array,
    scale: jax.Array,
    *,
    fmt: str,
    block_size: int,
    out_dtype=None,
    path: str = "auto",
) -> jax.Array:
    """``x2d @ W.T`` for a quantized (K, N) weight W, computed by the native CPU kernels.

    The product the gradient of ``x @ W`` in ``x`` needs (and a tied embedding's logits), in
    float32 (there is no int8 precision for it). Two paths: ``"gemv"`` computes each output
    as a dot product of an activation row with a stored row of W, streaming the rows once per
    pass of up to 16 activation rows; ``"gemm"`` runs the cache-blocked GEMM over panels
    decoded from W's rows transposed; ``"auto"`` takes the first up to M = 24 with AVX-512,
    12 with AVX2, 64 with the portable kernels. This is what
    ``jaxcore.kernels.quantized_matmul_transposed`` (and the transpose rule of
    ``jaxcore.kernels.quantized_matmul``) runs on CPU once the plugin is loaded (with only the
    portable kernels, at M = 1).

    Args:
      x2d: (M, N) floating activations; float32 and bfloat16 are read as they are, other
        dtypes are converted to float32.
      qvalue, scale, fmt, block_size: the weight, as for :func:`quantized_matmul`.
      out_dtype: result dtype; default ``x2d.dtype``. Accumulation is float32.
      path: ``"auto"``, ``"gemv"`` or ``"gemm"`` (above); every path accepts every M.

    Returns:
      (M, K) array of ``out_dtype``.

    Raises:
      ValueError, TypeError: operands that break the layout, ``x2d`` without N columns, or
        an unknown ``path``.
      LibraryNotFoundError, RuntimeError: the native library cannot be loaded.
    """
    _check_settings(path, "float32")
    x2d = jnp.asarray(x2d)
    if x2d.ndim != 2:
        raise ValueError(f"x @ W.T: x must be 2-D (M, N), got shape {x2d.shape}")
    # The weight checked as every plugin kernel checks it, against activations of (M, K).
    rows = _logical_rows(fmt, qvalue) if qvalue.ndim else 0
    stand_in = jax.ShapeDtypeStruct((x2d.shape[0], rows), x2d.dtype)
    problem, scale, out_dtype = _prepare(stand_in, qvalue, scale, fmt, block_size, out_dtype)
    if x2d.shape[1] != problem.n:
        raise ValueError(
            f"x @ W.T: x {x2d.shape} must have N={problem.n} columns for {fmt} qvalue "
            f"{qvalue.shape}"
        )
    _library.load()
    if 0 in (problem.m, problem.n, problem.k):
        return jnp.zeros((problem.m, problem.k), out_dtype)
    return _call_t(
        x2d, qvalue, scale, fmt=fmt, block_size=int(block_size), out_dtype=out_dtype, path=path
    )


_call_t = jax.jit(
    functools.partial(_native_call, _bind_t),
    static_argnames=("fmt", "block_size", "out_dtype", "path"),
)


PORTABLE_MAX_M = 1
"""Largest M the registry implementations give the native kernels on a CPU that has only the
portable ones (aarch64, x86-64 without AVX2); larger M runs jaxcore's reference kernel (XLA's
slab-wise dequantize-then-dot), which is faster there. Pinned to the portable kernels on a
2-vCPU Zen 4 VM (K = N = 4096, ratio to dense float32): M = 1 native 0.51x-0.61x against the
reference's 0.71x-0.75x (int8, int4; NF4 level), M = 4 1.3x-1.9x against 0.52x-0.99x, M = 16
6.9x-7.8x against 0.63x-1.02x. Decided by the CPU (`detected_isa`), not by `set_isa`, and at
trace time (M is static); :func:`quantized_matmul` itself always runs the native kernels."""

SIMD_ISAS = ("avx2", "avxvnni", "avx512", "amx")
"""The instruction sets whose tables the registry implementations run at every M (x86-64: each
has SIMD kernels for every path and precision)."""

DOTPROD_INT8_MAX_M = 64
"""Largest M the registry implementations give the native kernels in ``int8`` precision on an
aarch64 CPU with ``sdot`` (``detected_isa() == "dotprod"``): the int8-activation kernels take M
up to 64 there (the C++ planner runs larger M in float32, on the portable kernels); float32
precision keeps :data:`PORTABLE_MAX_M`, its kernels being the portable ones. Unmeasured (no
aarch64 machine here): chosen from instruction rates, ``sdot`` taking 16 int8 products per
instruction against the 4 of a float32 FMA that XLA's dense product (and the reference) runs
on, where the portable int8 kernel's widening multiplies (8 per instruction, SSE2 on Zen 4)
already ran 1.9x-2.7x dense at M = 16."""


def _native_serves(m: int, precision: str = "float32") -> bool:
    """Whether the registry implementations run the native kernels for M = ``m`` rows."""
    detected = _library.detected_isa()
    if detected in SIMD_ISAS:
        return True
    if detected == "dotprod" and precision == "int8":
        return m <= DOTPROD_INT8_MAX_M
    return m <= PORTABLE_MAX_M


def _make_impl(precision: str) -> Callable[..., jax.Array]:
    def impl(x2d, qvalue, scale, *, fmt: str, block_size: int, out_dtype, interpret: bool = False):
        del interpret
        static = dict(fmt=fmt, block_size=block_size, out_dtype=out_dtype, precision=precision)
        if not _native_serves(x2d.shape[0], precision):
            return _reference(x2d, qvalue, scale, path="auto", **static)
        return quantized_matmul(x2d, qvalue, scale, **static)

    impl.__name__ = impl.__qualname__ = f"quantized_matmul_impl_{precision}"
    impl.__doc__ = f"""Kernel ``quantized_matmul`` for ``"cpu"`` with ``precision="{precision}"``.

    ``impl(x2d, qvalue, scale, *, fmt, block_size, out_dtype, interpret=False) -> (M, N)``:
    :func:`quantized_matmul` with ``path="auto"`` (the reference kernel past
    :data:`PORTABLE_MAX_M` rows where the CPU has only the portable kernels). ``interpret`` is
    accepted for the registry's signature; the native kernel has no interpret mode.
    """
    return impl


IMPLS_BY_PRECISION: dict[str, Callable[..., jax.Array]] = {
    name: _make_impl(name) for name in PRECISIONS
}
"""One registry implementation per precision. Each is a distinct function, so a trace made
with one is never replayed for another (jaxcore keys its trace caches on the registry)."""


_ARM64 = ("aarch64", "arm64")


def _transposed_native_serves(m: int, fmt: str) -> bool:
    """Whether the registry implementation of ``x @ W.T`` runs the native kernel for M = ``m``.

    With AVX2 or better, at every M: the rows path at small M, the GEMM over transposed panels
    above, both ahead of the reference on a 2-vCPU Zen 4 VM (K = N = 4096, ratio to dense
    ``x @ W``; AVX-512: M = 16 0.59x-0.77x against 0.98x-2.7x, M = 64 0.90x-0.94x against
    1.04x-1.88x, M = 256 1.01x-1.08x against 1.18x-1.34x; pinned to AVX2 level with it at worst,
    M = 32 int8 in 32-row blocks 1.05x against 1.04x). With only the portable kernels, as for
    ``x @ W``, up to :data:`PORTABLE_MAX_M` rows (also with ``dotprod``, which adds no
    float32 kernel; M = 1: 0.61x-0.80x against the reference's
    0.64x-0.82x or more), and never for NF4 on x86-64, whose codes SSE2 looks up one by one
    (2.1x against 1.45x at M = 1); aarch64 looks them up with NEON ``tbl``.
    """
    if _library.detected_isa() in SIMD_ISAS:
        return True
    if fmt == "nf4" and platform.machine().lower() not in _ARM64:
        return False
    return m <= PORTABLE_MAX_M


def transposed_impl(x2d, qvalue, scale, *, fmt: str, block_size: int, out_dtype):
    """Kernel ``TRANSPOSED_KERNEL_NAME`` for ``"cpu"``: ``x2d @ W.T`` -> (M, K).

    :func:`quantized_matmul_transposed` with ``path="auto"`` where the native kernel is the
    faster (every M with SIMD kernels; see ``_transposed_native_serves``), else the reference.
    """
    if not _transposed_native_serves(x2d.shape[0], fmt):
        return _reference_t(x2d, qvalue, scale, fmt=fmt, block_size=block_size, out_dtype=out_dtype)
    return quantized_matmul_transposed(
        x2d, qvalue, scale, fmt=fmt, block_size=block_size, out_dtype=out_dtype
    )


def _make_dq_impl(precision: str) -> Callable[..., jax.Array]:
    def impl(x2d, qvalue, codes, group_scale, offset, *, fmt: str, block_size: int, out_dtype):
        static = dict(fmt=fmt, block_size=block_size, out_dtype=out_dtype, precision=precision)
        if not _native_serves(x2d.shape[0], precision):
            return _reference_dq(x2d, qvalue, codes, group_scale, offset, path="auto", **static)
        return quantized_matmul_dq(x2d, qvalue, codes, group_scale, offset, **static)

    impl.__name__ = impl.__qualname__ = f"quantized_matmul_dq_impl_{precision}"
    impl.__doc__ = f"""Kernel ``{_plugin_api.DQ_KERNEL_NAME}`` for ``"cpu"``, ``precision="{precision}"``.

    ``impl(x2d, qvalue, codes, group_scale, offset, *, fmt, block_size, out_dtype) -> (M, N)``:
    :func:`quantized_matmul_dq` with ``path="auto"`` (as the plain implementation, the
    reference kernel past :data:`PORTABLE_MAX_M` rows on a CPU with only the portable ones).
    """
    return impl


DQ_IMPLS_BY_PRECISION: dict[str, Callable[..., jax.Array]] = {
    name: _make_dq_impl(name) for name in PRECISIONS
}
"""The double-quant kernel's registry implementation per precision (as IMPLS_BY_PRECISION)."""

quantized_matmul_impl = IMPLS_BY_PRECISION["float32"]

"""jaxcore's CPU plugin: native weight-only quantized matmul kernels through XLA's FFI.

The kernels live in a C++ library, ``libjaxcore_cpu_kernels.so`` (built by Bazel as
``//jaxcore_cpu:libjaxcore_cpu_kernels.so``, shipped inside the ``jaxcore-cpu`` wheel):
int8 (per-channel and blocked), int4 and NF4 (also with double-quantized scales, which
arrive expanded), a GEMV path for small M and a cache-blocked GEMM path for large M,
float32 and bfloat16 activations, SIMD code for AVX2 + FMA (and, for int8 activations,
AVX-512 VNNI) chosen at run time with a portable fallback (on aarch64 with NEON code-book
lookups for NF4, and int8 activations on ``sdot`` where the CPU has it), multi-threaded on
XLA's intra-op thread pool, in two precisions (exact float32, or int8 activations:
:func:`set_precision`).

``import jaxcore`` finds this package and calls :func:`initialize`, which loads the
library and registers its kernel as ``jaxcore.kernels``' ``quantized_matmul`` for
``cpu``, replacing the portable reference. Users do not call the kernel directly:
``jaxcore.kernels.quantized_matmul`` (and ``x @ w`` with a ``jaxcore.quant`` weight) runs
it inside one jitted program, and ``jvp``/``grad``/``vmap`` work through that primitive's
rules. Without the library the plugin is skipped (``python -m jaxcore`` says why) and the
reference kernel keeps serving CPU.

:func:`quantized_matmul` calls the kernel with a chosen path; :func:`isa`,
:func:`detected_isa` and :func:`set_isa` report and restrict the instruction set.
"""

from __future__ import annotations

from collections.abc import Sequence

from jaxcore import plugins as _plugins
from jaxcore.kernels import plugin_api as _plugin_api

from . import _build_config, _library, _matmul, _stacked
from ._library import (
    ENV_VAR,
    ISAS,
    IsaSetting,
    LibraryNotFoundError,
    available_isas,
    detected_isa,
    isa,
    library_path,
    set_isa,
)
from ._matmul import (
    PATHS,
    PRECISIONS,
    quantized_matmul,
    quantized_matmul_dq,
    quantized_matmul_transposed,
)
from ._precision import PRECISION_ENV_VAR, PrecisionSetting, precision, set_precision

__all__ = [
    "DIST_NAME",
    "DQ_IMPLS",
    "ENV_VAR",
    "IMPLS",
    "ISAS",
    "IsaSetting",
    "LibraryNotFoundError",
    "PATHS",
    "PLATFORMS",
    "PRECISIONS",
    "PRECISION_ENV_VAR",
    "PrecisionSetting",
    "STACKED_IMPLS",
    "TRANSPOSED_IMPLS",
    "available_isas",
    "describe",
    "detected_isa",
    "initialize",
    "isa",
    "library_path",
    "precision",
    "quantized_matmul",
    "quantized_matmul_dq",
    "quantized_matmul_transposed",
    "set_isa",
    "set_precision",
]

__version__: str = _build_config.VERSION
PLATFORMS: tuple[str, ...] = tuple(_build_config.PLATFORMS)
DIST_NAME: str | None = _build_config.DIST_NAME

IMPLS = {"cpu": _matmul.IMPLS_BY_PRECISION[precision()]}
"""The implementation registered for each platform served."""

DQ_IMPLS = {"cpu": _matmul.DQ_IMPLS_BY_PRECISION[precision()]}
"""The implementation of ``jaxcore.kernels``' double-quant kernel (NF4 with compressed
scales, ``plugin_api.DQ_KERNEL_NAME``) registered for each platform served."""

TRANSPOSED_IMPLS = {"cpu": _matmul.transposed_impl}
"""The implementation of ``jaxcore.kernels``' transposed product (``x @ W.T``, the gradient
of ``x @ W``; ``plugin_api.TRANSPOSED_KERNEL_NAME``) registered for each platform served."""

STACKED_IMPLS = {"cpu": _stacked.STACKED_IMPLS_BY_PRECISION[precision()]}
"""The implementation of ``jaxcore.kernels``' stacked product (one matrix of a stack of
weights, read in place; ``plugin_api.STACKED_KERNEL_NAME``) registered for each platform."""

_register = _plugin_api.plugin_initializer(__name__, PLATFORMS, IMPLS)
_register_dq = _plugin_api.plugin_initializer(
    __name__, PLATFORMS, DQ_IMPLS, kernel_name=_plugin_api.DQ_KERNEL_NAME
)
_register_stacked = _plugin_api.plugin_initializer(
    __name__, PLATFORMS, STACKED_IMPLS, kernel_name=_plugin_api.STACKED_KERNEL_NAME
)
_register_t = _plugin_api.plugin_initializer(
    __name__, PLATFORMS, TRANSPOSED_IMPLS, kernel_name=_plugin_api.TRANSPOSED_KERNEL_NAME
)


def initialize(platforms: Sequence[str] | None = None) -> None:
    """Loads the native library and registers its kernel with ``jaxcore.kernels``.

    Args:
      platforms: the subset of ``PLATFORMS`` to register for (``jaxcore.plugins`` passes
        the ones ``JAXCORE_PLUGINS`` selects); default: all of them.

    Raises:
      jaxcore.plugins.PluginUnavailable: running from the source tree, where the library
        has not been built (the plugin is then skipped quietly).
      LibraryNotFoundError: an installed wheel without its library, or
        ``JAXCORE_CPU_KERNELS_LIB`` naming a missing file.
      RuntimeError: a library that cannot be loaded or lacks its symbols.
      ValueError: a platform this build does not serve.
    """
    try:
        _library.load()
    except LibraryNotFoundError as e:
        if _library.from_source() and not e.explicit:
            raise _plugins.PluginUnavailable(str(e)) from e
        raise
    _register(platforms)
    _register_dq(platforms)
    _register_t(platforms)
    _register_stacked(platforms)


def describe() -> str:
    """One line for ``python -m jaxcore``: the instruction set in use and the library."""
    active, detected = isa(), detected_isa()
    note = "" if active == detected else f", CPU supports {detected}"
    return f"native kernels, ISA {active}{note}, {precision()} activations; {library_path()}"


# Last: if user code imported this package before jaxcore, jaxcore's plugin discovery
# found it half-imported and waits for this call to register it.
_plugins.plugin_imported(__name__)

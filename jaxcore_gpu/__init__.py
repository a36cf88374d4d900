"""jaxcore's GPU plugin: Pallas quantized-matmul kernels with the Triton lowering.

One source tree serves NVIDIA and AMD GPUs: the Triton lowering of Pallas targets both
(Mosaic GPU is NVIDIA-only). The same sources ship as the ``jaxcore-cuda12`` wheel
(package ``jaxcore_cuda12``, platform ``cuda``) and the ``jaxcore-rocm6`` wheel
(``jaxcore_rocm6``, platform ``rocm``); from the repository the package registers for
both. ``import jaxcore`` finds this package and calls :func:`initialize`; Pallas itself
is imported only when a kernel is first traced, so importing jaxcore stays cheap.

Users do not call the kernel directly: ``jaxcore.kernels.quantized_matmul`` (and ``x @ w``
with a ``jaxcore.quant`` weight) dispatches to it on GPUs. Tiles come from a small table
keyed by M (see :class:`BlockConfig`); to override them for code traced in a block::

    with jaxcore_gpu.block_config(block_n=64, split_k=4):
        y = jax.jit(model)(x, w)

``JAXCORE_PALLAS_INTERPRET=cuda`` (or ``rocm``) runs this kernel in Pallas interpret mode
on CPU, through the same dispatch.
"""

from __future__ import annotations

from jaxcore.kernels import plugin_api as _plugin_api

from . import _blocks, _build_config, _matmul
from ._blocks import BlockConfig, block_config
from ._matmul import quantized_matmul

__all__ = [
    "BlockConfig",
    "DIST_NAME",
    "IMPLS",
    "PLATFORMS",
    "block_config",
    "initialize",
    "quantized_matmul",
]

__version__: str = _build_config.VERSION
PLATFORMS: tuple[str, ...] = tuple(_build_config.PLATFORMS)
DIST_NAME: str | None = _build_config.DIST_NAME

# Both entry points bind one primitive that lowers the kernel for cuda and rocm only, so
# one program can be exported for several platforms at once.
IMPLS = _plugin_api.quantized_matmul_impls(
    primitive_name="jaxcore_gpu_quantized_matmul",
    module=__name__,
    platforms=("cuda", "rocm"),
    kernel=_matmul.quantized_matmul,
    validate_tiles=_blocks.choose,
    tiles=_blocks.OVERRIDES,
)
"""The implementation registered for each GPU platform. Both bind the same primitive,
whose lowering picks the tiles of the platform it lowers for; in interpret mode the
registered platform's tiles are used."""

initialize = _plugin_api.plugin_initializer(__name__, PLATFORMS, IMPLS)

# Last: if user code imported this package before jaxcore, jaxcore's plugin discovery
# found it half-imported and waits for this call to register it.
from jaxcore import plugins as _plugins  # noqa: E402 - after the environment set-up above

_plugins.plugin_imported(__name__)

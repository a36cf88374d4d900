"""jaxcore's TPU plugin: Pallas quantized-matmul kernels with the Mosaic TPU lowering.

Ships as the ``jaxcore-tpu`` wheel (package ``jaxcore_tpu``, platform ``tpu``).
``import jaxcore`` finds this package and calls :func:`initialize`; Pallas itself is
imported only when a kernel is first traced, so importing jaxcore stays cheap.

Users do not call the kernel directly: ``jaxcore.kernels.quantized_matmul`` (and ``x @ w``
with a ``jaxcore.quant`` weight) dispatches to it on TPUs. Block shapes come from a small
table keyed by M (see :class:`BlockConfig`) and can be overridden for code traced in a
``with jaxcore_tpu.block_config(block_k=512):`` block. ``JAXCORE_PALLAS_INTERPRET=tpu``
runs this kernel on CPU in TPU interpret mode (``pltpu.InterpretParams``).
"""

from __future__ import annotations

from jaxcore.kernels import plugin_api as _plugin_api

from . import _blocks, _build_config
from ._blocks import BlockConfig, block_config
from ._matmul import quantized_matmul

__all__ = [
    "BlockConfig",
    "DIST_NAME",
    "PLATFORMS",
    "block_config",
    "initialize",
    "quantized_matmul",
    "quantized_matmul_impl",
]

__version__: str = _build_config.VERSION
PLATFORMS: tuple[str, ...] = tuple(_build_config.PLATFORMS)
DIST_NAME: str | None = _build_config.DIST_NAME


def _kernel(x, qvalue, scale, *, platform, **kwargs):
    # Looks the kernel up in this package's namespace when called (at lowering time or in
    # interpret mode), so a wrapper installed as ``jaxcore_tpu.quantized_matmul`` is used.
    del platform  # only "tpu"
    return quantized_matmul(x, qvalue, scale, **kwargs)


def _validate_tiles(problem: _plugin_api.Problem, platform: str) -> None:
    del platform  # only "tpu"
    _blocks.choose(problem)


# The entry point binds a primitive that lowers the kernel for tpu only, so one program can
# be exported for several platforms at once.
quantized_matmul_impl = _plugin_api.quantized_matmul_impls(
    primitive_name="jaxcore_tpu_quantized_matmul",
    module=__name__,
    platforms=("tpu",),
    kernel=_kernel,
    validate_tiles=_validate_tiles,
    tiles=_blocks.OVERRIDES,
)["tpu"]
"""The ``jaxcore.kernels`` entry point of kernel ``"quantized_matmul"`` on tpu."""

initialize = _plugin_api.plugin_initializer(__name__, PLATFORMS, {"tpu": quantized_matmul_impl})

# Last: if user code imported this package before jaxcore, jaxcore's plugin discovery
# found it half-imported and waits for this call to register it.
from jaxcore import plugins as _plugins  # noqa: E402 - after the environment set-up above

_plugins.plugin_imported(__name__)

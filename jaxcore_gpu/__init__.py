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

from collections.abc import Sequence

import jax.numpy as jnp

from . import _blocks, _build_config, _checks, _matmul, _primitive
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


def _lowered_kernel(x, qvalue, scale, *, platform, overrides, **static):
    # Runs at lowering time: re-apply the tile overrides captured when the call was traced.
    with block_config(**dict(overrides)):
        return quantized_matmul(x, qvalue, scale, platform=platform, **static)


def _lowered_fallback(x, qvalue, scale, *, overrides, **static):
    del overrides
    return _matmul.xla_quantized_matmul(x, qvalue, scale, **static)


# The kernel lowers for cuda and rocm only (see _primitive), so one program can be
# exported for several platforms at once.
_bind = _primitive.platform_primitive(
    "jaxcore_gpu_quantized_matmul", _lowered_kernel, _lowered_fallback, ("cuda", "rocm")
)


def _make_impl(platform: str):
    """The ``jaxcore.kernels`` entry point of kernel ``"quantized_matmul"`` for ``platform``."""

    def impl(x2d, qvalue, scale, *, fmt: str, block_size: int, out_dtype,
             interpret: bool = False):
        if interpret:  # interpret mode lowers on any platform: call the kernel directly
            return quantized_matmul(
                x2d, qvalue, scale, fmt=fmt, block_size=block_size, out_dtype=out_dtype,
                interpret=True, platform=platform,
            )
        problem = _checks.check_problem(x2d, qvalue, scale, fmt=fmt, block_size=block_size)
        _blocks.choose(problem, platform)  # a bad block_config override fails here, early
        return _bind(
            x2d, qvalue, scale, fmt=fmt, block_size=block_size,
            out_dtype=jnp.dtype(out_dtype if out_dtype is not None else x2d.dtype),
            overrides=_blocks.current_overrides(),
        )

    impl.__name__ = impl.__qualname__ = f"quantized_matmul_{platform}"
    impl.__doc__ = (
        f"Kernel ``quantized_matmul`` for platform {platform!r}, as ``jaxcore.kernels`` "
        "calls it: ``impl(x2d, qvalue, scale, *, fmt, block_size, out_dtype, "
        "interpret=False) -> (M, N)``; tiles tuned for the platform it is lowered for."
    )
    return impl


IMPLS = {platform: _make_impl(platform) for platform in ("cuda", "rocm")}
"""The implementation registered for each GPU platform. Both bind the same primitive,
whose lowering picks the tiles of the platform it lowers for; in interpret mode the
registered platform's tiles are used."""


def initialize(platforms: Sequence[str] | None = None) -> None:
    """Registers the kernels with ``jaxcore.kernels`` for this build's platforms.

    Args:
      platforms: the subset of :data:`PLATFORMS` to register for (``jaxcore.plugins``
        passes the ones ``JAXCORE_PLUGINS`` selects); default: all of them.

    Raises:
      ValueError: a platform this build does not serve.
    """
    chosen = PLATFORMS if platforms is None else tuple(platforms)
    extra = [p for p in chosen if p not in PLATFORMS]
    if extra:
        raise ValueError(
            f"{__name__} serves platforms {PLATFORMS}, not {extra}"
        )
    from jaxcore import kernels

    for platform in chosen:
        kernels.register_kernel("quantized_matmul", platform, IMPLS[platform])


# Last: if user code imported this package before jaxcore, jaxcore's plugin discovery
# found it half-imported and waits for this call to register it.
from jaxcore import plugins as _plugins  # noqa: E402

_plugins.plugin_imported(__name__)

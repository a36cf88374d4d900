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

from collections.abc import Sequence

import jax.numpy as jnp

from . import _blocks, _build_config, _checks, _matmul, _primitive
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


def _lowered_kernel(x, qvalue, scale, *, platform, overrides, **static):
    # Runs at lowering time: re-apply the tile overrides captured when the call was traced.
    del platform  # only "tpu"
    with block_config(**dict(overrides)):
        return quantized_matmul(x, qvalue, scale, **static)


def _lowered_fallback(x, qvalue, scale, *, overrides, **static):
    del overrides
    return _matmul.xla_quantized_matmul(x, qvalue, scale, **static)


# The kernel lowers for tpu only (see _primitive), so one program can be exported for
# several platforms at once.
_bind = _primitive.platform_primitive(
    "jaxcore_tpu_quantized_matmul", _lowered_kernel, _lowered_fallback, ("tpu",)
)


def quantized_matmul_impl(
    x2d, qvalue, scale, *, fmt: str, block_size: int, out_dtype, interpret: bool = False
):
    """The ``jaxcore.kernels`` entry point for kernel ``"quantized_matmul"``.

    Args:
      x2d: activations (M, K).
      qvalue: quantized weights (int8 (K, N) or packed uint8 (K // 2, N)).
      scale: (K // block_size, N) block scales.
      fmt: ``"int8"``, ``"int4"`` or ``"nf4"``.
      block_size: weight rows per scale row.
      out_dtype: result dtype (``None``: ``x2d.dtype``).
      interpret: run in Pallas TPU interpret mode (forced-interpret runs on CPU).

    Returns:
      The (M, N) product.
    """
    if interpret:  # interpret mode lowers on any platform: call the kernel directly
        return quantized_matmul(
            x2d, qvalue, scale, fmt=fmt, block_size=block_size, out_dtype=out_dtype,
            interpret=True,
        )
    problem = _checks.check_problem(x2d, qvalue, scale, fmt=fmt, block_size=block_size)
    _blocks.choose(problem)  # a bad block_config override fails here, early
    return _bind(
        x2d, qvalue, scale, fmt=fmt, block_size=block_size,
        out_dtype=jnp.dtype(out_dtype if out_dtype is not None else x2d.dtype),
        overrides=_blocks.current_overrides(),
    )


def initialize(platforms: Sequence[str] | None = None) -> None:
    """Registers the kernels with ``jaxcore.kernels`` for this build's platforms.

    Args:
      platforms: the subset of :data:`PLATFORMS` to register for; default: all.

    Raises:
      ValueError: a platform this build does not serve.
    """
    chosen = PLATFORMS if platforms is None else tuple(platforms)
    extra = [p for p in chosen if p not in PLATFORMS]
    if extra:
        raise ValueError(f"{__name__} serves platforms {PLATFORMS}, not {extra}")
    from jaxcore import kernels

    for platform in chosen:
        kernels.register_kernel("quantized_matmul", platform, quantized_matmul_impl)


# Last: if user code imported this package before jaxcore, jaxcore's plugin discovery
# found it half-imported and waits for this call to register it.
from jaxcore import plugins as _plugins  # noqa: E402

_plugins.plugin_imported(__name__)

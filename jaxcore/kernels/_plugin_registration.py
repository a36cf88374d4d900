"""A plugin's ``jaxcore.kernels`` entry points for its fused kernel, and its ``initialize``.

A backend plugin brings a fused ``quantized_matmul`` kernel and a tile table; this module
turns them into what ``jaxcore.kernels`` and ``jaxcore.plugins`` call: one registered
entry point per platform (:func:`quantized_matmul_impls`) and the plugin's
``initialize(platforms=None)`` (:func:`plugin_initializer`). Part of
:mod:`jaxcore.kernels.plugin_api`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from jaxcore.kernels._plugin_checks import Problem, prepare_operands
from jaxcore.kernels._plugin_dequant import xla_quantized_matmul
from jaxcore.kernels._plugin_primitive import platform_primitive
from jaxcore.kernels._plugin_tiles import TileOverrides
from jaxcore.kernels._registry import register_kernel

_IMPL_DOC = """Kernel ``quantized_matmul`` for {platform!r}, as ``jaxcore.kernels`` calls it.

``impl(x2d, qvalue, scale, *, fmt, block_size, out_dtype, interpret=False) -> (M, N)``:
activations (M, K) times the quantized weight (see ``jaxcore.kernels``), in ``out_dtype``
(``None``: ``x2d.dtype``). With ``interpret=True`` the kernel runs in Pallas interpret mode
on any backend. Otherwise it binds ``{primitive}``, which lowers to the fused kernel
on {platforms} (tiles tuned for the platform it is lowered for) and to XLA's
dequantize-then-dot elsewhere.
"""

_INITIALIZE_DOC = """Registers {module}'s kernels with ``jaxcore.kernels`` for its platforms.

Args:
  platforms: the subset of {served} to register for (``jaxcore.plugins`` passes the
    ones ``JAXCORE_PLUGINS`` selects); default: all of them.

Raises:
  ValueError: a platform this build does not serve.
"""


def quantized_matmul_impls(
    *,
    primitive_name: str,
    module: str,
    platforms: Sequence[str],
    kernel: Callable[..., object],
    validate_tiles: Callable[[Problem, str], object],
    tiles: TileOverrides,
) -> dict[str, Callable[..., object]]:
    """Makes a plugin's ``quantized_matmul`` entry points, one per platform it serves.

    Outside interpret mode an entry point checks the operands, picks the tiles for its
    platform (so a bad tile override fails when the call is traced, on any platform) and
    binds ONE primitive shared by all the entry points (see :func:`platform_primitive`):
    it lowers to ``kernel`` for each of ``platforms``, under the tile overrides active
    when the call was traced, and to :func:`xla_quantized_matmul` for every other
    platform. In interpret mode, which lowers on any platform, the entry point calls
    ``kernel`` directly.

    Args:
      primitive_name: the primitive's name, shown in jaxprs (e.g.
        ``"jaxcore_gpu_quantized_matmul"``).
      module: the plugin's ``__name__``; the entry points' ``__module__``.
      platforms: the platforms the plugin serves, and the kernel lowers for.
      kernel: ``kernel(x, qvalue, scale, *, fmt, block_size, out_dtype, interpret,
        platform) -> (M, N)``, the fused kernel tuned for ``platform``. It is called at
        lowering time and in interpret mode, never at import, so a plugin may pass a
        function that looks its kernel up when called.
      validate_tiles: ``validate_tiles(problem, platform)``; raises ValueError for a tile
        override that breaks a tiling rule of ``platform``.
      tiles: the plugin's tile overrides.

    Returns:
      ``{platform: impl}`` for each of ``platforms``, ready for ``register_kernel``.
    """
    platforms = tuple(platforms)

    def lowered_kernel(x, qvalue, scale, *, platform, overrides, **static):
        # Runs at lowering time: re-apply the tile overrides captured when the call was traced.
        with tiles.override(**dict(overrides)):
            return kernel(x, qvalue, scale, interpret=False, platform=platform, **static)

    def lowered_fallback(x, qvalue, scale, *, overrides, **static):
        del overrides
        return xla_quantized_matmul(x, qvalue, scale, **static)

    bind = platform_primitive(primitive_name, lowered_kernel, lowered_fallback, platforms)

    def make_impl(platform: str):
        def impl(
            x2d, qvalue, scale, *, fmt: str, block_size: int, out_dtype, interpret: bool = False
        ):
            if interpret:  # interpret mode lowers on any platform: call the kernel directly
                return kernel(
                    x2d,
                    qvalue,
                    scale,
                    fmt=fmt,
                    block_size=block_size,
                    out_dtype=out_dtype,
                    interpret=True,
                    platform=platform,
                )
            problem, _, out_dtype = prepare_operands(
                x2d, qvalue, scale, fmt=fmt, block_size=block_size, out_dtype=out_dtype
            )
            validate_tiles(problem, platform)  # a bad override fails here, early
            return bind(
                x2d,
                qvalue,
                scale,
                fmt=fmt,
                block_size=block_size,
                out_dtype=out_dtype,
                overrides=tiles.current(),
            )

        impl.__name__ = impl.__qualname__ = f"quantized_matmul_{platform}"
        impl.__module__ = module
        impl.__doc__ = _IMPL_DOC.format(
            platform=platform, primitive=primitive_name, platforms=", ".join(platforms)
        )
        return impl

    return {platform: make_impl(platform) for platform in platforms}


def plugin_initializer(
    module: str,
    platforms: Sequence[str],
    impls: Mapping[str, Callable[..., object]],
    kernel_name: str = "quantized_matmul",
) -> Callable[..., None]:
    """Makes a plugin's ``initialize``, which ``jaxcore.plugins`` calls after importing it.

    Args:
      module: the plugin's ``__name__`` (named in errors; the function's ``__module__``).
      platforms: the platforms this build of the plugin serves (its ``PLATFORMS``).
      impls: the implementation of ``kernel_name`` for each of ``platforms``.
      kernel_name: the ``jaxcore.kernels`` kernel the implementations register as.

    Returns:
      ``initialize(platforms=None)``, which registers ``impls`` with ``jaxcore.kernels``
      for the given subset of ``platforms`` (default: all of them) and raises ValueError
      for a platform the build does not serve.
    """
    served = tuple(platforms)

    def initialize(platforms: Sequence[str] | None = None) -> None:
        chosen = served if platforms is None else tuple(platforms)
        extra = [p for p in chosen if p not in served]
        if extra:
            raise ValueError(f"{module} serves platforms {served}, not {extra}")
        for platform in chosen:
            register_kernel(kernel_name, platform, impls[platform])

    initialize.__module__ = module
    initialize.__doc__ = _INITIALIZE_DOC.format(module=module, served=served)
    return initialize

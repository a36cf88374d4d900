"""A primitive that lowers a plugin's fused kernel only for the plugin's own platforms.

``jaxcore.kernels`` puts every registered kernel in one ``jax.lax.platform_dependent``.
When a program is lowered for several platforms at once (``jax.export`` with
``platforms=["cpu", "cuda", "tpu"]``), JAX lowers each branch for all of the module's
platforms, and a ``pallas_call`` can only be lowered for its own backend (Triton for
cuda/rocm, Mosaic for tpu). Binding the kernel through a primitive with per-platform
lowering rules fixes that: the fused kernel is lowered for the plugin's platforms only,
and a plain XLA computation (never executed: the dispatch routes other platforms
elsewhere) stands in for the rest. A kernel whose custom call has no compatibility
guarantee (an FFI target in a native library) can ask for the fallback on every platform
when the program is exported, so exported artifacts stay portable. Part of
:mod:`jaxcore.kernels.plugin_api`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import jax
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

from jaxcore import _jax_internals
from jaxcore.kernels import _batching


def platform_primitive(
    name: str,
    kernel: Callable[..., jax.Array],
    fallback: Callable[..., jax.Array],
    platforms: Sequence[str],
    *,
    fallback_for_export: bool = False,
    columns: Callable[..., int] | None = None,
) -> Callable[..., jax.Array]:
    """Makes ``bind(x, qvalue, *scales, **static) -> (M, N)`` for a quantized-matmul kernel.

    Args:
      name: the primitive's name (shows in jaxprs).
      kernel: ``kernel(x, qvalue, *scales, platform, **static)``; lowered for each of
        ``platforms`` with that platform's name. ``scales`` is the float32 scale array, or
        (for a kernel of NF4 with double-quantized scales) the codes, group scales and offset.
      fallback: ``fallback(x, qvalue, *scales, **static)``; lowered for every other
        platform. Same result as ``kernel``.
      platforms: the platforms the kernel lowers for.
      fallback_for_export: lower ``fallback`` on every platform when the program is
        lowered for ``jax.export``: for kernels (FFI targets of a native library) whose
        custom call an exported artifact could not rely on.
      columns: ``columns(x, qvalue, **static)``, the result's column count from the
        operands' shapes; default ``qvalue.shape[1]`` (N of ``x @ W``). A kernel of
        ``x @ W.T`` returns the weight's logical rows instead.

    Returns:
      ``bind``; its static keyword arguments must be hashable and include ``out_dtype``.
    """
    prim = Primitive(name)

    def abstract_eval(x, qvalue, *scales, out_dtype, **static):
        cols = qvalue.shape[1] if columns is None else columns(x, qvalue, **static)
        return jax.core.ShapedArray((x.shape[0], cols), out_dtype)

    def impl(*args, **static):  # eager use: compile for the current backend
        # Even under `jax.disable_jit()` (as JAX's own primitives): the jitted bind would
        # otherwise run eagerly and land back here, forever.
        with jax.disable_jit(False):
            return jax.jit(functools.partial(prim.bind, **static))(*args)

    def lower_kernel(platform, ctx, *args, **static):
        if fallback_for_export and _jax_internals.lowering_for_export(ctx):
            return lower_fallback(ctx, *args, **static)
        fn = functools.partial(kernel, platform=platform, **static)
        return mlir.lower_fun(fn, multiple_results=False)(ctx, *args)

    def lower_fallback(ctx, *args, **static):
        fn = functools.partial(fallback, **static)
        return mlir.lower_fun(fn, multiple_results=False)(ctx, *args)

    prim.def_abstract_eval(abstract_eval)
    prim.def_impl(impl)
    mlir.register_lowering(prim, lower_fallback)
    for platform in platforms:
        mlir.register_lowering(prim, functools.partial(lower_kernel, platform), platform=platform)
    batching.primitive_batchers[prim] = _batching.matmul_batch_rule(prim.bind)
    return prim.bind

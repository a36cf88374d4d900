"""`quantized_matmul`: dense activations times a quantised weight, dispatched per platform.

The registered implementations of kernel ``"quantized_matmul"`` become the branches of ONE
`jax.lax.platform_dependent`, with the portable reference as the default, so a single
jitted (or exported) program picks the fused kernel of whatever platform it is compiled
for. Gradients are defined with `jax.custom_vjp` using the reference kernels, so fused
kernels need no autodiff rules and the backward pass also works slab by slab.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxcore.kernels import _formats, _interpret, _reference, _registry

KERNEL_NAME = "quantized_matmul"


class _Config(NamedTuple):
    """Everything static about one quantised matmul; hashable, so it keys the jit cache.

    It includes the registered implementations and the interpret-mode choice, so a kernel
    registered (or an env var changed) after a first call is used by the next call.
    """

    fmt: str
    block_size: int
    out_dtype: np.dtype
    impls: tuple[tuple[str, Callable], ...]
    interpret_on: str | None

    def returning(self, dtype) -> _Config:
        return self._replace(out_dtype=np.dtype(dtype))


def _dispatch(x2d, qvalue, scale, cfg: _Config):
    """Calls the registered impls through one `platform_dependent` (reference as default)."""
    impls = dict(cfg.impls)
    static = dict(fmt=cfg.fmt, block_size=cfg.block_size, out_dtype=cfg.out_dtype)
    branches = {
        platform: functools.partial(impl, interpret=False, **static) for platform, impl in impls.items()
    }
    if cfg.interpret_on is not None:
        branches["cpu"] = functools.partial(impls[cfg.interpret_on], interpret=True, **static)
    default = functools.partial(_reference.reference_quantized_matmul, **static)
    return jax.lax.platform_dependent(x2d, qvalue, scale, default=default, **branches)


def _scale_gradient(a2d, b2d, qvalue, scale, cfg: _Config):
    return _reference.reference_scale_gradient(
        a2d, b2d, qvalue, scale, fmt=cfg.fmt, block_size=cfg.block_size
    )


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _matmul(x2d, qvalue, scale, cfg: _Config):
    return _dispatch(x2d, qvalue, scale, cfg)


def _matmul_fwd(x2d, qvalue, scale, cfg):
    return _matmul(x2d, qvalue, scale, cfg), (x2d, qvalue, scale)


def _matmul_bwd(cfg, residuals, g):
    x2d, qvalue, scale = residuals
    dx = _matmul_t(g, qvalue, scale, cfg.returning(x2d.dtype))
    return dx, None, _scale_gradient(x2d, g, qvalue, scale, cfg)


_matmul.defvjp(_matmul_fwd, _matmul_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _matmul_t(x2d, qvalue, scale, cfg: _Config):
    return _reference.reference_quantized_matmul_transposed(
        x2d, qvalue, scale, fmt=cfg.fmt, block_size=cfg.block_size, out_dtype=cfg.out_dtype
    )


def _matmul_t_fwd(x2d, qvalue, scale, cfg):
    return _matmul_t(x2d, qvalue, scale, cfg), (x2d, qvalue, scale)


def _matmul_t_bwd(cfg, residuals, g):
    x2d, qvalue, scale = residuals
    dx = _matmul(g, qvalue, scale, cfg.returning(x2d.dtype))
    return dx, None, _scale_gradient(g, x2d, qvalue, scale, cfg)


_matmul_t.defvjp(_matmul_t_fwd, _matmul_t_bwd)


@functools.partial(jax.jit, static_argnums=(3, 4))
def _run(x2d, qvalue, scale, cfg: _Config, transposed: bool):
    # A jit boundary: eager calls compile once per configuration and shape, not every time.
    return (_matmul_t if transposed else _matmul)(x2d, qvalue, scale, cfg)


def _stored(q) -> tuple[str, int, jax.Array, jax.Array, int]:
    """Reads (fmt, block_size, qvalue, scale, axis) off a quantised array, checking the layout."""
    missing = [a for a in ("fmt", "block_size", "qvalue", "block_scales") if not hasattr(q, a)]
    if missing:
        raise TypeError(
            f"q must be a quantised array (jaxcore.quant.ArrayInt8/ArrayInt4/ArrayNF4 or one with "
            f"fmt, block_size, qvalue and block_scales()); {type(q).__name__} lacks {missing}"
        )
    fmt, block_size, qvalue = q.fmt, q.block_size, q.qvalue
    scale = q.block_scales()
    _formats.check_layout(fmt, qvalue, scale, block_size)
    axis = getattr(q, "axis", 0)
    if axis not in (0, 1):
        raise ValueError(f"q.axis must be 0 or 1 (the axis its blocks run along), got {axis!r}")
    return fmt, block_size, qvalue, scale, axis


def _apply(x, q, preferred_element_type, transposed: bool):
    fmt, block_size, qvalue, scale, axis = _stored(q)
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"x must be floating point, got dtype {x.dtype}")
    k = _formats.logical_rows(fmt, qvalue.shape[0])
    n = qvalue.shape[1]
    logical = (k, n) if axis == 0 else (n, k)
    contracted = logical[1] if transposed else logical[0]
    if x.ndim < 1 or x.shape[-1] != contracted:
        what = "x @ W.T" if transposed else "x @ W"
        raise ValueError(
            f"{what}: x's last axis must equal {contracted} for a weight of logical shape "
            f"{logical}, got x.shape={x.shape}"
        )
    out_dtype = np.dtype(x.dtype if preferred_element_type is None else preferred_element_type)
    lead = x.shape[:-1]
    x2d = x.reshape(math.prod(lead), contracted)
    # In the stored (K, N) layout, x @ S runs the dispatched kernel and x @ S.T the transposed
    # reference; a weight stored along axis 1 is S.T, which swaps the two.
    impls = _registry.registered_kernels(KERNEL_NAME)
    interpret_on = _interpret.interpret_platform(KERNEL_NAME, impls)
    cfg = _Config(fmt, int(block_size), out_dtype, tuple(impls.items()), interpret_on)
    out = _run(x2d, qvalue, scale, cfg, transposed != (axis == 1))
    return out.reshape(*lead, out.shape[-1])


def quantized_matmul(x: jax.Array, q, *, preferred_element_type=None) -> jax.Array:
    """Computes ``x @ W`` for dense ``x`` of shape (..., K) and a quantised (K, N) weight ``q``.

    ``x`` is flattened to (M, K) and the kernel registered for the platform the program is
    compiled for runs (through one `jax.lax.platform_dependent`; the portable reference is
    the default and serves CPU unless a plugin or ``JAXCORE_PALLAS_INTERPRET`` says
    otherwise). ``jit`` and ``vmap`` apply. Reverse-mode differentiable in ``x`` and in the
    block scales through a `jax.custom_vjp` whose backward pass also works slab by slab (a
    forward-mode ``jvp`` rule would make ``grad`` keep every dequantised slab alive, i.e.
    the dense weight), so ``jax.jvp``/``jacfwd`` are not supported.

    Args:
      x: floating array (..., K).
      q: a quantised array (``jaxcore.quant.ArrayInt8``/``ArrayInt4``/``ArrayNF4``).
      preferred_element_type: result dtype; default ``x.dtype``. Accumulation is float32.

    Returns:
      Array (..., N).

    Raises:
      TypeError: if ``q`` is not a quantised array or ``x`` is not floating point.
      ValueError: if the shapes do not contract or ``q``'s layout is malformed.
    """
    return _apply(x, q, preferred_element_type, transposed=False)


def quantized_matmul_transposed(x: jax.Array, q, *, preferred_element_type=None) -> jax.Array:
    """Computes ``x @ W.T`` for dense ``x`` of shape (..., N) and a quantised (K, N) weight ``q``.

    Used for contractions along a weight's output axis (tied embeddings, ``q @ dense``) and
    for gradients. For a weight blocked along K (``axis=0``) it runs the portable slab-wise
    reference on every platform; for one stored transposed (``axis=1``, e.g.
    ``ArrayInt8.quantize(E, axis=1)`` of an embedding table) ``x @ W.T`` is the stored layout's
    plain product, so the registered, platform-dispatched kernel runs.

    Args:
      x: floating array (..., N).
      q: a quantised array.
      preferred_element_type: result dtype; default ``x.dtype``.

    Returns:
      Array (..., K).

    Raises:
      TypeError: if ``q`` is not a quantised array or ``x`` is not floating point.
      ValueError: if the shapes do not contract or ``q``'s layout is malformed.
    """
    return _apply(x, q, preferred_element_type, transposed=True)

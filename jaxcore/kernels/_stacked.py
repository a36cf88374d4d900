"""`quantized_matmul_stacked`: one matrix of a stack of quantized weights, read in place.

A model that scans over its stacked layers multiplies by ``W[i]`` each step. Sliced as an
ordinary operand, ``W[i]`` is a ``dynamic-slice`` that XLA writes into a buffer of its own
before the kernel reads it: every step reads the layer twice and writes it once. Where a
platform registers a kernel under `STACKED_KERNEL_NAME` (the CPU plugin does), the product
instead hands it the whole stack and the index, and the kernel reads the one matrix where
it lies. Everywhere else the matrix is sliced out and the per-matrix product runs, so
results are the same on every platform.

The product is a primitive of its own: linear in the activations (its transpose is the
stack's other product, ``x @ W[i].T`` for ``x @ W[i]``, also read in place), with JVPs in
the scales and every ``vmap`` other than of the activations alone going through the sliced
matrix and the per-matrix primitives' rules.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from jaxcore import _jax_internals
from jaxcore.kernels import _batching, _dq_scales, _formats, _matmul, _registry

STACKED_KERNEL_NAME = "quantized_matmul_stacked"
"""Kernels of one matrix of a stack of weights, read in place:
``impl(x2d, qvalue, *scales, index, *, fmt, block_size, out_dtype, transposed, fallback)``
-> (M, N), or (M, K) with ``transposed`` (``x @ W.T`` of the stored (K, N) matrix).
``qvalue`` and ``scales`` carry the stack's axis first: (L, ...) codes and float32 (L,
K // block_size, N) scales, or NF4's double-quantized (L, ...) codes, (L, groups) group
scales and (L,) offsets. ``index`` is an int32 scalar, clamped into [0, L) as
``dynamic_slice`` clamps. ``fallback(x2d, qvalue, *scales, index)`` is the sliced
per-matrix product, for the calls the kernel does not serve."""


class _StackConfig(NamedTuple):
    """What is static about one stacked product; hashable."""

    transposed: bool  # x @ S[i].T of the stored (K, N) layout S; else x @ S[i]
    impls: tuple[tuple[str, Callable], ...]
    inner: _matmul._Config  # the per-matrix products' configuration


_stacked_p = Primitive("quantized_matmul_stacked")


def _matrix(operands, index) -> list[jax.Array]:
    return [lax.dynamic_index_in_dim(a, index, 0, keepdims=False) for a in operands]


def _per_matrix(x2d, *operands, scfg: _StackConfig):
    """The product on the matrix sliced out of the stack (XLA copies it), per-matrix rules."""
    *weights, index = operands
    qvalue, *scales = _matrix(weights, index)
    cfg = scfg.inner
    if len(scales) == 3:  # double-quantized
        if not scfg.transposed and cfg.dq_impls:
            return _matmul._matmul_dq_p.bind(x2d, qvalue, *scales, cfg=cfg)
        scales = [_dq_scales.expand_scales(*scales)]
    prim = _matmul._matmul_t_p if scfg.transposed else _matmul._matmul_p
    return prim.bind(x2d, qvalue, *scales, cfg=cfg)


def _forward(x2d, *operands, scfg: _StackConfig):
    """The registered stacked kernels through one `platform_dependent`, sliced elsewhere."""
    inner = scfg.inner
    default = functools.partial(_per_matrix, scfg=scfg)
    static: dict[str, Any] = dict(
        fmt=inner.fmt,
        block_size=inner.block_size,
        out_dtype=inner.out_dtype,
        transposed=scfg.transposed,
        fallback=default,
    )
    branches = {platform: functools.partial(impl, **static) for platform, impl in scfg.impls}
    return jax.lax.platform_dependent(x2d, *operands, default=default, **branches)


def _abstract_eval(x2d, qvalue, *operands, scfg: _StackConfig):
    inner = scfg.inner
    columns = (
        _formats.logical_rows(inner.fmt, qvalue.shape[1]) if scfg.transposed else qvalue.shape[2]
    )
    return x2d.update(shape=(x2d.shape[0], columns), dtype=inner.out_dtype, weak_type=False)


def _lower(ctx, *args, scfg: _StackConfig):
    # In a program split over devices a stacked kernel call, opaque to XLA's partitioner,
    # would gather the whole stack onto every device; the layer sliced out (XLA slices each
    # device's shard) runs the per-matrix product on each device's shards instead.
    forward = _per_matrix if _jax_internals.lowering_is_partitioned(ctx) else _forward
    return mlir.lower_fun(functools.partial(forward, scfg=scfg), multiple_results=False)(ctx, *args)


@functools.lru_cache(maxsize=256)
def _eager(scfg: _StackConfig):
    return jax.jit(functools.partial(_stacked_p.bind, scfg=scfg))


def _impl(*args, scfg: _StackConfig):
    with jax.disable_jit(False):  # as `_matmul._impl`: never bind eagerly forever
        return _eager(scfg)(*args)


def _jvp(primals, tangents, *, scfg: _StackConfig):
    x2d, *operands = primals
    dx, *d_operands = tangents
    out = _stacked_p.bind(*primals, scfg=scfg)
    terms = []
    if type(dx) is not ad.Zero:
        terms.append(_stacked_p.bind(dx, *operands, scfg=scfg))
    # The scales (float operands) enter through the sliced matrix and its primitives' rules.
    moving = [
        i
        for i, (a, d) in enumerate(zip(operands, d_operands))
        if type(d) is not ad.Zero and jnp.issubdtype(a.dtype, jnp.floating)
    ]
    if moving:

        def of_scales(*values):
            ops = list(operands)
            for i, v in zip(moving, values):
                ops[i] = v
            return _per_matrix(x2d, *ops, scfg=scfg)

        _, t = jax.jvp(of_scales, [operands[i] for i in moving], [d_operands[i] for i in moving])
        terms.append(t)
    if not terms:
        return out, ad.Zero(jax.typeof(out).to_tangent_aval())
    return out, functools.reduce(jnp.add, terms)


def _transpose(ct, x2d, *operands, scfg: _StackConfig):
    # The JVP is linear in x2d only through this primitive (the scales' part goes through
    # the per-matrix primitives), so only x2d is ever undefined here.
    none = (None,) * len(operands)
    if type(ct) is ad.Zero or not ad.is_undefined_primal(x2d):
        return (None, *none)
    flipped = scfg._replace(
        transposed=not scfg.transposed, inner=scfg.inner.returning(x2d.aval.dtype)
    )
    return (_stacked_p.bind(ct, *operands, scfg=flipped), *none)


_stacked_p.def_abstract_eval(_abstract_eval)
_stacked_p.def_impl(_impl)
mlir.register_lowering(_stacked_p, _lower)
_jax_internals.request_devices_during_lowering(_stacked_p)  # see _lower
batching.primitive_batchers[_stacked_p] = _batching.matmul_batch_rule(_stacked_p.bind)
ad.primitive_jvps[_stacked_p] = _jvp
ad.primitive_transposes[_stacked_p] = _transpose


class _MatrixOf:
    """Matrix ``index`` of a stacked quantized weight, read the way `_matmul` reads a weight.

    Each field is sliced out of the stack when read, so a path that does not read it (the
    stacked kernel) leaves only dead slices behind.
    """

    def __init__(self, stack, index):
        self.stack, self.index = stack, index
        self.fmt, self.block_size = stack.fmt, stack.block_size
        self.axis = getattr(stack, "axis", 0)
        self.double_quant = getattr(stack, "double_quant", False)

    def _slice(self, name: str):
        value = getattr(self.stack, name)
        return None if value is None else lax.dynamic_index_in_dim(value, self.index, 0, False)

    @property
    def qvalue(self):
        return self._slice("qvalue")

    @property
    def scale(self):
        return self._slice("scale")

    @property
    def scale_group_scale(self):
        return self._slice("scale_group_scale")

    @property
    def scale_offset(self):
        return self._slice("scale_offset")

    def block_scales(self):
        if not self.double_quant:
            return self.scale
        return _dq_scales.expand_scales(self.scale, self.scale_group_scale, self.scale_offset)


def _stacked_dq_parts(stack) -> tuple | None:
    """(codes, group_scale, offset) of a stack of double-quantized weights, as the kernels read
    them per matrix, or ``None`` when they are laid out otherwise."""
    codes, group_scale, offset = stack.scale, stack.scale_group_scale, stack.scale_offset
    layers = codes.shape[0]
    if (
        codes.ndim != 3
        or codes.dtype != jnp.int8
        or group_scale.shape != (layers, _dq_scales.group_count(codes.shape[1:]))
        or jnp.shape(offset) != (layers,)
    ):
        return None
    return codes, group_scale.astype(jnp.float32), offset.astype(jnp.float32)


def quantized_matmul_stacked(
    x: jax.Array, stack, index, *, transposed: bool = False, preferred_element_type=None
) -> jax.Array:
    """``x @ stack[index]`` (or ``x @ stack[index].T``) without copying the matrix out.

    Args:
      x: floating array (..., K) (or (..., N) with ``transposed``).
      stack: a quantized array holding a stack of matrices, shape (L, K, N)
        (``jaxcore.quant`` arrays quantized under ``jax.vmap``).
      index: integer scalar (traced or not); clamped into [0, L) as ``dynamic_slice`` does.
      transposed: compute ``x @ stack[index].T``.
      preferred_element_type: result dtype; default ``x.dtype``.

    Returns:
      Array (..., N) (or (..., K)), equal to `quantized_matmul` (or its transposed form) of
      the sliced matrix.

    Raises:
      TypeError, ValueError: as `quantized_matmul`, for the matrix's shapes and ``x``.
    """
    if jnp.ndim(stack.qvalue) != 3:
        raise ValueError(
            f"quantized_matmul_stacked: the stack must hold (L, K, N) matrices, got a weight "
            f"of shape {tuple(stack.shape)}"
        )
    index = jnp.asarray(index)
    if index.shape != () or not jnp.issubdtype(index.dtype, jnp.integer):
        raise TypeError(
            f"the layer index must be an integer scalar, got {index.dtype}{index.shape}"
        )
    matrix = _MatrixOf(stack, index.astype(jnp.int32))
    prepared = _matmul._prepare(x, matrix, preferred_element_type, transposed)
    if not isinstance(prepared, _matmul._Prepared):
        return prepared
    impls = tuple(_registry.registered_kernels(STACKED_KERNEL_NAME).items())
    x2d, lead, cfg, stored_product, _ = prepared  # the stacked kernels read dq parts themselves
    weights: tuple | None = (stack.qvalue, stack.scale)
    if matrix.double_quant:
        parts = _stacked_dq_parts(stack)
        weights = None if parts is None else (stack.qvalue, *parts)
    in_place = (
        impls
        and weights is not None
        and cfg.interpret_on is None
        # Inside shard_map, operands varying over manual axes take the per-matrix product.
        and not any(_matmul._varying_axes(a) for a in (x2d, *weights, matrix.index))
    )
    if not in_place or weights is None:
        return _matmul._apply(x, matrix, preferred_element_type, transposed)
    if matrix.double_quant:  # in both products: the transpose of one is the other
        dq_impls = _registry.registered_kernels(_matmul.DQ_KERNEL_NAME)
        cfg = cfg._replace(dq_impls=tuple(dq_impls.items()))
    scfg = _StackConfig(not stored_product, impls, cfg)
    out = _run(scfg, x2d, *weights, matrix.index)
    return out.reshape(*lead, out.shape[-1])


@functools.partial(jax.jit, static_argnums=(0,))
def _run(scfg: _StackConfig, *operands):
    # A jit boundary, as `_matmul._run`: eager calls compile once per configuration and shape.
    return _stacked_p.bind(*operands, scfg=scfg)

"""`quantized_matmul`: dense activations times a quantized weight, dispatched per platform.

The registered implementations of kernel ``"quantized_matmul"`` become the branches of ONE
`jax.lax.platform_dependent`, with the portable reference as the default, so a single
jitted (or exported) program picks the fused kernel of whatever platform it is compiled
for. The product is a primitive that is linear in the activations and in the block
scales: its JVP and transpose rules use the same primitive and the slab-wise reference
kernels, so fused kernels need no autodiff rules, ``jvp``/``grad``/``vjp`` and their
compositions (``jacfwd``, Hessian-vector products) all work, and no pass forms the dense
weight.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

import jax
import jax.extend.core as jex_core
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from jaxcore import _jax_internals
from jaxcore.kernels import (
    _batching,
    _dq_scales,
    _formats,
    _interpret,
    _partition,
    _reference,
    _registry,
)

KERNEL_NAME = "quantized_matmul"
DQ_KERNEL_NAME = "quantized_matmul_dq"
"""Kernels of ``x @ W`` that read NF4's double-quantized scales as stored:
``impl(x2d, qvalue, codes, group_scale, offset, *, fmt, block_size, out_dtype) -> (M, N)``
(layout: ``jaxcore.kernels._dq_scales``). Platforms without one expand the scales and run
their ``quantized_matmul`` kernel."""
TRANSPOSED_KERNEL_NAME = "quantized_matmul_transposed"
"""Kernels of ``x @ W.T`` for a weight stored in the (K, N) layout (gradients of ``x @ W``
with respect to ``x``, tied embeddings):
``impl(x2d, qvalue, scale, *, fmt, block_size, out_dtype) -> (M, K)``. Platforms without
one run the slab-wise reference."""


class _Config(NamedTuple):
    """Everything static about one quantized matmul; hashable, so it keys the jit cache.

    It includes the registered implementations and the interpret-mode choice, so a kernel
    registered (or an env var changed) after a first call is used by the next call.
    """

    fmt: str
    block_size: int
    out_dtype: np.dtype
    impls: tuple[tuple[str, Callable], ...]
    interpret_on: str | None
    dq_impls: tuple[tuple[str, Callable], ...] = ()
    t_impls: tuple[tuple[str, Callable], ...] = ()

    def returning(self, dtype) -> _Config:
        return self._replace(out_dtype=np.dtype(dtype))


def _dispatch(x2d, qvalue, scale, cfg: _Config):
    """Calls the registered impls through one `platform_dependent` (reference as default)."""
    impls = dict(cfg.impls)
    static: dict[str, Any] = dict(fmt=cfg.fmt, block_size=cfg.block_size, out_dtype=cfg.out_dtype)
    branches = {
        platform: functools.partial(impl, interpret=False, **static)
        for platform, impl in impls.items()
    }
    if cfg.interpret_on is not None:
        branches["cpu"] = functools.partial(impls[cfg.interpret_on], interpret=True, **static)
    default = functools.partial(_reference.reference_quantized_matmul, **static)
    return jax.lax.platform_dependent(x2d, qvalue, scale, default=default, **branches)


def _dispatch_dq(x2d, qvalue, codes, group_scale, offset, cfg: _Config):
    """`_dispatch` for double-quantized scales: the registered DQ_KERNEL_NAME kernels read
    them as stored; every other platform expands them and takes `_dispatch`."""
    static: dict[str, Any] = dict(fmt=cfg.fmt, block_size=cfg.block_size, out_dtype=cfg.out_dtype)
    branches = {platform: functools.partial(impl, **static) for platform, impl in cfg.dq_impls}

    def expanded(x2d, qvalue, codes, group_scale, offset):
        scale = _dq_scales.expand_scales(codes, group_scale, offset)
        return _dispatch(x2d, qvalue, scale, cfg)

    return jax.lax.platform_dependent(
        x2d, qvalue, codes, group_scale, offset, default=expanded, **branches
    )


def _scale_gradient(a2d, b2d, qvalue, scale_aval, cfg: _Config):
    # Only the scales' shape and dtype enter the gradient; zeros stand in for their values
    # (a transpose rule sees the scales as an undefined input).
    scale = jnp.zeros(scale_aval.shape, scale_aval.dtype)
    return _reference.reference_scale_gradient(
        a2d, b2d, qvalue, scale, fmt=cfg.fmt, block_size=cfg.block_size
    )


def _dispatch_transposed(x2d, qvalue, scale, cfg: _Config):
    """``x2d @ W.T`` through the registered TRANSPOSED_KERNEL_NAME kernels (the slab-wise
    reference as the default)."""
    static: dict[str, Any] = dict(fmt=cfg.fmt, block_size=cfg.block_size, out_dtype=cfg.out_dtype)
    branches = {platform: functools.partial(impl, **static) for platform, impl in cfg.t_impls}
    default = functools.partial(_reference.reference_quantized_matmul_transposed, **static)
    return jax.lax.platform_dependent(x2d, qvalue, scale, default=default, **branches)


# x2d @ W and x2d @ W.T for a weight W stored in the (K, N) layout, as primitives. Each is
# linear in x2d and in the scales, so its JVP is the same primitive on the tangents and
# its transpose is the other primitive (or the slab-wise scale gradient): forward mode,
# reverse mode and their compositions all work, and every one of them runs slab by slab
# without forming the dense weight.
_matmul_p = Primitive("quantized_matmul")
_matmul_t_p = Primitive("quantized_matmul_transposed")
# x2d @ W with NF4's double-quantized scales (codes, group scales, offset) as operands, so a
# kernel that decodes them itself never sees an expanded float32 copy. Linear in x2d; its
# JVP in the group scales and offset is the plain product with the expanded tangent.
_matmul_dq_p = Primitive("quantized_matmul_dq")
_FORWARD: dict[Primitive, Callable[..., Any]] = {
    _matmul_p: _dispatch,
    _matmul_t_p: _dispatch_transposed,
    _matmul_dq_p: _dispatch_dq,
}
_OTHER = {_matmul_p: _matmul_t_p, _matmul_t_p: _matmul_p}


def _abstract_eval(prim, x2d, qvalue, *scales, cfg: _Config):
    columns = (
        _formats.logical_rows(cfg.fmt, qvalue.shape[0]) if prim is _matmul_t_p else qvalue.shape[1]
    )
    # The result varies over shard_map's manual axes like the operands do (all 2-D, so
    # the base's sharding carries over): the activations' usually, the weight's when only
    # the weight varies.
    base = next((a for a in (x2d, qvalue, *scales) if not _manual_axes_empty(a)), x2d)
    out = base.update(shape=(x2d.shape[0], columns), dtype=cfg.out_dtype, weak_type=False)
    if base is x2d:
        # Explicit mesh axes: the result is split as the partitioner splits it (_partition).
        sharding = _partition.result_sharding(
            x2d,
            qvalue,
            transposed=prim is _matmul_t_p,
            fmt=cfg.fmt,
            block_size=cfg.block_size,
        )
        if sharding is not None:
            out = out.update(sharding=sharding)
    # Kernels run in interpret mode call back into Python (an ordered effect): declared,
    # so that jit threads the effect's token through the product.
    operands = tuple((tuple(a.shape), a.dtype) for a in (x2d, qvalue, *scales))
    jaxpr = _forward_jaxpr(prim, cfg, operands, _jax_internals.lowering_context_key())
    return out, jaxpr.effects


def _manual_axes_empty(aval) -> bool:
    axes = getattr(aval, "manual_axis_type", None)
    return axes is None or bool(getattr(axes, "empty", True))


@functools.lru_cache(maxsize=256)
def _forward_jaxpr(
    prim, cfg: _Config, operands: tuple, context: Hashable = None
) -> jex_core.ClosedJaxpr:
    """The traced kernel dispatch, once per configuration, operand shapes and JAX context.

    Lowering runs again for every program that contains the product; tracing every
    platform's kernel each time would be slow, the jaxpr is not. ``context`` is
    :func:`jaxcore._jax_internals.lowering_context_key` and only keys the cache: from jax
    0.11 the jaxpr records the abstract mesh, whose abstract device the Triton lowering
    targets, so one traced under another mesh must not be reused.
    """
    del context
    specs = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in operands]
    return jax.make_jaxpr(lambda *args: _FORWARD[prim](*args, cfg))(*specs)


def _lower(prim, ctx, *args, cfg: _Config):
    operands = tuple((tuple(a.shape), a.dtype) for a in ctx.avals_in)
    jaxpr = _forward_jaxpr(prim, cfg, operands, _jax_internals.lowering_context_key())
    partitioned = _partition.partitioned(prim)
    if (
        partitioned is None
        or jaxpr.effects
        or _jax_internals.lowering_for_export(ctx)
        or not _jax_internals.lowering_is_partitioned(ctx)
    ):
        fn = jex_core.jaxpr_as_fun(jaxpr)
        return mlir.lower_fun(fn, multiple_results=True)(ctx, *args)
    # Sharded operands: each device runs the kernel on its shards (_partition).
    return mlir.lower_fun(lambda *a: [partitioned(*a, cfg)], multiple_results=True)(ctx, *args)


@functools.lru_cache(maxsize=256)
def _eager(prim, cfg: _Config):
    return jax.jit(functools.partial(prim.bind, cfg=cfg))


def _jvp(prim, primals, tangents, *, cfg: _Config):
    x2d, qvalue, scale = primals
    dx, _, dscale = tangents
    out = prim.bind(x2d, qvalue, scale, cfg=cfg)
    terms = []
    if type(dx) is not ad.Zero:
        terms.append(prim.bind(dx, qvalue, scale, cfg=cfg))
    if type(dscale) is not ad.Zero:
        terms.append(prim.bind(x2d, qvalue, dscale, cfg=cfg))
    if not terms:
        # jax 0.10 has no Zero.from_primal_value: the zero tangent of out's aval.
        return out, ad.Zero(jax.typeof(out).to_tangent_aval())
    return out, functools.reduce(jnp.add, terms)


def _transpose(prim, ct, x2d, qvalue, scale, *, cfg: _Config):
    if type(ct) is ad.Zero:
        return None, None, None
    if ad.is_undefined_primal(x2d):
        dx = _OTHER[prim].bind(ct, qvalue, scale, cfg=cfg.returning(x2d.aval.dtype))
        return dx, None, None
    if ad.is_undefined_primal(scale):
        # d/dscale of sum(ct * (x @ W)) pairs x with ct; of sum(ct * (x @ W.T)), ct with x.
        a2d, b2d = (x2d, ct) if prim is _matmul_p else (ct, x2d)
        return None, None, _scale_gradient(a2d, b2d, qvalue, scale.aval, cfg)
    return None, None, None


def _zeros_if_zero(tangent, primal):
    return (
        jnp.zeros(jnp.shape(primal), jnp.result_type(primal))
        if type(tangent) is ad.Zero
        else tangent
    )


def _jvp_dq(primals, tangents, *, cfg: _Config):
    x2d, qvalue, codes, group_scale, offset = primals
    dx, _, _, dgroup, doffset = tangents
    out = _matmul_dq_p.bind(*primals, cfg=cfg)
    terms = []
    if type(dx) is not ad.Zero:
        terms.append(_matmul_dq_p.bind(dx, qvalue, codes, group_scale, offset, cfg=cfg))
    if type(dgroup) is not ad.Zero or type(doffset) is not ad.Zero:
        scale, dscale = jax.jvp(
            functools.partial(_dq_scales.expand_scales, codes),
            (group_scale, offset),
            (_zeros_if_zero(dgroup, group_scale), _zeros_if_zero(doffset, offset)),
        )
        terms.append(_matmul_p.bind(x2d, qvalue, dscale, cfg=cfg))
    if not terms:
        return out, ad.Zero(jax.typeof(out).to_tangent_aval())
    return out, functools.reduce(jnp.add, terms)


def _transpose_dq(ct, x2d, qvalue, codes, group_scale, offset, *, cfg: _Config):
    # The JVP above is linear in x2d only through this primitive; the scales' part goes
    # through _matmul_p, whose transpose gives their gradient.
    if type(ct) is ad.Zero or not ad.is_undefined_primal(x2d):
        return None, None, None, None, None
    scale = _dq_scales.expand_scales(codes, group_scale, offset)
    dx = _matmul_t_p.bind(ct, qvalue, scale, cfg=cfg.returning(x2d.aval.dtype))
    return dx, None, None, None, None


def _impl(prim, *args, cfg: _Config):
    # Compiled even under `jax.disable_jit()`, as JAX's own primitives are: the jitted bind
    # would otherwise run eagerly and land back here, forever.
    with jax.disable_jit(False):
        return _eager(prim, cfg)(*args)


for _prim in (_matmul_p, _matmul_t_p, _matmul_dq_p):
    _prim.def_effectful_abstract_eval(functools.partial(_abstract_eval, _prim))
    _prim.def_impl(functools.partial(_impl, _prim))
    mlir.register_lowering(_prim, functools.partial(_lower, _prim))
    batching.primitive_batchers[_prim] = _batching.matmul_batch_rule(_prim.bind)
for _prim in (_matmul_p, _matmul_t_p):
    ad.primitive_jvps[_prim] = functools.partial(_jvp, _prim)
    ad.primitive_transposes[_prim] = functools.partial(_transpose, _prim)
for _prim in (_matmul_p, _matmul_t_p, _matmul_dq_p):
    _jax_internals.request_devices_during_lowering(_prim)


def _traced(prim):
    return lambda cfg, operands: _forward_jaxpr(
        prim, cfg, operands, _jax_internals.lowering_context_key()
    )


_partition.register(_matmul_p, _dispatch, _traced(_matmul_p), transposed=False)
_partition.register(_matmul_t_p, _dispatch_transposed, _traced(_matmul_t_p), transposed=True)
_partition.register(
    _matmul_dq_p,
    _dispatch,
    _traced(_matmul_dq_p),
    transposed=False,
    dq=True,
    forward_dq=_dispatch_dq,
)
ad.primitive_jvps[_matmul_dq_p] = _jvp_dq
ad.primitive_transposes[_matmul_dq_p] = _transpose_dq


@functools.partial(jax.jit, static_argnums=(3, 4))
def _run(x2d, qvalue, scale, cfg: _Config, transposed: bool):
    # A jit boundary: eager calls compile once per configuration and shape, not every time.
    return (_matmul_t_p if transposed else _matmul_p).bind(x2d, qvalue, scale, cfg=cfg)


@functools.partial(jax.jit, static_argnums=(5,))
def _run_dq(x2d, qvalue, codes, group_scale, offset, cfg: _Config):
    return _matmul_dq_p.bind(x2d, qvalue, codes, group_scale, offset, cfg=cfg)


def _double_quant_parts(q):
    """(codes, group_scale, offset) of a weight with double-quantized 2-D scales, else None."""
    if not getattr(q, "double_quant", False):
        return None
    parts = (q.scale, q.scale_group_scale, q.scale_offset)
    codes, group_scale, offset = (jnp.asarray(a) for a in parts)
    if (
        codes.ndim != 2
        or codes.dtype != jnp.int8
        or group_scale.shape != (_dq_scales.group_count(codes.shape),)
        or jnp.size(offset) != 1
    ):
        return None  # not the layout the dq kernels read: expand as before
    return codes, group_scale.astype(jnp.float32), jnp.reshape(offset, ()).astype(jnp.float32)


def _stored(q) -> tuple[str, int, jax.Array, jax.Array, int, tuple[int, int]]:
    """Reads (fmt, block_size, qvalue, scale, axis, (K, N)) off a quantized array, checked."""
    missing = [a for a in ("fmt", "block_size", "qvalue", "block_scales") if not hasattr(q, a)]
    if missing:
        raise TypeError(
            f"q must be a quantized array (jaxcore.quant.ArrayInt8/ArrayInt4/ArrayNF4 or one with "
            f"fmt, block_size, qvalue and block_scales()); {type(q).__name__} lacks {missing}"
        )
    fmt, block_size, qvalue = q.fmt, q.block_size, q.qvalue
    # Double-quantized scales are only expanded where the product needs them (`_apply`);
    # their shape and dtype suffice for the checks.
    dq = getattr(q, "double_quant", False)
    scale = jax.eval_shape(q.block_scales) if dq else q.block_scales()
    k_n = _formats.check_layout(fmt, qvalue, scale, block_size)
    axis = getattr(q, "axis", 0)
    if axis not in (0, 1):
        raise ValueError(f"q.axis must be 0 or 1 (the axis its blocks run along), got {axis!r}")
    return fmt, block_size, qvalue, scale, axis, k_n


def _varying_axes(a) -> frozenset:
    """The manual mesh axes ``a`` varies over (``aval.manual_axis_type.varying`` in jax 0.10)."""
    aval = jax.typeof(a)
    mat = getattr(aval, "manual_axis_type", None)
    if mat is not None:
        return frozenset(getattr(mat, "varying", None) or ())
    return frozenset(getattr(aval, "vma", None) or ())


def _vary_alike(*arrays):
    """Marks every operand as varying over the manual mesh axes any of them varies over.

    Inside ``shard_map``, JAX's own primitives do this when they bind; the products here
    must too, or a replicated ``x`` times a weight sharded along N gets a gradient whose
    type (varying) does not match ``x``'s (replicated). After the cast, its transpose sums
    that gradient over the shards. Outside ``shard_map`` nothing varies and this is a no-op.
    """
    vmas = [_varying_axes(a) for a in arrays]
    union = frozenset().union(*vmas)
    return tuple(
        a if v == union else jax.lax.pcast(a, tuple(sorted(union - v)), to="varying")
        for a, v in zip(arrays, vmas)
    )


class _Prepared(NamedTuple):
    """One product, checked: activations flattened to (M, C) and the per-matrix config."""

    x2d: jax.Array
    lead: tuple[int, ...]
    cfg: _Config
    stored_product: bool  # x @ S of the stored (K, N) layout S; else x @ S.T
    dq: tuple | None  # double-quantized scales to hand the dq kernels as stored, else None


def _prepare(x, q, preferred_element_type, transposed: bool) -> _Prepared | jax.Array:
    """Checks ``x`` against weight ``q`` and configures the product (or returns its zeros)."""
    fmt, block_size, qvalue, scale, axis, (k, n) = _stored(q)
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"x must be floating point, got dtype {x.dtype}")
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
    columns = logical[0] if transposed else logical[1]
    if math.prod(lead) == 0 or columns == 0 or contracted == 0:
        # An empty product (no rows, e.g. an empty batch, or an empty weight) is zeros, as
        # for a dense matmul; the platform kernels and their tile choices never see it.
        return _vary_alike(jnp.zeros((*lead, columns), out_dtype), x, qvalue)[0]
    x2d = x.reshape(math.prod(lead), contracted)
    # In the stored (K, N) layout, x @ S runs the dispatched kernel and x @ S.T the dispatched
    # transposed one; a weight stored along axis 1 is S.T, which swaps the two.
    impls = _registry.registered_kernels(KERNEL_NAME)
    interpret_on = _interpret.interpret_platform(KERNEL_NAME, impls)
    # Gradients of x @ W run x @ W.T (and the other way round), so both kinds join the config.
    t_impls = tuple(_registry.registered_kernels(TRANSPOSED_KERNEL_NAME).items())
    cfg = _Config(
        fmt, int(block_size), out_dtype, tuple(impls.items()), interpret_on, t_impls=t_impls
    )
    stored_product = transposed == (axis == 1)
    dq_impls = _registry.registered_kernels(DQ_KERNEL_NAME)
    dq = _double_quant_parts(q) if stored_product and dq_impls and interpret_on is None else None
    if dq is not None:
        cfg = cfg._replace(dq_impls=tuple(dq_impls.items()))
    return _Prepared(x2d, lead, cfg, stored_product, dq)


def _apply(x, q, preferred_element_type, transposed: bool):
    prepared = _prepare(x, q, preferred_element_type, transposed)
    if not isinstance(prepared, _Prepared):
        return prepared
    x2d, lead, cfg, stored_product, dq = prepared
    if dq is not None:
        x2d, qvalue, *dq = _vary_alike(x2d, q.qvalue, *dq)
        out = _run_dq(x2d, qvalue, *dq, cfg)
    else:
        x2d, qvalue, scale = _vary_alike(x2d, q.qvalue, q.block_scales())
        out = _run(x2d, qvalue, scale, cfg, not stored_product)
    return out.reshape(*lead, out.shape[-1])


def quantized_matmul(x: jax.Array, q, *, preferred_element_type=None) -> jax.Array:
    """Computes ``x @ W`` for dense ``x`` of shape (..., K) and a quantized (K, N) weight ``q``.

    ``x`` is flattened to (M, K) and the kernel registered for the platform the program is
    compiled for runs (through one `jax.lax.platform_dependent`; the portable reference is
    the default and serves CPU unless a plugin or ``JAXCORE_PALLAS_INTERPRET`` says
    otherwise). ``jit`` and ``vmap`` apply. Differentiable in ``x`` and in the block scales in
    both modes (``grad``, ``jvp``, ``jacfwd``, Hessian-vector products): the product is a
    primitive whose JVP is itself on the tangents and whose transpose is the slab-wise
    transposed product (or scale gradient), so no derivative forms the dense weight.

    Args:
      x: floating array (..., K).
      q: a quantized array (``jaxcore.quant.ArrayInt8``/``ArrayInt4``/``ArrayNF4``).
      preferred_element_type: result dtype; default ``x.dtype``. Accumulation is float32.

    Returns:
      Array (..., N).

    Raises:
      TypeError: if ``q`` is not a quantized array or ``x`` is not floating point.
      ValueError: if the shapes do not contract or ``q``'s layout is malformed.
    """
    return _apply(x, q, preferred_element_type, transposed=False)


def quantized_matmul_transposed(x: jax.Array, q, *, preferred_element_type=None) -> jax.Array:
    """Computes ``x @ W.T`` for dense ``x`` of shape (..., N) and a quantized (K, N) weight ``q``.

    Used for contractions along a weight's output axis (tied embeddings, ``q @ dense``) and
    for gradients. For a weight blocked along K (``axis=0``) it runs the kernel registered as
    ``TRANSPOSED_KERNEL_NAME`` for the platform (the CPU plugin's native one), else the
    portable slab-wise reference; for one stored transposed (``axis=1``, e.g.
    ``ArrayInt8.quantize(E, axis=1)`` of an embedding table) ``x @ W.T`` is the stored layout's
    plain product, so the registered, platform-dispatched kernel runs.

    Args:
      x: floating array (..., N).
      q: a quantized array.
      preferred_element_type: result dtype; default ``x.dtype``.

    Returns:
      Array (..., K).

    Raises:
      TypeError: if ``q`` is not a quantized array or ``x`` is not floating point.
      ValueError: if the shapes do not contract or ``q``'s layout is malformed.
    """
    return _apply(x, q, preferred_element_type, transposed=True)

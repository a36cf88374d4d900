"""The weight-only quantized matmul as a Pallas kernel with the Mosaic TPU lowering.

The grid is (M tiles, N tiles, K steps), K last and sequential ("arbitrary"): each program
DMAs one quantized weight tile into VMEM (1 byte per int8 weight, half a byte per
int4/NF4 weight), decodes and scales it on the VPU, and accumulates the MXU product in an
f32 VMEM scratch that is written out after the last K step. Weights are read from HBM
once, compressed. For int4/NF4 the low/high nibbles pair with the even/odd columns of x,
which the wrapper de-interleaves (x is small next to the weights).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxcore.kernels import plugin_api

from . import _blocks, _dequant


def quantized_matmul(
    x,
    qvalue,
    scale,
    *,
    fmt: str,
    block_size: int,
    out_dtype=None,
    interpret: bool = False,
    config: _blocks.BlockConfig | None = None,
):
    """``x @ dequantize(qvalue, scale)`` with the weights decoded inside the kernel.

    Args:
      x: activations (M, K), float32 / bfloat16 / float16.
      qvalue: int8 (K, N) or nibble-packed uint8 (K // 2, N) (see ``jaxcore.kernels``).
      scale: floating (K // block_size, N) per-block scale (the absmax for NF4),
        read as float32.
      fmt: ``"int8"``, ``"int4"`` or ``"nf4"``.
      block_size: logical weight rows per scale row.
      out_dtype: result dtype; defaults to ``x.dtype``.
      interpret: run in Pallas TPU interpret mode (``pltpu.InterpretParams``) on any
        backend, e.g. CPU.
      config: explicit tiles; default: the table of :mod:`._blocks` (plus any
        :func:`block_config` override active while tracing).

    Returns:
      The (M, N) product in ``out_dtype``.

    Raises:
      ValueError, TypeError: operands that do not fit the layout contract, or a
        ``config`` that breaks a Mosaic tiling rule.
    """
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    problem, scale, out_dtype = plugin_api.prepare_operands(
        x, qvalue, scale, fmt=fmt, block_size=block_size, out_dtype=out_dtype
    )
    if problem.m == 0:
        return jnp.zeros((0, problem.n), out_dtype)
    if x.dtype not in plugin_api.KERNEL_DTYPES:
        # The MXU has no such activation dtype (e.g. float64). Every platform's branch is
        # traced, so the kernel must accept whatever the reference accepts.
        return plugin_api.xla_quantized_matmul(
            x, qvalue, scale, fmt=fmt, block_size=block_size, out_dtype=out_dtype
        )
    if config is None:
        config = _blocks.choose(problem)
    else:
        _blocks.validate(config, problem)
    bm = min(config.block_m, problem.m)
    bn = min(config.block_n, problem.n)
    step = config.block_k // problem.rows_per_qvalue_row
    gp = problem.group_packed
    one_scale_row = gp % step == 0
    n_groups = scale.shape[0]
    if one_scale_row or step == problem.k_packed:
        # The whole (G, bn) scale column stays resident (its block index ignores k);
        # each step reads its rows by offset.
        s_spec = pl.BlockSpec((n_groups, bn), lambda i, j, k: (0, j))
    else:
        s_spec = pl.BlockSpec((step // gp, bn), lambda i, j, k: (k, j))
    x_parts = plugin_api.split_activations(x, problem)
    kernel = functools.partial(
        _kernel,
        fmt=fmt,
        code=plugin_api.nf4_code() if fmt == "nf4" else None,
        nparts=len(x_parts),
        step=step,
        group=gp,
        one_scale_row=one_scale_row,
        compute_dtype=x.dtype,
    )
    x_spec = pl.BlockSpec((bm, step), lambda i, j, k: (i, k))
    return pl.pallas_call(
        kernel,
        grid=(pl.cdiv(problem.m, bm), pl.cdiv(problem.n, bn), problem.k_packed // step),
        in_specs=[x_spec] * len(x_parts)
        + [
            pl.BlockSpec((step, bn), lambda i, j, k: (k, j)),
            s_spec,
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((problem.m, problem.n), out_dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")
        ),
        interpret=pltpu.InterpretParams() if interpret else False,
        name=f"jaxcore_quantized_matmul_{fmt}",
    )(*x_parts, qvalue, scale)


def _kernel(*refs, fmt, code, nparts, step, group, one_scale_row, compute_dtype):
    """One grid step: accumulate x[:, k-th step] @ W[k-th step, j-th tile]."""
    from jax.experimental import pallas as pl

    x_refs, (q_ref, s_ref, o_ref, acc_ref) = refs[:nparts], refs[nparts:]
    k = pl.program_id(2)
    precision = (
        jax.lax.Precision.HIGHEST if compute_dtype == jnp.float32 else jax.lax.Precision.DEFAULT
    )

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    values = _dequant.decode(q_ref[...], fmt, code)
    if one_scale_row:
        # lax.div: k is non-negative, and `//` would emit a sign op Mosaic lowers only on a TPU.
        row = s_ref[pl.ds(jax.lax.div(k * step, group), 1), :]
        part = None
        for x_ref, v in zip(x_refs, values):
            d = jnp.dot(
                x_ref[...],
                v.astype(compute_dtype),
                precision=precision,
                preferred_element_type=jnp.float32,
            )
            part = d if part is None else part + d
        acc_ref[...] += part * row
    else:
        s = _dequant.expand_scales(s_ref[...], group, step)
        for x_ref, v in zip(x_refs, values):
            acc_ref[...] += jnp.dot(
                x_ref[...],
                (v * s).astype(compute_dtype),
                precision=precision,
                preferred_element_type=jnp.float32,
            )

    @pl.when(k == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)

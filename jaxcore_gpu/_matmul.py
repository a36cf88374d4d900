"""The weight-only quantized matmul as a Pallas kernel with the Triton lowering.

One kernel serves CUDA and ROCm (Mosaic GPU is NVIDIA-only). Each program owns a
``(block_m, block_n)`` output tile and loops over K in steps of ``block_k`` logical rows:
it loads the quantized tile (1 byte per int8 weight, half a byte per int4/NF4 weight),
decodes it in registers, and feeds Triton's ``dot``. Weights are therefore read from
HBM once, in their compressed form, instead of XLA's dequantize-to-HBM-then-matmul.

Scales are applied where it is cheapest: when a K step lies inside one scale block the
product ``x @ q`` is scaled once per output element; otherwise the decoded tile is scaled
row-group by row-group before the dot. For int4/NF4 the even and odd rows of a packed
byte pair with the even and odd columns of x, which the wrapper de-interleaves (x is
small next to the weights), so the kernel never re-interleaves nibbles.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxcore.kernels import plugin_api

from . import _blocks, _dequant

SCALE_DTYPES = (jnp.float32, jnp.float16, jnp.bfloat16)
"""Scale dtypes the kernel loads as stored: 16-bit scales are widened in registers, so they
cost half the bytes from HBM instead of a float32 copy written per call."""


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
    platform: str = "cuda",
):
    """``x @ dequantize(qvalue, scale)`` with the weights decoded inside the kernel.

    Args:
      x: activations (M, K), float16 / bfloat16 / float32.
      qvalue: int8 (K, N) or nibble-packed uint8 (K // 2, N) (see ``jaxcore.kernels``).
      scale: floating (K // block_size, N) per-block scale (the absmax for NF4); float32,
        float16 and bfloat16 are loaded as stored and widened in registers
        (:data:`SCALE_DTYPES`), others converted to float32 first.
      fmt: ``"int8"``, ``"int4"`` or ``"nf4"``.
      block_size: logical weight rows per scale row.
      out_dtype: dtype of the result; defaults to ``x.dtype``.
      interpret: run the kernel in Pallas interpret mode (any backend, e.g. CPU).
      config: explicit tiles; default: the table of :mod:`._blocks` (plus any
        :func:`block_config` override active while tracing).
      platform: ``"cuda"`` or ``"rocm"``, the GPU the table tunes the tiles for.

    Returns:
      The (M, N) product in ``out_dtype``.

    Raises:
      ValueError, TypeError: operands that do not fit the layout contract, or a
        ``config`` that breaks a tiling rule.
    """
    problem, scale, out_dtype = plugin_api.prepare_operands(
        x,
        qvalue,
        scale,
        fmt=fmt,
        block_size=block_size,
        out_dtype=out_dtype,
        scale_dtypes=SCALE_DTYPES,
    )
    if problem.m == 0:
        return jnp.zeros((0, problem.n), out_dtype)
    if config is None:
        config = _blocks.choose(problem, platform)
    else:
        _blocks.validate(config, problem)
    if config is None or x.dtype not in plugin_api.KERNEL_DTYPES:
        # No Triton tile fits (K or the scale block is not a multiple of 16 qvalue rows),
        # or Triton's dot has no such activation dtype (e.g. float64): this call takes
        # XLA's dequantize-then-dot path. Every platform's branch is traced, so the
        # kernel must accept whatever the reference accepts.
        return plugin_api.xla_quantized_matmul(
            x, qvalue, scale, fmt=fmt, block_size=block_size, out_dtype=out_dtype
        )
    return _pallas_matmul(x, qvalue, scale, problem, config, out_dtype, interpret)


def _kernel(
    *refs, fmt, code, nparts, step, group, steps_per_split, n, block_n, compute_dtype, precision
):
    """One program: a (block_m, block_n) tile over one split of the K steps."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as pltriton

    x_refs, (q_ref, s_ref, o_ref) = refs[:nparts], refs[nparts:]
    block_m = x_refs[0].shape[0]
    j, split = pl.program_id(1), pl.program_id(2)
    if n % block_n:
        cols = j * block_n + jax.lax.broadcasted_iota(jnp.int32, (1, block_n), 1)
        col_mask = cols < n
    else:
        col_mask = None
    one_scale_row = group % step == 0

    def load(ref):
        if col_mask is None:
            return ref[...]
        return pltriton.load(ref, mask=col_mask, other=0)

    def body(t, acc):
        k0 = pl.multiple_of((split * steps_per_split + t) * step, step)
        q = load(q_ref.at[pl.ds(k0, step), :])
        n_rows = 1 if one_scale_row else step // group
        s = load(s_ref.at[pl.ds(jax.lax.div(k0, group), n_rows), :]).astype(jnp.float32)
        if one_scale_row:
            values = _dequant.decode(q, fmt, code, compute_dtype)
            part = None
            for x_ref, v in zip(x_refs, values):
                d = jnp.dot(
                    x_ref[:, pl.ds(k0, step)],
                    v,
                    precision=precision,
                    preferred_element_type=jnp.float32,
                )
                part = d if part is None else part + d
            return acc + part * s
        values = _dequant.decode(q, fmt, code, jnp.float32)
        for x_ref, v in zip(x_refs, values):
            w = (v.reshape(n_rows, group, block_n) * s[:, None, :]).reshape(step, block_n)
            acc = acc + jnp.dot(
                x_ref[:, pl.ds(k0, step)],
                w.astype(compute_dtype),
                precision=precision,
                preferred_element_type=jnp.float32,
            )
        return acc

    acc = jax.lax.fori_loop(0, steps_per_split, body, jnp.zeros((block_m, block_n), jnp.float32))
    o_ref[...] = acc.astype(o_ref.dtype)


def _pallas_matmul(x, qvalue, scale, problem, config, out_dtype, interpret):
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as pltriton

    bm, bn, split = config.block_m, config.block_n, config.split_k
    step = config.block_k // problem.rows_per_qvalue_row
    steps = problem.k_packed // step
    m_pad = -(-problem.m // bm) * bm
    n_pad = -(-problem.n // bn) * bn
    if m_pad != problem.m:  # activations are small: pad rows rather than mask them
        x = jnp.pad(x, ((0, m_pad - problem.m), (0, 0)))
    compute_dtype = x.dtype
    precision = (
        jax.lax.Precision.HIGHEST if compute_dtype == jnp.float32 else jax.lax.Precision.DEFAULT
    )
    x_parts = plugin_api.split_activations(x, problem)
    kernel = functools.partial(
        _kernel,
        fmt=problem.fmt,
        code=plugin_api.nf4_code() if problem.fmt == "nf4" else None,
        nparts=len(x_parts),
        step=step,
        group=problem.group_packed,
        steps_per_split=steps // split,
        n=problem.n,
        block_n=bn,
        compute_dtype=compute_dtype,
        precision=precision,
    )
    kp = problem.k_packed
    grid = (m_pad // bm, n_pad // bn, split)
    x_spec = pl.BlockSpec((bm, kp), lambda i, j, s: (i, 0))
    in_specs = [x_spec] * len(x_parts) + [
        pl.BlockSpec((kp, bn), lambda i, j, s: (0, j)),
        pl.BlockSpec((scale.shape[0], bn), lambda i, j, s: (0, j)),
    ]
    if split == 1:
        out_shape = jax.ShapeDtypeStruct((m_pad, n_pad), out_dtype)
        out_spec = pl.BlockSpec((bm, bn), lambda i, j, s: (i, j))
    else:  # per-split f32 partial sums, added up below
        out_shape = jax.ShapeDtypeStruct((split, m_pad, n_pad), jnp.float32)
        out_spec = pl.BlockSpec((None, bm, bn), lambda i, j, s: (s, i, j))
    out = pl.pallas_call(
        kernel,
        grid=grid,
        in_specs=in_specs,
        out_specs=out_spec,
        out_shape=out_shape,
        compiler_params=pltriton.CompilerParams(
            num_warps=config.num_warps, num_stages=config.num_stages
        ),
        interpret=interpret,
        name=f"jaxcore_quantized_matmul_{problem.fmt}",
    )(*x_parts, qvalue, scale)
    if split > 1:
        out = out.sum(axis=0).astype(out_dtype)
    return out[: problem.m, : problem.n]

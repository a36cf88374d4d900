"""Block shapes of the TPU kernel: a small per-regime table, overridable per call site.

Mosaic tiles VMEM arrays in (8, 128) (32-bit) / (16, 128) (bf16) / (32, 128) (8-bit)
vregs, so every block dimension must be a multiple of that tile or span the whole array
dimension. The K step must also divide K exactly (a partial K block would add garbage to
the accumulator) and line up with the scale blocks: either one scale row serves the whole
step, or the step covers a whole number of scale blocks, 8 at a time (one f32 sublane
tile of scales per step).
"""

from __future__ import annotations

import dataclasses

from jaxcore.kernels import plugin_api

_LANE = 128
_QVALUE_SUBLANE = 32  # 8-bit arrays tile as (32, 128)
_SCALE_SUBLANE = 8  # float32 arrays tile as (8, 128)


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    """Tiling of one Pallas/Mosaic quantized matmul.

    Attributes:
      block_m: activation rows per program (multiple of 16, or >= M: whole M).
      block_n: output columns per program (multiple of 128, or >= N: whole N).
      block_k: logical weight rows per grid step along K (divides K; see module doc).
    """

    block_m: int
    block_n: int
    block_k: int


# (regime, packed) -> default tiles. Decode (M <= 32) streams wide weight tiles; prefill
# uses 256-row activation tiles to keep the MXU busy. The f32 dequantized temporary
# (block_k x block_n x 4 bytes per x part) stays within ~2 MiB of VMEM.
_TABLE = {
    ("decode", False): BlockConfig(32, 512, 1024),
    ("decode", True): BlockConfig(32, 512, 1024),
    ("large", False): BlockConfig(256, 512, 512),
    ("large", True): BlockConfig(256, 512, 1024),
}

OVERRIDES = plugin_api.TileOverrides(BlockConfig, "jaxcore_tpu_block_override")
"""The :func:`block_config` overrides active in the current context."""


def block_config(**fields: int):
    """Overrides the table's :class:`BlockConfig` fields for quantized matmuls traced inside.

    Example: ``with jaxcore_tpu.block_config(block_k=512): y = jax.jit(f)(x, w)``. Scoping
    and caching follow :meth:`jaxcore.kernels.plugin_api.TileOverrides.override`. An
    unknown field raises TypeError; a value that breaks a Mosaic tiling rule raises
    ValueError when the call is traced.
    """
    return OVERRIDES.override(**fields)


def regime(m: int) -> str:
    """The table row for ``m`` activation rows."""
    return "decode" if m <= 32 else "large"


def step_error(step: int, problem: plugin_api.Problem) -> str | None:
    """Why ``step`` qvalue rows per K step are illegal, or None when legal."""
    kp, gp = problem.k_packed, problem.group_packed
    if step <= 0 or kp % step:
        return f"must divide the {kp} qvalue rows"
    if step != kp and step % _LANE:
        return f"must be a multiple of {_LANE} activation columns (or all of K)"
    if step != kp and step % _QVALUE_SUBLANE:
        return f"must be a multiple of {_QVALUE_SUBLANE} qvalue rows (or all of K)"
    if gp % step == 0:
        return None  # one scale row serves the whole step
    if step % gp:
        return f"must divide or be a multiple of the scale block ({gp} qvalue rows)"
    if step != kp and (step // gp) % _SCALE_SUBLANE:
        return (
            f"must cover a multiple of {_SCALE_SUBLANE} scale blocks "
            f"({_SCALE_SUBLANE * gp} qvalue rows) or all of K"
        )
    return None


def _pick_step(problem: plugin_api.Problem, target: int) -> int:
    """The largest legal step <= ``target`` qvalue rows, else the smallest legal one."""
    kp = problem.k_packed
    legal = [d for d in range(1, kp + 1) if kp % d == 0 and step_error(d, problem) is None]
    below = [d for d in legal if d <= target]
    return max(below) if below else min(legal)  # kp itself is always legal


def choose(problem: plugin_api.Problem) -> BlockConfig:
    """Picks the tiles for ``problem``: table, shape clamps, then overrides.

    Raises:
      ValueError: an override (see :func:`block_config`) that breaks a tiling rule.
    """
    override = OVERRIDES.active()
    base = _TABLE[(regime(problem.m), problem.packed)]
    unit = problem.rows_per_qvalue_row
    bm = problem.m if problem.m <= base.block_m else base.block_m
    bn = problem.n if problem.n <= base.block_n else base.block_n
    step = _pick_step(problem, base.block_k // unit)
    config = dataclasses.replace(BlockConfig(bm, bn, step * unit), **override)
    validate(config, problem)
    return config


def validate(config: BlockConfig, problem: plugin_api.Problem) -> None:
    """Raises ValueError naming the field of ``config`` that breaks a Mosaic rule."""
    if config.block_m <= 0 or (config.block_m < problem.m and config.block_m % 16):
        raise ValueError(
            f"block_m={config.block_m} must be a multiple of 16 or cover all M={problem.m} rows"
        )
    if config.block_n <= 0 or (config.block_n < problem.n and config.block_n % _LANE):
        raise ValueError(
            f"block_n={config.block_n} must be a multiple of {_LANE} or cover all "
            f"N={problem.n} columns"
        )
    unit = problem.rows_per_qvalue_row
    why = "must be even" if config.block_k % unit else step_error(config.block_k // unit, problem)
    if why is not None:
        raise ValueError(
            f"block_k={config.block_k} is not a legal K step for {problem.fmt} with "
            f"K={problem.k}, block_size={problem.block_size}: it {why}"
        )

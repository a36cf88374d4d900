"""Block sizes of the GPU kernels: a small per-regime table, overridable per call site.

The weight-only quantized matmul is memory bound at decode sizes (M <= 16): the kernel
must keep enough weight bytes in flight, so it uses the smallest legal row tile, wide K
steps and, when the (M, N) grid is too small to fill the GPU, splits K across programs.
At prefill sizes it is compute bound and uses square-ish 128-row tiles. Triton needs
power-of-two tiles of at least 16 in every ``dot`` dimension.
"""

from __future__ import annotations

import dataclasses

from jaxcore.kernels import plugin_api

# Programs that keep every SM of a current GPU busy with a few waves
# (132 SMs on H100 SXM, 304 CUs on MI300X); split-K stops once the grid reaches it.
_TARGET_PROGRAMS = 256
# Every split must still loop over at least this many K steps to pipeline its loads.
_MIN_STEPS_PER_SPLIT = 4
_MIN_DOT = 16  # smallest tile Triton's dot accepts in any dimension


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    """Tiling of one Pallas/Triton quantized matmul.

    Attributes:
      block_m: activation rows per program (power of two, >= 16).
      block_n: output columns per program (power of two, >= 16).
      block_k: logical weight rows per inner-loop step (power of two; for int4/NF4 the
        packed step ``block_k // 2`` must be >= 16).
      split_k: programs that share one output tile along K, summed afterwards.
      num_warps: Triton warps per program.
      num_stages: Triton software-pipelining stages of the K loop.
    """

    block_m: int
    block_n: int
    block_k: int
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3


# (regime, packed) -> default tiles. Each pipeline stage holds one 16 KiB (decode) or
# 8 KiB (int8 prefill) / 8 KiB (packed prefill) weight tile plus its activation tile. Regimes: "decode" M <= 16, "medium" M <= 128,
# "large" otherwise. Packed formats step twice as many logical rows per byte loaded.
_TABLE = {
    ("decode", False): BlockConfig(16, 128, 128, num_warps=4, num_stages=4),
    ("decode", True): BlockConfig(16, 128, 256, num_warps=4, num_stages=4),
    ("medium", False): BlockConfig(64, 128, 64, num_warps=4, num_stages=3),
    ("medium", True): BlockConfig(64, 128, 128, num_warps=4, num_stages=3),
    ("large", False): BlockConfig(128, 128, 64, num_warps=8, num_stages=3),
    ("large", True): BlockConfig(128, 128, 128, num_warps=8, num_stages=3),
}

# Most pipeline stages per platform: AMD GPUs have 64 KiB of LDS per CU (NVIDIA H100:
# 227 KiB of shared memory per block), and ROCm's Triton pipeliner is tuned for 2.
_MAX_STAGES = {"cuda": 4, "rocm": 2}

OVERRIDES = plugin_api.TileOverrides(BlockConfig, "jaxcore_gpu_block_override")
"""The :func:`block_config` overrides active in the current context."""


def block_config(**fields: int):
    """Overrides the table's :class:`BlockConfig` fields for quantized matmuls traced inside.

    Example::

        with jaxcore_gpu.block_config(block_n=64, split_k=4):
            y = jax.jit(f)(x, w)   # traced here, so uses the override

    Scoping and caching follow :meth:`jaxcore.kernels.plugin_api.TileOverrides.override`.
    An unknown field raises TypeError; a value that breaks a tiling rule raises
    ValueError when the call is traced.
    """
    return OVERRIDES.override(**fields)


def _pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def _next_pow2(v: int) -> int:
    return 1 << max(0, (v - 1).bit_length())


def _step_ok(step_packed: int, problem: plugin_api.Problem) -> bool:
    """Whether ``step_packed`` qvalue rows per K step tile K and the scale groups."""
    gp = problem.group_packed
    return (
        _pow2(step_packed)
        and step_packed >= _MIN_DOT
        and problem.k_packed % step_packed == 0
        and (gp % step_packed == 0 or (_pow2(gp) and step_packed % gp == 0))
    )


def regime(m: int) -> str:
    """The table row for ``m`` activation rows."""
    return "decode" if m <= 16 else "medium" if m <= 128 else "large"


def choose(problem: plugin_api.Problem, platform: str = "cuda") -> BlockConfig | None:
    """Picks the tiles for ``problem``: table, shape clamps, split-K, then overrides.

    Args:
      problem: the shapes.
      platform: ``"cuda"`` or ``"rocm"``; bounds the pipeline depth (shared memory).

    Returns:
      The :class:`BlockConfig`, or ``None`` when no legal K step exists (K or the
      scale group is not a multiple of 16 ``qvalue`` rows): the caller then uses the
      XLA dequantize-then-dot path.

    Raises:
      ValueError: an override (see :func:`block_config`) that breaks a tiling rule.
    """
    if platform not in _MAX_STAGES:
        raise ValueError(f"unknown GPU platform {platform!r}; expected one of {tuple(_MAX_STAGES)}")
    override = OVERRIDES.active()
    base = _TABLE[(regime(problem.m), problem.packed)]
    unit = problem.rows_per_qvalue_row
    bm = max(_MIN_DOT, min(base.block_m, _next_pow2(problem.m)))
    bn = max(_MIN_DOT, min(base.block_n, _next_pow2(problem.n)))
    step = base.block_k // unit
    while step >= _MIN_DOT and not _step_ok(step, problem):
        step //= 2
    if "block_k" not in override and step < _MIN_DOT:
        return None
    stages = min(base.num_stages, _MAX_STAGES[platform])
    config = BlockConfig(bm, bn, step * unit, 1, base.num_warps, stages)
    if regime(problem.m) == "decode" and "split_k" not in override:
        config = dataclasses.replace(config, split_k=_split_k(problem, config))
    config = dataclasses.replace(config, **override)
    validate(config, problem)
    return config


def _split_k(problem: plugin_api.Problem, config: BlockConfig) -> int:
    """Largest power-of-two split that fills the GPU and keeps the K loop pipelined."""
    tiles = -(-problem.m // config.block_m) * -(-problem.n // config.block_n)
    steps = problem.k_packed // (config.block_k // problem.rows_per_qvalue_row)
    split = 1
    while (
        tiles * split * 2 <= _TARGET_PROGRAMS
        and steps % (split * 2) == 0
        and steps // (split * 2) >= _MIN_STEPS_PER_SPLIT
    ):
        split *= 2
    return split


def validate(config: BlockConfig, problem: plugin_api.Problem) -> None:
    """Raises ValueError naming the field of ``config`` that breaks a tiling rule."""
    for name in ("block_m", "block_n"):
        v = getattr(config, name)
        if not _pow2(v) or v < _MIN_DOT:
            raise ValueError(f"{name}={v} must be a power of two >= {_MIN_DOT}")
    unit = problem.rows_per_qvalue_row
    if config.block_k % unit or not _step_ok(config.block_k // unit, problem):
        raise ValueError(
            f"block_k={config.block_k} is not a legal K step for {problem.fmt} with "
            f"K={problem.k}, block_size={problem.block_size}: it must be a power of two, "
            f"give >= {_MIN_DOT} qvalue rows, divide K, and divide or be a multiple of "
            f"the (power-of-two) block_size"
        )
    steps = problem.k_packed // (config.block_k // unit)
    if config.split_k < 1 or steps % config.split_k:
        raise ValueError(
            f"split_k={config.split_k} must be >= 1 and divide the {steps} K steps "
            f"(K={problem.k}, block_k={config.block_k})"
        )
    if config.num_warps < 1 or config.num_stages < 1:
        raise ValueError(
            f"num_warps={config.num_warps} and num_stages={config.num_stages} must be >= 1"
        )

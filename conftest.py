"""Repository-wide pytest hooks: pins each pytest-xdist worker to one accelerator.

With `JAXCORE_ENABLE_XDIST_PINNING=1` (set by ci/run_pytest_{cuda,rocm,tpu}.sh), xdist worker
`gwN` sees only device `N mod JAXCORE_ACCELERATOR_COUNT`, through the same variables
build/parallel_accelerator_execute.sh sets for Bazel tests, and the workers sharing one
device split its memory. The variables are set when a worker configures itself, before any
test module imports JAX, so JAX only ever initializes the pinned device. Without the flag, or
outside xdist workers (the serial multiaccelerator phase), nothing changes.
"""

import os
import re

import pytest

_PLATFORMS = ("cuda", "rocm", "tpu", "generic")


def device_environment(
    worker_id: str, count: int, platform: str, workers: int, environ=None
) -> dict:
    """The variables that restrict xdist worker `worker_id` to its device.

    Args:
      worker_id: the xdist worker name, `gw<N>`.
      count: number of accelerators on the machine.
      platform: `cuda`, `rocm`, `tpu` or `generic` (all runtimes' variables).
      workers: total number of xdist workers; the ones sharing a device split its memory.
      environ: the current environment; memory settings already there are kept.

    Returns:
      A dict of environment variables to set.

    Raises:
      ValueError: for a malformed worker id, a non-positive count or worker total, or an
        unknown platform.
    """
    environ = os.environ if environ is None else environ
    match = re.fullmatch(r"gw(\d+)", worker_id)
    if not match:
        raise ValueError(f"xdist worker id {worker_id!r} is not of the form 'gw<N>'")
    if count < 1:
        raise ValueError(f"JAXCORE_ACCELERATOR_COUNT must be >= 1, got {count}")
    if workers < 1:
        raise ValueError(f"the xdist worker count must be >= 1, got {workers}")
    if platform not in _PLATFORMS:
        raise ValueError(f"JAXCORE_ACCELERATOR_PLATFORM={platform!r} is not one of {_PLATFORMS}")
    device = str(int(match.group(1)) % count)
    env = {}
    if platform == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = device
    elif platform == "rocm":
        # ROCR hides the other GPUs; HIP (and its CUDA alias) then number the one left as 0.
        env.update(ROCR_VISIBLE_DEVICES=device, HIP_VISIBLE_DEVICES="0", CUDA_VISIBLE_DEVICES="0")
    else:
        if platform == "generic":
            env.update(CUDA_VISIBLE_DEVICES=device, HIP_VISIBLE_DEVICES=device)
        env.update(
            TPU_VISIBLE_CHIPS=device,
            TPU_CHIPS_PER_PROCESS_BOUNDS="1,1,1",
            TPU_PROCESS_BOUNDS="1,1,1",
            ALLOW_MULTIPLE_LIBTPU_LOAD="true",
        )
    env["JAXCORE_ACCELERATOR_INDEX"] = device
    if "XLA_PYTHON_CLIENT_PREALLOCATE" not in environ:
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    if "XLA_PYTHON_CLIENT_MEM_FRACTION" not in environ:
        sharing = -(-workers // count)  # workers on the busiest device
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{0.9 / sharing:.3f}"
    return env


def _positive_int_setting(name: str, value: str) -> int:
    if not re.fullmatch(r"\d+", value or "") or int(value) < 1:
        raise pytest.UsageError(
            f"{name}={value!r}: JAXCORE_ENABLE_XDIST_PINNING needs it to be a positive integer"
        )
    return int(value)


def pytest_configure(config):
    """Pins this xdist worker to its device (only with JAXCORE_ENABLE_XDIST_PINNING set)."""
    if os.environ.get("JAXCORE_ENABLE_XDIST_PINNING", "") in ("", "0"):
        return
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return  # The xdist controller, or a run without xdist: every device stays visible.
    count = _positive_int_setting(
        "JAXCORE_ACCELERATOR_COUNT", os.environ.get("JAXCORE_ACCELERATOR_COUNT", "")
    )
    workers = int(workerinput.get("workercount", os.environ.get("PYTEST_XDIST_WORKER_COUNT", 1)))
    platform = os.environ.get("JAXCORE_ACCELERATOR_PLATFORM", "generic")
    try:
        env = device_environment(workerinput["workerid"], count, platform, workers)
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    os.environ.update(env)

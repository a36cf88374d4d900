"""The side of `jaxcore.launch` that runs inside each launched process."""

from __future__ import annotations

import os
import sys
import traceback

from jaxcore.launch import _env


def launched() -> bool:
    """Whether this process was started by ``python -m jaxcore.launch``."""
    return _env.PROCESS_ID in os.environ


def _int_setting(name: str) -> int:
    value = os.environ.get(name, "")
    try:
        return int(value)
    except ValueError:
        raise RuntimeError(
            f"jaxcore.launch: {name}={value!r} is not an integer; this variable is set by "
            "`python -m jaxcore.launch` and should not be changed"
        ) from None


def _fail_fast_excepthook(kind, value, tb) -> None:
    """Prints an uncaught exception, then exits at once with status 1.

    A normal exit runs JAX's distributed shutdown, which waits in a barrier for every other
    process; after an error the others may be waiting for this one in a collective, so the
    failed process would never exit and the launcher would never see the failure. Exiting
    with ``os._exit`` skips that barrier; the launcher then stops the other processes.
    """
    try:
        traceback.print_exception(kind, value, tb)
        print(
            f"jaxcore.launch: process {os.environ.get(_env.PROCESS_ID)} failed; exiting "
            "without the distributed shutdown barrier",
            file=sys.stderr,
        )
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(1)


def initialize(*, initialization_timeout: int = 120, heartbeat_timeout_seconds: int = 100) -> bool:
    """Joins the multi-process run ``python -m jaxcore.launch`` started; a no-op otherwise.

    Call it first thing, before any other JAX call, in a program run under the launcher.
    It reads the coordinator address, process count and process id the launcher put in the
    environment, selects CPU collectives (gloo) and calls ``jax.distributed.initialize``.
    Outside the launcher it does nothing, so the same program runs as one process. On a
    cluster (SLURM, Kubernetes, Cloud TPU), call ``jax.distributed.initialize()`` instead:
    JAX detects those environments itself.

    Under the launcher it also makes an uncaught exception end the process at once (after
    printing it), instead of hanging in JAX's shutdown barrier, so that the launcher sees
    the failure and stops the other processes. (``sys.exit(n)`` is not an uncaught
    exception: such a process still waits in the barrier, which ``--timeout`` bounds.)

    Args:
      initialization_timeout: seconds to wait for every process to connect.
      heartbeat_timeout_seconds: seconds without a heartbeat after which the coordinator
        declares a process dead.

    Returns:
      True if this process joined a launched run (or had already), False outside the launcher.

    Raises:
      RuntimeError: if the launcher's variables are malformed.
    """
    if not launched():
        return False
    import jax

    if jax.distributed.is_initialized():
        return True
    process_id = _int_setting(_env.PROCESS_ID)
    num_processes = _int_setting(_env.NUM_PROCESSES)
    coordinator = os.environ.get(_env.COORDINATOR) or os.environ.get(_env.JAX_COORDINATOR)
    if not coordinator:
        raise RuntimeError(
            f"jaxcore.launch: {_env.COORDINATOR} is not set; start the program "
            "with `python -m jaxcore.launch`"
        )
    jax.config.update("jax_cpu_collectives_implementation", _env.CPU_COLLECTIVES)
    jax.distributed.initialize(
        coordinator_address=coordinator,
        num_processes=num_processes,
        process_id=process_id,
        coordinator_bind_address=os.environ.get(_env.JAX_COORDINATOR_BIND, coordinator),
        initialization_timeout=initialization_timeout,
        heartbeat_timeout_seconds=heartbeat_timeout_seconds,
    )
    sys.excepthook = _fail_fast_excepthook
    return True

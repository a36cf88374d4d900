"""A fake accelerator test: records the device it was given, then sleeps or waits.

`tests/parallel_accelerator_execute_test.py` runs this program under
`build/parallel_accelerator_execute.sh` in place of a real GPU/TPU test. Each run appends JSON
lines (one when it starts, one when it ends) to the file given by `--record`, so the test can
check which device variables every run saw and how many runs overlapped on one device.
"""

import argparse
import contextlib
import json
import os
import signal
import sys
import time

# Variables the wrapper sets for a test; the record keeps exactly these.
DEVICE_VARIABLES = (
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "TPU_VISIBLE_CHIPS",
    "TPU_CHIPS_PER_PROCESS_BOUNDS",
    "TPU_PROCESS_BOUNDS",
    "ALLOW_MULTIPLE_LIBTPU_LOAD",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "JAXCORE_ACCELERATOR_INDEX",
    "JAXCORE_ACCELERATOR_SLOT",
)


def _append(path: str, record: dict) -> None:
    """Appends one JSON line in a single write, so concurrent runs never interleave."""
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _open_fd_targets() -> list:
    """What this process's file descriptors above stderr point at (Linux /proc)."""
    targets = []
    for name in os.listdir("/proc/self/fd"):
        if int(name) <= 2:
            continue
        # The descriptor os.listdir itself used is already closed: OSError.
        with contextlib.suppress(OSError):
            targets.append(os.readlink(f"/proc/self/fd/{name}"))
    return targets


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--record", required=True, help="JSON-lines file to append to")
    parser.add_argument("--name", default="", help="name of this run in the records")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds to sleep")
    parser.add_argument("--hold-until", default="", help="wait until this file exists")
    parser.add_argument("--exit", type=int, default=0, help="exit status to return")
    parser.add_argument(
        "--kill-self",
        action="store_true",
        help="die by SIGKILL right after the start record (a crashing test)",
    )
    args = parser.parse_args(argv)

    base = {
        "name": args.name,
        "pid": os.getpid(),
        "env": {k: os.environ[k] for k in DEVICE_VARIABLES if k in os.environ},
    }
    _append(args.record, dict(base, event="start", time=time.time(), fds=_open_fd_targets()))
    if args.kill_self:
        os.kill(os.getpid(), signal.SIGKILL)
    if args.sleep:
        time.sleep(args.sleep)
    if args.hold_until:
        while not os.path.exists(args.hold_until):
            time.sleep(0.01)
    _append(args.record, dict(base, event="end", time=time.time()))
    return args.exit


if __name__ == "__main__":
    sys.exit(main())

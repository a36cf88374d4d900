"""The launcher: starts N copies of a command as one JAX multi-process run, and watches them.

It imports no JAX. Each process gets its own process group (so stopping it stops whatever
it started too) and dies with the launcher if the launcher is killed outright (Linux's
parent-death signal). The coordinator port is picked by the OS (bind to port 0) and kept
reserved by the launcher until the run ends, so concurrent launches never collide.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from jaxcore.launch import _env

# Exit status when --timeout expires (as timeout(1) does).
TIMEOUT_EXIT_CODE = 124
# Seconds between SIGTERM and SIGKILL when stopping processes.
_STOP_GRACE_S = 2.0
# Lines of each process's output repeated in the failure summary.
_TAIL_LINES = 30
_POLL_S = 0.05

_PR_SET_PDEATHSIG = 1


def _log(message: str) -> None:
    sys.stderr.write(f"[jaxcore.launch] {message}\n")
    sys.stderr.flush()


def reserve_port(host: str = "127.0.0.1") -> socket.socket:
    """Binds a socket to a free port on ``host`` chosen by the OS, and returns it.

    The socket is bound but not listening, with ``SO_REUSEPORT`` set: JAX's coordinator
    (gRPC, which sets ``SO_REUSEPORT`` too) can bind the same port, while the OS hands the
    port to no other ``bind(port 0)`` until the socket is closed.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, 0))
    except BaseException:
        sock.close()
        raise
    return sock


def _set_parent_death_signal() -> None:
    """In the child before exec: get SIGKILL if the launcher dies (Linux only, best effort)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def child_environment(
    base: dict, process_id: int, processes: int, devices_per_process: int, coordinator: str
) -> dict:
    """The environment of process ``process_id``: ``base`` plus the launcher's variables.

    Sets the process id and count and the coordinator address (jaxcore's variables, read
    by `jaxcore.launch.initialize`, and JAX's own coordinator variables), CPU collectives,
    ``JAX_PLATFORMS=cpu``, and ``devices_per_process`` host CPU devices in ``XLA_FLAGS``
    (replacing any device count already there).
    """
    env = dict(base)
    flags = re.sub(rf"{_env.DEVICE_COUNT_FLAG}=\S*", "", env.get("XLA_FLAGS", "")).split()
    flags.append(f"{_env.DEVICE_COUNT_FLAG}={devices_per_process}")
    env.update(
        {
            _env.PROCESS_ID: str(process_id),
            _env.NUM_PROCESSES: str(processes),
            _env.COORDINATOR: coordinator,
            _env.DEVICES_PER_PROCESS: str(devices_per_process),
            _env.JAX_COORDINATOR: coordinator,
            _env.JAX_COORDINATOR_BIND: coordinator,
            _env.JAX_CPU_COLLECTIVES: _env.CPU_COLLECTIVES,
            "JAX_PLATFORMS": "cpu",
            "XLA_FLAGS": " ".join(flags),
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


class _Output:
    """Copies one process's stdout or stderr to ours, each line prefixed, keeping a tail."""

    def __init__(self, stream, sink, prefix: bytes, lock: threading.Lock):
        self.tail: collections.deque[bytes] = collections.deque(maxlen=_TAIL_LINES)
        self._stream, self._sink, self._prefix, self._lock = stream, sink, prefix, lock
        self._thread = threading.Thread(target=self._copy, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _copy(self) -> None:
        for line in iter(self._stream.readline, b""):
            if not line.endswith(b"\n"):
                line += b"\n"
            self.tail.append(line)
            with self._lock:
                self._sink.write(self._prefix + line)
                self._sink.flush()
        self._stream.close()


class _Process:
    def __init__(self, index: int, popen: subprocess.Popen, lock: threading.Lock, width: int):
        self.index = index
        self.popen = popen
        self.prefix = f"[p{index:0{width}d}] ".encode()
        self.stdout = _Output(popen.stdout, sys.stdout.buffer, self.prefix, lock)
        self.stderr = _Output(popen.stderr, sys.stderr.buffer, self.prefix, lock)
        # When the process exited (monotonic clock), recorded by a thread blocked in wait():
        # when one process dies, the others often fail a moment later (their collectives
        # lose a peer), and the first failure is the one to report.
        self.exit_time: float | None = None
        self._waiter = threading.Thread(target=self._wait, daemon=True)

    def start_threads(self) -> None:
        self.stdout.start()
        self.stderr.start()
        self._waiter.start()

    def _wait(self) -> None:
        self.popen.wait()
        self.exit_time = time.monotonic()

    def failed(self) -> bool:
        return self.exit_time is not None and self.popen.returncode != 0

    def exit_order(self) -> float:
        """Sort key: when the process exited (infinity while it runs)."""
        return math.inf if self.exit_time is None else self.exit_time

    def blame_order(self) -> tuple[bool, float]:
        """Sort key for the failure to report: deaths by a signal first, then by exit time.

        A process killed by a signal did not die of its peers' failures, while the others'
        collectives fail because they lost it; and the waiter threads that record exit times
        can run in any order on a loaded machine, so a timestamp alone may blame a peer.
        """
        return (self.popen.returncode is None or self.popen.returncode >= 0, self.exit_order())

    def signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signum)


def _exit_status(returncode: int) -> int:
    """A Popen return code as a shell exit status (killed by signal N: 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def _describe(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with code {returncode}"


def launch(
    command: Sequence[str],
    processes: int,
    devices_per_process: int = 1,
    timeout: float | None = None,
    env: dict | None = None,
) -> int:
    """Runs ``command`` as ``processes`` local processes of one JAX multi-process run.

    Each process's output is copied to ours, every line prefixed with ``[p<id>]``. The run
    ends when every process has exited, when one fails (exits non-zero or is killed), when
    ``timeout`` expires, or when the launcher gets SIGINT/SIGTERM/SIGHUP; then the processes
    still running are stopped (SIGTERM to each process group, SIGKILL after a grace period).

    Args:
      command: the program and its arguments, e.g. ``["python3", "train.py"]``.
      processes: how many processes to start (N >= 1).
      devices_per_process: host CPU devices per process (the global mesh has N * D).
      timeout: seconds after which the run is stopped; None for no limit.
      env: the environment to start from (default: ours).

    Returns:
      0 if every process succeeded; otherwise the exit status of the first process that
      failed (128 + N for one killed by signal N), 124 on timeout, or 128 + N when the
      launcher itself got signal N.

    Raises:
      ValueError: for an empty command or non-positive counts or timeout.
      FileNotFoundError: if the command is not found (checked before any process starts).
    """
    if not command:
        raise ValueError("jaxcore.launch: no command given (put it after `--`)")
    if processes < 1:
        raise ValueError(f"jaxcore.launch: --processes must be >= 1, got {processes}")
    if devices_per_process < 1:
        raise ValueError(
            f"jaxcore.launch: --devices-per-process must be >= 1, got {devices_per_process}"
        )
    if timeout is not None and timeout <= 0:
        raise ValueError(f"jaxcore.launch: --timeout must be positive, got {timeout}")
    base = dict(os.environ if env is None else env)
    if shutil.which(command[0], path=base.get("PATH")) is None:
        raise FileNotFoundError(f"command not found or not executable: {command[0]!r}")

    stop_signal: list[int] = []
    previous = {}

    def on_signal(signum, frame):
        stop_signal.append(signum)

    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            previous[signum] = signal.signal(signum, on_signal)

    reservation = reserve_port()
    coordinator = f"127.0.0.1:{reservation.getsockname()[1]}"
    _log(
        f"{processes} process(es) x {devices_per_process} CPU device(s), coordinator {coordinator}: "
        + " ".join(command)
    )
    lock = threading.Lock()
    width = len(str(processes - 1))
    procs: list[_Process] = []
    try:
        # Every process is started before any output thread, so no thread is running while
        # the parent-death hook runs between fork and exec.
        for i in range(processes):
            popen = subprocess.Popen(
                list(command),
                env=child_environment(base, i, processes, devices_per_process, coordinator),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                preexec_fn=_set_parent_death_signal,
            )
            procs.append(_Process(i, popen, lock, width))
        for p in procs:
            p.start_threads()
        return _watch(procs, timeout, stop_signal)
    finally:
        _stop(procs)
        for p in procs:
            p.stdout.join(5.0)
            p.stderr.join(5.0)
        reservation.close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _watch(procs: list[_Process], timeout: float | None, stop_signal: list[int]) -> int:
    start = time.monotonic()
    while True:
        running = [p for p in procs if p.exit_time is None]
        failed = [p for p in procs if p.failed()]
        if failed:
            # Others that fail within a moment are most likely failing because of it.
            time.sleep(_POLL_S)
            first = min((p for p in procs if p.failed()), key=_Process.blame_order)
            code = first.popen.returncode
            running = [p for p in procs if p.exit_time is None]
            _log(
                f"process {first.index} {_describe(code)}; stopping the {len(running)} still running"
            )
            first.stderr.join(1.0)
            first.stdout.join(1.0)
            tail = list(first.stderr.tail) or list(first.stdout.tail)
            if tail:
                _log(f"last lines of process {first.index}'s output:")
                sys.stderr.buffer.write(b"".join(first.prefix + line for line in tail))
                sys.stderr.flush()
            return _exit_status(code)
        if not running:
            return 0
        if stop_signal:
            signum = stop_signal[0]
            _log(f"got {signal.Signals(signum).name}; stopping {len(running)} process(es)")
            return 128 + signum
        if timeout is not None and time.monotonic() - start > timeout:
            _log(
                f"timed out after {timeout:g} s; stopping {len(running)} process(es): "
                + ", ".join(str(p.index) for p in running)
            )
            return TIMEOUT_EXIT_CODE
        time.sleep(_POLL_S)


def _stop(procs: list[_Process]) -> None:
    """Stops every process group: SIGTERM, then SIGKILL to whatever is left after a grace period.

    Groups whose leader already exited get SIGKILL too, for anything the leader left behind.
    """
    failed_before = sorted((p for p in procs if p.failed()), key=_Process.exit_order)
    running = [p for p in procs if p.popen.poll() is None]
    for p in running:
        p.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + _STOP_GRACE_S
    for p in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.popen.wait(max(0.0, deadline - time.monotonic()))
    for p in procs:
        p.signal_group(signal.SIGKILL)
    for p in procs:
        try:
            p.popen.wait(5.0)
        except subprocess.TimeoutExpired:
            _log(f"process {p.index} (pid {p.popen.pid}) did not exit after SIGKILL")
    if len(failed_before) > 1:
        _log(
            "failed on their own, in this order: "
            + ", ".join(f"process {p.index} {_describe(p.popen.returncode)}" for p in failed_before)
        )


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m jaxcore.launch",
        description="Runs a command as N local processes of one JAX multi-process run "
        "(coordinator on a free loopback port, CPU devices, gloo collectives). "
        "The program calls jaxcore.launch.initialize() first.",
        epilog="Example: python -m jaxcore.launch --processes 2 --devices-per-process 2 -- "
        "python3 train.py",
    )
    parser.add_argument("--processes", "-n", type=int, required=True, help="number of processes")
    parser.add_argument(
        "--devices-per-process",
        "-d",
        type=int,
        default=1,
        help="CPU devices per process (default 1)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help=f"seconds before the run is stopped (exit code {TIMEOUT_EXIT_CODE})",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- command [args]")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status (see `launch`)."""
    parser = make_parser()
    args = parser.parse_args(argv)
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        parser.error("give the command to run after `--`")
    try:
        return launch(command, args.processes, args.devices_per_process, args.timeout)
    except (ValueError, OSError) as e:
        _log(f"error: {e}")
        return 2

"""Runs programs under `python -m jaxcore.launch` (and alone) for the multi-process tests."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import numpy as np

import jaxcore

PROGRAMS = pathlib.Path(__file__).resolve().with_name("multiprocess_programs.py")
# Where `import jaxcore` resolves from, for the child processes (a checkout or Bazel's runfiles).
_JAXCORE_ROOT = str(pathlib.Path(jaxcore.__file__).resolve().parents[1])
# Every launch is bounded; the run's own --timeout stops it first.
LAUNCH_TIMEOUT_S = 150


def environment(**extra: str) -> dict:
    """Our environment, with jaxcore importable in the children and CPU devices only."""
    env = dict(os.environ)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = _JAXCORE_ROOT + (os.pathsep + path if path else "")
    env["JAX_PLATFORMS"] = "cpu"
    env.pop("JAXCORE_PROCESS_ID", None)  # never look launched to the children by accident
    env.update(extra)
    return env


@dataclasses.dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def coordinator_port(self) -> int:
        match = re.search(r"coordinator 127\.0\.0\.1:(\d+)", self.stderr)
        assert match, f"the launcher did not name its coordinator:\n{self.stderr}"
        return int(match.group(1))

    def describe(self) -> str:
        return (
            f"exit code {self.returncode} after {self.seconds:.1f} s\n--- stdout\n{self.stdout[-6000:]}"
            f"\n--- stderr\n{self.stderr[-10000:]}"
        )


def _run(cmd: list[str], env: dict, timeout: float) -> Run:
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"{cmd} did not finish in {timeout} s\n{out}\n{err}") from None
    return Run(proc.returncode, out, err, time.monotonic() - start)


def launch(
    processes: int,
    devices: int,
    command: list[str],
    *,
    timeout: float = 120,
    env: dict | None = None,
) -> Run:
    """``python -m jaxcore.launch -n processes -d devices --timeout timeout -- command``."""
    cmd = [
        sys.executable,
        "-m",
        "jaxcore.launch",
        "--processes",
        str(processes),
        "--devices-per-process",
        str(devices),
        "--timeout",
        str(timeout),
        "--",
        *command,
    ]
    return _run(cmd, env if env is not None else environment(), timeout + 30)


def launch_program(processes: int, devices: int, *args: str, timeout: float = 120) -> Run:
    """Runs tests/multiprocess_programs.py with ``args`` under the launcher."""
    return launch(processes, devices, [sys.executable, str(PROGRAMS), *args], timeout=timeout)


def run_alone(*args: str, devices: int = 4) -> Run:
    """Runs tests/multiprocess_programs.py as one ordinary process with ``devices`` CPU devices."""
    env = environment(XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    return _run([sys.executable, str(PROGRAMS), *args], env, LAUNCH_TIMEOUT_S)


def load(path: pathlib.Path) -> dict:
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def assert_same_results(got: dict, want: dict, *, close: dict[str, float] = None) -> None:
    """Every result equals the one-process run's bit for bit, except those in ``close``.

    ``close`` maps result names to a tolerance relative to the result's largest magnitude:
    values summed over shards held by different processes (gloo) add up in another order
    than within one process, which moves the last bits (more where terms cancel).
    """
    close = close or {}
    assert sorted(got) == sorted(want)
    for name in want:
        if name in close:
            assert got[name].shape == want[name].shape, name
            error = float(np.max(np.abs(got[name] - want[name]), initial=0.0))
            scale = float(np.max(np.abs(want[name]), initial=0.0))
            assert error <= close[name] * scale, (
                f"{name}: max error {error} > {close[name]} * {scale}"
            )
        else:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live (not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")

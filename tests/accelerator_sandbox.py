"""The sandbox the tests of build/parallel_accelerator_execute.sh run the real script in.

Each test gets its own lock directory, fake /dev and /sys trees, fake `nvidia-smi`/`rocm-smi`
and a PATH holding only the tools the script needs; `fake_accelerator_harness.py` records the
device variables each test was given and when it started and ended.
"""

import contextlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = REPO / "build" / "parallel_accelerator_execute.sh"
HARNESS = REPO / "tests" / "fake_accelerator_harness.py"

EXIT_USAGE = 2
EXIT_LOCK_DIR = 73
EXIT_WAIT_TIMEOUT = 75
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127

# Tools the script (and the fake GPU tools) run; the hermetic PATH links exactly these, and
# python3 (the last Python the script tries, after /usr/bin and /usr/local/bin) is this one.
_TOOLS = ("bash", "sh", "cat")


@pytest.fixture(name="sandbox")
def sandbox_fixture(tmp_path):
    """A clean environment: own lock dir, empty fake /dev and /sys, PATH without GPU tools."""
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in _TOOLS:
        found = shutil.which(tool)
        assert found, f"{tool} is needed by the script under test"
        (tools / tool).symlink_to(found)
    (tools / "python3").symlink_to(os.path.realpath(sys.executable))
    fake_bin = tmp_path / "fake_bin"
    fake_bin.mkdir()
    (tmp_path / "dev").mkdir()
    (tmp_path / "sys").mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("JAXCORE_", "XLA_PYTHON_CLIENT_", "TPU_", "CUDA_", "HIP_", "ROCR_"))
        and k
        not in (
            "TEST_SRCDIR",
            "RUNFILES_DIR",
            "RUNFILES_MANIFEST_FILE",
            "TEST_WORKSPACE",
            "TEST_TARGET",
            "ALLOW_MULTIPLE_LIBTPU_LOAD",
        )
    }
    env.update(
        PATH=f"{fake_bin}:{tools}",
        JAXCORE_LOCK_DIR=str(tmp_path / "locks"),
        JAXCORE_ACCELERATOR_DEV_DIR=str(tmp_path / "dev"),
        JAXCORE_ACCELERATOR_SYSFS_DIR=str(tmp_path / "sys"),
        JAXCORE_ACCELERATOR_WAIT_S="60",
    )
    return Sandbox(tmp_path, env)


class Sandbox:
    """Runs the script around the harness and reads back what the harness recorded."""

    def __init__(self, root: pathlib.Path, env: dict):
        self.root = root
        self.env = env
        self.record = root / "record.jsonl"
        self.release = root / "release"  # the `--hold-until` file of held runs
        self.fake_bin = root / "fake_bin"
        self.lock_dir = pathlib.Path(env["JAXCORE_LOCK_DIR"])

    def command(self, name="t", *harness_args):
        return [
            str(SCRIPT),
            sys.executable,
            str(HARNESS),
            "--record",
            str(self.record),
            "--name",
            name,
            *harness_args,
        ]

    def run(self, name="t", *harness_args, env=None, timeout=60):
        return subprocess.run(
            self.command(name, *harness_args),
            env=dict(self.env, **(env or {})),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, name="t", *harness_args, env=None, **popen_kwargs):
        return subprocess.Popen(
            self.command(name, *harness_args),
            env=dict(self.env, **(env or {})),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            **popen_kwargs,
        )

    def events(self):
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def started(self, name):
        return [e for e in self.events() if e["event"] == "start" and e["name"] == name]

    def wait_started(self, name, proc=None, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.started(name)
            if found:
                return found[0]
            if proc is not None and proc.poll() is not None:
                raise AssertionError(f"{name} exited {proc.returncode}: {proc.stderr.read()}")
            time.sleep(0.01)
        raise AssertionError(f"{name} did not start within {timeout}s")

    def hold(self, name, env):
        """Starts a run that keeps its slot until `release` exists; returns once it started."""
        proc = self.start(name, "--hold-until", str(self.release), env=env)
        self.wait_started(name, proc)
        return proc

    def queued(self):
        """Callers that have queued behind a busy slot (their node file says `queued`)."""
        count = 0
        for node in self.lock_dir.glob("accelerator_*_slot_*.node.*"):
            with contextlib.suppress(FileNotFoundError):
                count += "queued" in node.read_text().split()
        return count

    def wait_enqueued(self, count, timeout=30.0):
        """Waits until `count` callers have queued (the script's documented node files)."""
        deadline = time.monotonic() + timeout
        while self.queued() < count:
            assert time.monotonic() < deadline, f"{count} callers never queued"
            time.sleep(0.01)

    def fake_tool(self, name, output):
        path = self.fake_bin / name
        path.write_text("#!/bin/sh\ncat <<'EOF'\n" + output + "EOF\n")
        path.chmod(0o755)

"""ci/run_pytest_newest.sh: the whole pytest suite at the newest end of the tested JAX range.

The job runs for real in a scratch environment: fake `python3` (build.py), fake interpreters
under a fake pyenv and a fake venv interpreter record their arguments, so no venv is built and
no test runs. Checked: which Python it picks (3.13, else 3.12; a pyenv shim that runs another
version is passed over), the commands and their order (the venv from the newest lock, then the
CPU pytest job's phases with the venv's interpreter), a clear SKIPPED line and exit 0 without a
Python 3.12+ (a failure with JAXCORE_NEWEST_REQUIRED=1), and failures failing the job.
"""

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "ci" / "run_pytest_newest.sh"
_TOOLS = ("bash", "sh", "env", "nproc", "awk", "dirname", "mkdir", "grep", "id", "cat")

# Reports its version for the version probe; otherwise records its argv and exits with
# $FAKE_RC_<name> (0 when unset).
_FAKE = """#!/bin/sh
if [ "$1" = "-c" ]; then echo {version}; exit 0; fi
echo "{name} $*" >> "$FAKE_RECORD"
eval "rc=\\${{FAKE_RC_{name}:-0}}"
exit "$rc"
"""


def _fake(path: Path, name: str, version: str = "0.0") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_FAKE.format(name=name, version=version))
    path.chmod(0o755)
    return path


class Scratch:
    def __init__(self, root: Path):
        self.root = root
        tools = root / "tools"
        tools.mkdir()
        for tool in _TOOLS:
            (tools / tool).symlink_to(shutil.which(tool))
        self.bin = root / "bin"
        self.bin.mkdir()
        self.pyenv = root / "pyenv"
        (self.pyenv / "versions").mkdir(parents=True)
        self.record = root / "record.txt"
        self.venv = root / "venv313"
        self.tests = root / "tests"
        self.tests.mkdir()
        _fake(self.bin / "python3", "python3")
        _fake(self.bin / "bazel", "bazel")
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("JAXCORE_", "PYTEST_", "PYENV")) and k != "JAX_PLATFORMS"
        }
        self.env.update(
            PATH=f"{self.bin}:{tools}",
            PYENV_ROOT=str(self.pyenv),
            FAKE_RECORD=str(self.record),
            JAXCORE_SKIP_SETUP="1",
            JAXCORE_BAZEL=str(self.bin / "bazel"),
            JAXCORE_TEST_DIR=str(self.tests),
            JAXCORE_CPU_KERNELS_LIB=str(root / "libjaxcore_cpu_kernels.so"),
        )
        (root / "libjaxcore_cpu_kernels.so").write_bytes(b"")

    def pyenv_python(self, version: str, patch: str = "1") -> Path:
        return _fake(
            self.pyenv / "versions" / f"{version}.{patch}" / "bin" / f"python{version}",
            f"python{version.replace('.', '')}",
            version,
        )

    def run(self, **env):
        return subprocess.run(
            ["bash", str(SCRIPT)],
            env=dict(self.env, **env),
            capture_output=True,
            text=True,
            cwd=self.root,
            timeout=60,
        )

    def commands(self, **env):
        """The commands a dry run prints, as argv lists."""
        result = self.run(JAXCORE_DRY_RUN="1", **env)
        assert result.returncode == 0, result.stderr
        return [
            shlex.split(line[2:]) for line in result.stdout.splitlines() if line.startswith("+ ")
        ]

    def calls(self):
        return self.record.read_text().splitlines() if self.record.exists() else []


@pytest.fixture
def scratch(tmp_path):
    return Scratch(tmp_path)


def test_job_is_strict_and_reads_the_default_env():
    text = SCRIPT.read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text
    assert "source ci/envs/default.env" in text and "source ci/_common.sh" in text
    assert os.access(SCRIPT, os.X_OK)


def test_newest_python_gets_a_venv_from_the_newest_lock_then_the_whole_suite(scratch):
    scratch.pyenv_python("3.12")
    scratch.pyenv_python("3.13")
    venv = REPO / ".venv-3.13"  # the job runs from the repository root
    commands = scratch.commands(JAXCORE_NEWEST_VENV="")
    python = f"{venv}/bin/python"
    assert commands == [
        [
            "env",
            f"JAXCORE_VENV={venv}",
            "python3",
            "build/build.py",
            "venv",
            "--python_version=3.13",
        ],
        ["env", "JAX_PLATFORMS=cpu", python, "-m", "jaxcore"],
        [
            "env",
            "JAX_PLATFORMS=cpu",
            python,
            "-m",
            "pytest",
            "-n",
            "auto",
            "-m",
            "not multiaccelerator",
            str(scratch.tests),
        ],
        [
            "env",
            "JAX_PLATFORMS=cpu",
            python,
            "-m",
            "pytest",
            "-p",
            "no:xdist",
            "-m",
            "multiaccelerator",
            str(scratch.tests),
        ],
    ]


def test_job_sets_itself_up_unless_told_not_to(scratch):
    scratch.pyenv_python("3.13")
    commands = scratch.commands(JAXCORE_SKIP_SETUP="0")
    assert commands[0] == ["python3", "build/build.py", "setup", "--backend=cpu"]


def test_falls_back_to_python_3_12_and_passes_over_a_shim_of_another_version(scratch):
    scratch.pyenv_python("3.12")
    # `python3.13` on PATH that runs another Python (a pyenv shim with 3.11 selected).
    _fake(scratch.bin / "python3.13", "shim", "3.11")
    commands = scratch.commands(JAXCORE_NEWEST_VENV=str(scratch.venv))
    assert commands[0][-1] == "--python_version=3.12"
    assert commands[0][1] == f"JAXCORE_VENV={scratch.venv}"


def test_python_on_path_wins_when_it_runs_its_version(scratch):
    _fake(scratch.bin / "python3.13", "path313", "3.13")
    result = scratch.run(JAXCORE_DRY_RUN="1")
    assert result.returncode == 0, result.stderr
    assert f"newest end: Python 3.13 ({scratch.bin / 'python3.13'})" in result.stderr


def test_without_a_newer_python_the_job_says_skipped_and_runs_nothing(scratch):
    result = scratch.run()
    assert result.returncode == 0, result.stderr
    assert (
        "SKIPPED: no Python for the newest JAX (looked for python3.13, python3.12" in result.stderr
    )
    assert "the newest end of the JAX range was NOT tested" in result.stderr
    assert "job passed" not in result.stderr
    assert scratch.calls() == []


def test_without_a_newer_python_the_job_fails_when_required(scratch):
    result = scratch.run(JAXCORE_NEWEST_REQUIRED="1")
    assert result.returncode == 1
    assert "error: no Python for the newest JAX" in result.stderr
    assert scratch.calls() == []


def _ready(scratch):
    scratch.pyenv_python("3.13")
    _fake(scratch.venv / "bin" / "python", "venvpython", "3.13")
    return dict(JAXCORE_NEWEST_VENV=str(scratch.venv))


def test_real_run_uses_the_venv_python_for_every_phase(scratch):
    env = _ready(scratch)
    result = scratch.run(**env)
    assert result.returncode == 0, result.stderr
    calls = scratch.calls()
    assert calls[0] == "python3 build/build.py venv --python_version=3.13"
    assert calls[1] == "venvpython -m jaxcore"
    assert [c.split()[:3] for c in calls[2:]] == [["venvpython", "-m", "pytest"]] * 2
    assert "job passed" in result.stderr


@pytest.mark.parametrize("failing", ["python3", "venvpython"])
def test_a_failed_venv_or_import_fails_the_job_before_any_test(scratch, failing):
    env = _ready(scratch)
    result = scratch.run(**env, **{f"FAKE_RC_{failing}": "1"})
    assert result.returncode == 1
    assert "error:" in result.stderr
    assert not [c for c in scratch.calls() if " -m pytest " in c]


def test_a_failing_test_phase_fails_the_job(scratch):
    env = _ready(scratch)
    # The venv interpreter fails every call after the import check: both pytest phases.
    script = scratch.venv / "bin" / "python"
    script.write_text(
        script.read_text().replace('eval "rc=', 'case "$*" in *pytest*) exit 3;; esac\neval "rc=')
    )
    result = scratch.run(**env)
    assert result.returncode == 3, result.stderr
    assert "phase 1 (pytest, cpu): FAILED (exit code 3)" in result.stderr
    assert "job failed" in result.stderr

"""build/build.py checks every option before it installs or writes anything.

A bad option is one line on stderr, `build.py: error: ...`, naming the flag, and exit status
2; nothing is written (an existing generated bazelrc keeps its bytes, no temporary file, no
venv, no wheel) and Bazel never runs. Also: a hanging --python_bin_path times out with a clear
message, a failed copy into --output_path leaves it as it was, and the `lint` runner.

Each test runs a scratch copy of build/ (build.py and its private modules) with a fake
`bazel` that logs its arguments, so none touches the real .jaxcore_configure.bazelrc.
"""

import importlib.util
import os
import shutil
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SENTINEL = "# an earlier, working configuration\n"
FAKE_BAZEL = """\
#!/bin/sh
echo "$*" >> "$FAKE_BAZEL_LOG"
case " $* " in *" --version "*) echo "bazel 4.2.3" ;; esac
"""


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


class Scratch:
    """A scratch repository: build/, the lock files and .bzl files build.py reads."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.root = tmp_path / "repo"
        (self.root / "build").mkdir(parents=True)
        (self.root / "jaxcore" / "tools").mkdir(parents=True)
        for source in (REPO / "build").glob("*.py"):
            shutil.copy(source, self.root / "build" / source.name)
        for lock in ("requirements_lock.txt", "requirements_lock_3_13.txt"):
            shutil.copy(REPO / "build" / lock, self.root / "build" / lock)
        for bzl in ("version.bzl", "tools/platform_tags.bzl"):
            shutil.copy(REPO / "jaxcore" / bzl, self.root / "jaxcore" / bzl)
        self.bazelrc = self.root / ".jaxcore_configure.bazelrc"
        self.bazelrc.write_text(SENTINEL)
        self.bazel = _executable(tmp_path / "fake_bazel", FAKE_BAZEL)
        self.log = tmp_path / "bazel.log"
        self.venv = tmp_path / "venv"
        self.env = dict(os.environ, JAXCORE_VENV=str(self.venv), FAKE_BAZEL_LOG=str(self.log))
        self.env.pop("PYTHONPATH", None)

    def run(self, *args, timeout=120):
        return subprocess.run(
            [sys.executable, str(self.root / "build" / "build.py"), *args],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.tmp,
            timeout=timeout,
        )

    def load(self):
        """Imports the scratch build.py in this process (its modules, not the checkout's)."""
        path = self.root / "build" / "build.py"
        spec = importlib.util.spec_from_file_location(f"scratch_build_{id(self)}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    def assert_nothing_written(self):
        assert self.bazelrc.read_text() == SENTINEL
        assert sorted(p.name for p in self.root.iterdir()) == [
            ".jaxcore_configure.bazelrc",
            "build",
            "jaxcore",
        ]
        assert not self.venv.exists()
        assert not self.log.exists(), "Bazel ran"


@pytest.fixture
def scratch(tmp_path):
    return Scratch(tmp_path)


def _assert_one_line_error(result, flag):
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("build.py: error: "), lines
    assert flag in lines[0], lines
    assert "Traceback" not in result.stderr


# Each: the arguments ({tmp}: the test's scratch directory), the flag the error must name.
BAD_OPTIONS = [
    (["build", "--wheels=jaxcore,nope"], "--wheels"),
    (["build", "--wheels=,"], "--wheels"),
    (["build", "--cuda_major_version=abc"], "--cuda_major_version"),
    (["build", "--cuda_major_version=11"], "--cuda_major_version=11"),
    (["build", "--rocm_version=5.7.1"], "--rocm_version"),
    (["build", "--bazel_options=jobs=2"], "--bazel_options"),
    (["build", "--bazel_options="], "--bazel_options"),
    (["build", "--bazel_startup_options=--batch --foo"], "--bazel_startup_options"),
    (["build", "--bazel_path={tmp}/no_bazel"], "--bazel_path"),
    (["build", "--bazel_path={tmp}"], "--bazel_path"),
    (["build", "--output_path="], "--output_path"),
    (["build", "--output_path={tmp}/file"], "--output_path"),
    (["build", "--output_path={tmp}/file/dist"], "--output_path"),
    (["build", "--output_path={tmp}/dangling"], "--output_path"),
    (["build", "--python_bin_path={tmp}/no_python"], "--python_bin_path"),
    (["build", "--python_bin_path=no-such-python-on-path"], "--python_bin_path"),
    (["build", "--python_bin_path={tmp}/file"], "--python_bin_path"),
    (["build", "--python_bin_path={tmp}/python3.9"], "--python_bin_path"),
    (["build", "--python_bin_path={tmp}/not_python"], "--python_bin_path"),
    (["setup", "--python_version=3"], "--python_version"),
    (["setup", "--python_version=3.13", "--python_bin_path={tmp}/python3.9"], "--python_version"),
    (["test", "--backend=gpu"], "--backend"),
    (["test", "--runners=foo"], "--runners"),
    (["test", "--runners=foo", "--configure_only"], "--runners"),
    (["test", "--runners=pytest,,nose"], "--runners"),
    (["test", "--backend=tpu", "--runners=newest"], "--backend=tpu"),
    (["test", "--unknown_flag"], "--unknown_flag"),
    (["venv", "--cuda_major_version=14"], "--cuda_major_version"),
    (["nocommand"], "nocommand"),
]


@pytest.mark.parametrize("args, flag", BAD_OPTIONS, ids=[" ".join(a) for a, _ in BAD_OPTIONS])
def test_bad_option_is_one_line_exit_2_and_writes_nothing(scratch, args, flag):
    tmp = scratch.tmp
    (tmp / "file").write_text("a file, not a directory")
    (tmp / "dangling").symlink_to(tmp / "nowhere")
    _executable(tmp / "python3.9", "#!/bin/sh\necho 3.9\n")
    _executable(tmp / "not_python", "#!/bin/sh\necho hello\n")
    args = [a.format(tmp=tmp) for a in args]
    if args[0] != "nocommand" and not any(a.startswith("--bazel_path") for a in args):
        args.append(f"--bazel_path={scratch.bazel}")
    result = scratch.run(*args)
    _assert_one_line_error(result, flag)
    scratch.assert_nothing_written()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any directory")
def test_read_only_output_path_is_refused_before_bazel_runs(scratch):
    out = scratch.tmp / "readonly"
    out.mkdir()
    out.chmod(0o555)
    try:
        result = scratch.run("build", f"--bazel_path={scratch.bazel}", f"--output_path={out}/dist")
    finally:
        out.chmod(0o755)
    _assert_one_line_error(result, "--output_path")
    assert "is not writable" in result.stderr
    scratch.assert_nothing_written()


def _hanging_python(tmp: Path) -> tuple[Path, Path]:
    """An interpreter wrapper whose child hangs, holding the output pipe; and its pid file."""
    pid_file = tmp / "hang.pid"
    python = _executable(
        tmp / "hanging_python", f"#!/bin/sh\nsleep 300 &\necho $! > {pid_file}\nwait\n"
    )
    return python, pid_file


def _gone(pid: int) -> bool:
    """Whether process `pid` has exited (a zombie waiting for its reaper counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_hanging_python_bin_path_times_out_with_a_clear_message(scratch, monkeypatch, capsys):
    python, pid_file = _hanging_python(scratch.tmp)
    build_py = scratch.load()
    monkeypatch.setattr(sys.modules["_common"], "PROBE_TIMEOUT_S", 2)
    monkeypatch.setenv("JAXCORE_VENV", str(scratch.venv))
    monkeypatch.setenv("FAKE_BAZEL_LOG", str(scratch.log))
    start = time.monotonic()
    code = build_py.main(["build", f"--bazel_path={scratch.bazel}", f"--python_bin_path={python}"])
    elapsed = time.monotonic() - start
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.splitlines() == [
        f"build.py: error: {python} did not answer within 2 s when asked for its Python "
        "version; it hangs (--python_bin_path)"
    ]
    assert elapsed < 30, "the probe waited for the hung child's pipe"
    # The whole session was killed: no hung process is left behind.
    deadline = time.monotonic() + 10
    while not _gone(int(pid_file.read_text())) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(int(pid_file.read_text()))
    scratch.assert_nothing_written()


def _wheels(directory: Path, names, content: str) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in names:
        with zipfile.ZipFile(directory / name, "w") as zf:
            zf.writestr("marker.txt", content)
        paths.append(directory / name)
    return paths


def test_failed_copy_into_output_path_leaves_it_as_it_was(scratch, monkeypatch):
    build_py = scratch.load()
    wheels = _wheels(
        scratch.tmp / "bazel-bin", ["a-1-py3-none-any.whl", "b-1-py3-none-any.whl"], "new"
    )
    out = scratch.tmp / "dist"
    old = _wheels(out, ["a-1-py3-none-any.whl"], "old")[0].read_bytes()
    (out / "keep.txt").write_text("user file")
    real_replace = os.replace

    def replace(src, dst):
        # The second wheel cannot be put in place (a full disk, a vanished directory).
        if Path(dst).name == "b-1-py3-none-any.whl":
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(build_py.BuildError, match=f"cannot write the wheels into {out}: No space"):
        sys.modules["_wheels"].install_outputs(wheels, out)
    # The first wheel's older file is back, byte for byte; nothing new and no staging is left.
    assert sorted(p.name for p in out.iterdir()) == ["a-1-py3-none-any.whl", "keep.txt"]
    assert (out / "a-1-py3-none-any.whl").read_bytes() == old


def test_all_wheels_copied_replace_older_ones(scratch):
    build_py = scratch.load()
    names = ["a-1-py3-none-any.whl", "b-1-py3-none-any.whl"]
    wheels = _wheels(scratch.tmp / "bazel-bin", names, "new")
    out = scratch.tmp / "dist"
    _wheels(out, names[:1], "old")
    sys.modules["_wheels"].install_outputs(wheels, out)
    assert sorted(p.name for p in out.iterdir()) == names
    assert all(
        (out / n).read_bytes() == (scratch.tmp / "bazel-bin" / n).read_bytes() for n in names
    )
    assert build_py.BuildError is sys.modules["_common"].BuildError


def test_lint_runs_after_docs_by_default_on_every_backend(scratch):
    scratch.load()
    runners = sys.modules["_runners"]
    assert runners.RUNNER_SCRIPTS["lint"] == "run_lint.sh"
    assert runners.default_runners("cpu") == [
        "bazel",
        "asan",
        "aarch64",
        "pytest",
        "newest",
        "docs",
        "lint",
    ]
    assert runners.default_runners("tpu") == ["bazel", "asan", "pytest", "docs", "lint"]
    # The README's test command (which `.ci/run` runs) takes the default runners.
    assert "python3 build/build.py test\n" in (REPO / "README.md").read_text()
    assert "ci/run_lint.sh" in scratch.run("test", "--help").stdout


def test_missing_runner_script_fails_before_any_runner_starts(scratch):
    ci = scratch.root / "ci"
    ci.mkdir()
    marker = scratch.tmp / "docs_ran"
    _executable(ci / "run_docs.sh", f"#!/bin/sh\ntouch {marker}\n")
    result = scratch.run(
        "test",
        "--runners=docs,lint",
        f"--bazel_path={scratch.bazel}",
        f"--python_bin_path={sys.executable}",
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        "build.py: error: ci/run_lint.sh missing; no runner was started"
    ]
    assert not marker.exists()


def test_lint_runner_runs_ci_run_lint_sh_with_the_setup_environment(scratch):
    ci = scratch.root / "ci"
    ci.mkdir()
    seen = scratch.tmp / "lint_env"
    _executable(
        ci / "run_lint.sh",
        f'#!/bin/sh\necho "$JAXCORE_SKIP_SETUP $JAXCORE_PYTHON" > {seen}\nexit 3\n',
    )
    result = scratch.run(
        "test",
        "--runners=lint",
        f"--bazel_path={scratch.bazel}",
        f"--python_bin_path={sys.executable}",
    )
    # A failing lint fails the command (exit 1, not a usage error), naming the job.
    assert result.returncode == 1, result.stderr
    assert "build.py: error: test run failed: run_lint.sh" in result.stderr
    assert seen.read_text().split() == ["1", sys.executable]

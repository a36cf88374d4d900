"""build/build.py: dry runs, the generated bazelrc, wheel copying and every bad input.

Each test runs build.py from a scratch copy of the repository's build files, with a fake
`bazel` that logs its arguments, so no test touches the real .jaxcore_configure.bazelrc or
needs a Bazel server.
"""

import os
import shutil
import stat
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VERSION = "0.1.0"

FAKE_BAZEL = """\
#!/usr/bin/env bash
echo "$*" >> "$FAKE_BAZEL_LOG"
case " $* " in
  *" --version "*) echo "bazel ${FAKE_BAZEL_VERSION:-4.2.3}" ;;
  *" info bazel-bin "*) echo "$FAKE_BAZEL_BIN" ;;
  *" build "*) exit "${FAKE_BAZEL_BUILD_RC:-0}" ;;
esac
"""

ALL_WHEELS = [
    "jaxcore-0.1.0-py3-none-any.whl",
    "jaxcore_cuda12-0.1.0-py3-none-any.whl",
    "jaxcore_rocm6-0.1.0-py3-none-any.whl",
    "jaxcore_tpu-0.1.0-py3-none-any.whl",
]


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@pytest.fixture
def repo(tmp_path):
    """A scratch repository with build.py, a fake Bazel and a fake bazel-bin."""
    root = tmp_path / "repo"
    (root / "build").mkdir(parents=True)
    (root / "jaxcore").mkdir()
    shutil.copy(REPO / "build" / "build.py", root / "build" / "build.py")
    shutil.copy(REPO / "build" / "requirements_lock.txt", root / "build" / "requirements_lock.txt")
    shutil.copy(REPO / "jaxcore" / "version.bzl", root / "jaxcore" / "version.bzl")
    bazel = _executable(tmp_path / "fake_bazel", FAKE_BAZEL)
    bazel_bin = tmp_path / "bazel-bin"
    (bazel_bin / "jaxcore" / "tools").mkdir(parents=True)
    for name in ALL_WHEELS:
        with zipfile.ZipFile(bazel_bin / "jaxcore" / "tools" / name, "w") as zf:
            zf.writestr("marker.txt", name)
    env = dict(os.environ)
    env.pop("JAXCORE_VENV", None)
    env.update(
        FAKE_BAZEL_LOG=str(tmp_path / "bazel.log"),
        FAKE_BAZEL_BIN=str(bazel_bin),
    )

    class Repo:
        path = root
        log = tmp_path / "bazel.log"
        bin = bazel_bin

        def run(self, *args, extra_env=None):
            run_env = dict(env, **(extra_env or {}))
            return subprocess.run(
                [sys.executable, str(root / "build" / "build.py"), *args],
                capture_output=True, text=True, env=run_env, cwd=tmp_path,
            )

        def bazel_calls(self):
            return self.log.read_text().splitlines() if self.log.exists() else []

    Repo.bazel = str(bazel)
    return Repo()


def test_dry_run_prints_exact_bazel_command_and_writes_nothing(repo):
    result = repo.run(
        "build", "--wheels=all", f"--bazel_path={repo.bazel}", "--dry_run",
        "--bazel_options=--jobs=2", "--bazel_options=--keep_going",
        "--bazel_startup_options=--batch",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    expected = (
        f"{repo.bazel} --batch build --jobs=2 --keep_going "
        "//jaxcore/tools:jaxcore_wheel //jaxcore/tools:jaxcore_cuda12_wheel "
        "//jaxcore/tools:jaxcore_rocm6_wheel //jaxcore/tools:jaxcore_tpu_wheel"
    )
    assert expected in lines
    assert "# would write .jaxcore_configure.bazelrc:" in lines
    assert not (repo.path / ".jaxcore_configure.bazelrc").exists()
    # Only the version probe ran; nothing was built.
    assert repo.bazel_calls() == ["--version"]


def test_configure_only_writes_one_line_per_setting(repo):
    result = repo.run("build", f"--bazel_path={repo.bazel}", "--configure_only",
                      f"--python_bin_path={sys.executable}", "--cuda_major_version=13",
                      "--rocm_version=6.3.0")
    assert result.returncode == 0, result.stderr
    rc = (repo.path / ".jaxcore_configure.bazelrc").read_text().splitlines()
    python = Path(sys.executable)
    assert f"build --repo_env=PYTHON_BIN_PATH={python}" in rc
    assert f"build --action_env=PYTHON_BIN_PATH={python}" in rc
    assert "build --define=jaxcore_cuda_major=13" in rc
    assert "build:cuda --action_env=JAXCORE_CUDA_VERSION=13.0.0" in rc
    assert "build:rocm --action_env=JAXCORE_ROCM_VERSION=6.3.0" in rc
    assert "build --action_env=SOURCE_DATE_EPOCH" in rc
    settings = [line for line in rc if not line.startswith("#")]
    assert all(line.split()[0] in ("build", "test") or ":" in line.split()[0] for line in settings)
    assert all(len(line.split()) == 2 for line in settings), "one option per line"
    assert repo.bazel_calls() == ["--version"]
    assert not [p for p in repo.path.iterdir() if p.name.endswith(".tmp")]


def test_build_copies_every_wheel_and_never_repeats_bazelrc_flags(repo):
    out = repo.path / "dist"
    result = repo.run("build", "--wheels=all", f"--bazel_path={repo.bazel}")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == ALL_WHEELS
    build_call = [c for c in repo.bazel_calls() if " build " in f" {c} "][0]
    assert "PYTHON_BIN_PATH" not in build_call and "--define" not in build_call
    assert "sha256=" in result.stdout


def test_cuda13_selects_the_cuda13_wheel_name(repo):
    (repo.bin / "jaxcore" / "tools" / "jaxcore_cuda13-0.1.0-py3-none-any.whl").write_bytes(
        (repo.bin / "jaxcore" / "tools" / ALL_WHEELS[1]).read_bytes())
    result = repo.run("build", "--wheels=jaxcore-cuda13", "--cuda_major_version=13",
                      f"--bazel_path={repo.bazel}", "--output_path=out13")
    assert result.returncode == 0, result.stderr
    assert [p.name for p in (repo.path / "out13").iterdir()] == ["jaxcore_cuda13-0.1.0-py3-none-any.whl"]


def test_failed_bazel_build_leaves_no_wheel(repo):
    out = repo.path / "dist"
    out.mkdir()
    (out / "keep.txt").write_text("user file")
    result = repo.run("build", "--wheels=all", f"--bazel_path={repo.bazel}",
                      extra_env={"FAKE_BAZEL_BUILD_RC": "1"})
    assert result.returncode == 1
    assert "command failed with exit code 1" in result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]


def test_missing_bazel_output_is_all_or_nothing(repo):
    (repo.bin / "jaxcore" / "tools" / ALL_WHEELS[3]).unlink()
    result = repo.run("build", "--wheels=all", f"--bazel_path={repo.bazel}")
    assert result.returncode == 1
    assert "jaxcore_tpu-0.1.0-py3-none-any.whl is missing" in result.stderr
    assert not (repo.path / "dist").exists() or not list((repo.path / "dist").iterdir())


@pytest.mark.parametrize(
    "args, message",
    [
        (["--wheels=jaxcore,jaxcore-cuda11"], "unknown wheel 'jaxcore-cuda11' in --wheels"),
        (["--wheels="], "--wheels is empty"),
        (["--python_bin_path=/nonexistent/python3"], "/nonexistent/python3 does not exist"),
        (["--python_bin_path={plain_file}"], "is not executable"),
        (["--python_bin_path={shell_script}"], "does not run as a Python interpreter"),
        (["--cuda_major_version=11"], "--cuda_major_version=11 is not supported"),
        (["--rocm_version=5.7.1"], "--rocm_version='5.7.1' is not supported"),
        (["--bazel_path=/nonexistent/bazel"], "--bazel_path=/nonexistent/bazel is not an executable file"),
    ],
)
def test_bad_input_is_one_clear_error_and_writes_nothing(repo, tmp_path, args, message):
    plain_file = tmp_path / "plain"
    plain_file.write_text("not a program")
    plain_file.chmod(0o644)
    shell_script = _executable(tmp_path / "script", "#!/bin/sh\necho hello\n")
    args = [a.format(plain_file=plain_file, shell_script=shell_script) for a in args]
    if not any(a.startswith("--bazel_path") for a in args):
        args = [*args, f"--bazel_path={repo.bazel}"]
    result = repo.run("build", *args)
    assert result.returncode == 1, result.stdout
    assert message in result.stderr
    assert result.stderr.count("error:") == 1
    assert not (repo.path / ".jaxcore_configure.bazelrc").exists()
    assert not (repo.path / "dist").exists()


def test_too_old_bazel_is_refused(repo):
    result = repo.run("build", f"--bazel_path={repo.bazel}", extra_env={"FAKE_BAZEL_VERSION": "3.7.2"})
    assert result.returncode == 1
    assert "Bazel 3.7.2" in result.stderr and "too old" in result.stderr
    assert not (repo.path / ".jaxcore_configure.bazelrc").exists()


def test_debian_no_version_bazel_reads_the_package_version(repo, tmp_path):
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    _executable(bin_dir / "dpkg-query", "#!/bin/sh\nprintf '4.2.3+ds-9'\n")
    env = {"FAKE_BAZEL_VERSION": "no_version", "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    # "bazel no_version" has no digits, so the fake prints exactly what Debian's build does.
    result = repo.run("build", f"--bazel_path={repo.bazel}", "--configure_only", extra_env=env)
    assert result.returncode == 0, result.stderr


def test_interpreter_without_test_requirements_is_refused(repo, tmp_path):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    result = repo.run("setup", f"--bazel_path={repo.bazel}", f"--python_bin_path={bare / 'bin' / 'python'}")
    assert result.returncode == 1
    assert "lacks the test requirements" in result.stderr
    assert "jax==0.10.2" in result.stderr and "pytest" in result.stderr
    assert not (repo.path / ".jaxcore_configure.bazelrc").exists()


def test_missing_bazel_offers_the_debian_install_in_a_dry_run(repo, tmp_path):
    bin_dir = tmp_path / "nobazel"
    bin_dir.mkdir()
    for tool in ("bash", "sh", "env", "dpkg-query"):
        found = shutil.which(tool)
        if found:
            os.symlink(found, bin_dir / tool)
    result = repo.run("build", "--dry_run", extra_env={"PATH": str(bin_dir)})
    assert "apt-get install -y bazel-bootstrap bazel-rules-java bazel-platforms" in result.stdout


def test_test_command_dry_run_lists_the_ci_scripts(repo):
    result = repo.run("test", "--dry_run", f"--bazel_path={repo.bazel}",
                      f"--python_bin_path={sys.executable}")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert f"bash {repo.path / 'ci' / 'run_bazel_test_cpu.sh'}" in lines
    assert f"bash {repo.path / 'ci' / 'run_pytest_cpu.sh'}" in lines
    assert lines.index(f"bash {repo.path / 'ci' / 'run_bazel_test_cpu.sh'}") < lines.index(
        f"bash {repo.path / 'ci' / 'run_pytest_cpu.sh'}")


def test_unknown_runner_is_refused(repo):
    result = repo.run("test", "--runners=nose", f"--bazel_path={repo.bazel}",
                      f"--python_bin_path={sys.executable}", "--dry_run")
    assert result.returncode == 1
    assert "--runners must list bazel and/or pytest" in result.stderr


def test_bazelrc_imports_generated_settings_last():
    lines = [l.strip() for l in (REPO / ".bazelrc").read_text().splitlines() if l.strip()]
    assert lines[-2:] == [
        "try-import %workspace%/.jaxcore_configure.bazelrc",
        "try-import %workspace%/.bazelrc.user",
    ]
    text = "\n".join(lines)
    for config in ("cpu", "cuda", "rocm", "tpu", "ci"):
        assert f"build:{config} " in text or f"test:{config} " in text, config
    assert "test --test_output=errors" in text

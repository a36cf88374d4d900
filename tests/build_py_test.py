"""build/build.py: dry runs, the generated bazelrc, wheel copying and every bad input.

Each test runs build.py from a scratch copy of the repository's build files, with a fake
`bazel` that logs its arguments and a ready-made managed venv (a stamp over this test's own
interpreter, which has jax and jaxlib), so no test touches the real .jaxcore_configure.bazelrc,
installs anything or needs a Bazel server.
"""

import functools
import hashlib
import importlib.util
import os
import platform
import re
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
# The hash-locked requirements, one per end of the tested JAX range, by Python version.
LOCKS = {(3, 11): "requirements_lock.txt", (3, 13): "requirements_lock_3_13.txt"}


def _load_build_py(path: Path):
    spec = importlib.util.spec_from_file_location(f"build_py_{path.parent.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# build.py's lock for the interpreter running these tests (3.11: the oldest end, 3.12+: the
# newest), and the jax/jaxlib it pins.
BUILD_PY = _load_build_py(REPO / "build" / "build.py")
THIS_LOCK = BUILD_PY.lock_file(sys.version_info[:2])
THIS_PINS = BUILD_PY.locked_versions(THIS_LOCK)

FAKE_BAZEL = """\
#!/usr/bin/env bash
echo "$*" >> "$FAKE_BAZEL_LOG"
case " $* " in
  *" --version "*) echo "bazel ${FAKE_BAZEL_VERSION:-4.2.3}" ;;
  *" info bazel-bin "*) echo "$FAKE_BAZEL_BIN" ;;
  *" build "*) exit "${FAKE_BAZEL_BUILD_RC:-0}" ;;
esac
"""


def _native_tag():
    text = (REPO / "jaxcore" / "tools" / "platform_tags.bzl").read_text()
    return dict(re.findall(r'"(\w+)": "(\w+)"', text)).get(platform.machine(), "unknown")


NATIVE_TAG = _native_tag()
CPU_WHEEL = f"jaxcore_cpu-0.1.0-py3-none-{NATIVE_TAG}.whl"
NATIVE_LIB = "jaxcore_cpu/libjaxcore_cpu_kernels.so"
ALL_WHEELS = [
    "jaxcore-0.1.0-py3-none-any.whl",
    CPU_WHEEL,
    "jaxcore_cuda12-0.1.0-py3-none-any.whl",
    "jaxcore_rocm6-0.1.0-py3-none-any.whl",
    "jaxcore_tpu-0.1.0-py3-none-any.whl",
]


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _ready_venv(venv: Path, lock: Path) -> Path:
    """A managed venv build.py takes as installed: its python runs this interpreter."""
    python = venv / "bin" / "python"
    python.parent.mkdir(parents=True)
    _executable(python, f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()
    (venv / ".jaxcore_requirements_stamp").write_text(f"{digest} {python}")
    return python


@pytest.fixture
def repo(tmp_path):
    """A scratch repository with build.py, a fake Bazel, a fake bazel-bin and a ready venv."""
    root = tmp_path / "repo"
    (root / "build").mkdir(parents=True)
    (root / "jaxcore" / "tools").mkdir(parents=True)
    for source in (REPO / "build").glob("*.py"):  # build.py and its private modules
        shutil.copy(source, root / "build" / source.name)
    for lock in LOCKS.values():
        shutil.copy(REPO / "build" / lock, root / "build" / lock)
    shutil.copy(REPO / "jaxcore" / "version.bzl", root / "jaxcore" / "version.bzl")
    shutil.copy(
        REPO / "jaxcore" / "tools" / "platform_tags.bzl",
        root / "jaxcore" / "tools" / "platform_tags.bzl",
    )
    bazel = _executable(tmp_path / "fake_bazel", FAKE_BAZEL)
    bazel_bin = tmp_path / "bazel-bin"
    (bazel_bin / "jaxcore" / "tools").mkdir(parents=True)
    for name in ALL_WHEELS:
        with zipfile.ZipFile(bazel_bin / "jaxcore" / "tools" / name, "w") as zf:
            zf.writestr("marker.txt", name)
    (bazel_bin / "jaxcore_cpu").mkdir()
    (bazel_bin / NATIVE_LIB).write_bytes(b"\x7fELF fake")
    venv_python = _ready_venv(tmp_path / "venv", root / "build" / THIS_LOCK.name)
    env = dict(os.environ)
    env.pop("JAXCORE_CPU_KERNELS_LIB", None)
    env.update(
        JAXCORE_VENV=str(tmp_path / "venv"),
        FAKE_BAZEL_LOG=str(tmp_path / "bazel.log"),
        FAKE_BAZEL_BIN=str(bazel_bin),
    )

    class Repo:
        path = root
        log = tmp_path / "bazel.log"
        bin = bazel_bin
        python = venv_python

        def run(self, *args, extra_env=None):
            run_env = dict(env, **(extra_env or {}))
            return subprocess.run(
                [sys.executable, str(root / "build" / "build.py"), *args],
                capture_output=True,
                text=True,
                env=run_env,
                cwd=tmp_path,
            )

        def bazel_calls(self):
            return self.log.read_text().splitlines() if self.log.exists() else []

    Repo.bazel = str(bazel)
    return Repo()


def test_dry_run_prints_exact_bazel_command_and_writes_nothing(repo):
    result = repo.run(
        "build",
        "--wheels=all",
        f"--bazel_path={repo.bazel}",
        "--dry_run",
        "--bazel_options=--jobs=2",
        "--bazel_options=--keep_going",
        "--bazel_startup_options=--batch",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    expected = (
        f"{repo.bazel} --batch build --jobs=2 --keep_going "
        "//jaxcore/tools:jaxcore_wheel //jaxcore/tools:jaxcore_cpu_wheel "
        "//jaxcore/tools:jaxcore_cuda12_wheel "
        "//jaxcore/tools:jaxcore_rocm6_wheel //jaxcore/tools:jaxcore_tpu_wheel"
    )
    assert expected in lines
    assert "# would write .jaxcore_configure.bazelrc:" in lines
    assert not (repo.path / ".jaxcore_configure.bazelrc").exists()
    # Only the version probe ran; nothing was built.
    assert repo.bazel_calls() == ["--version"]


def test_configure_only_writes_one_line_per_setting(repo):
    result = repo.run(
        "build",
        f"--bazel_path={repo.bazel}",
        "--configure_only",
        f"--python_bin_path={sys.executable}",
        "--cuda_major_version=13",
        "--rocm_version=6.3.0",
    )
    assert result.returncode == 0, result.stderr
    rc = (repo.path / ".jaxcore_configure.bazelrc").read_text().splitlines()
    python = Path(sys.executable)
    assert f"build --repo_env=PYTHON_BIN_PATH={python}" in rc
    assert f"build --action_env=PYTHON_BIN_PATH={python}" in rc
    assert "build --define=jaxcore_cuda_major=13" in rc
    assert "build:cuda --action_env=JAXCORE_CUDA_VERSION=13.0.0" in rc
    assert "build:rocm --action_env=JAXCORE_ROCM_VERSION=6.3.0" in rc
    assert "build --action_env=SOURCE_DATE_EPOCH" in rc
    ffi = [line for line in rc if "JAXCORE_XLA_FFI_INCLUDE" in line]
    assert len(ffi) == 1 and ffi[0].startswith("build --repo_env=JAXCORE_XLA_FFI_INCLUDE=/")
    assert (Path(ffi[0].split("=", 2)[2]) / "xla" / "ffi" / "api" / "ffi.h").is_file()
    compiler = [line for line in rc if line.startswith("# C++ compiler")]
    assert len(compiler) == 1 and re.search(r"\d+\.\d+", compiler[0]), compiler
    settings = [line for line in rc if not line.startswith("#")]
    assert all(line.split()[0] in ("build", "test") or ":" in line.split()[0] for line in settings)
    assert all(len(line.split()) == 2 for line in settings), "one option per line"
    assert repo.bazel_calls() == ["--version"]
    assert not [p for p in repo.path.iterdir() if p.name.endswith(".tmp")]


def test_build_copies_every_wheel_and_never_repeats_bazelrc_flags(repo):
    out = repo.path / "dist"
    result = repo.run("build", "--wheels=all", f"--bazel_path={repo.bazel}")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(ALL_WHEELS)
    build_call = [c for c in repo.bazel_calls() if " build " in f" {c} "][0]
    assert "PYTHON_BIN_PATH" not in build_call and "--define" not in build_call
    assert "JAXCORE_XLA_FFI_INCLUDE" not in build_call
    assert "sha256=" in result.stdout
    # Without --python_bin_path the build uses the managed venv, whose jaxlib gives the headers.
    rc = (repo.path / ".jaxcore_configure.bazelrc").read_text()
    assert f"build --repo_env=PYTHON_BIN_PATH={repo.python}" in rc.splitlines()


def test_native_wheel_carries_the_platform_tag(repo):
    assert NATIVE_TAG.startswith("manylinux_")
    result = repo.run("build", "--wheels=jaxcore-cpu", f"--bazel_path={repo.bazel}")
    assert result.returncode == 0, result.stderr
    assert [p.name for p in (repo.path / "dist").iterdir()] == [CPU_WHEEL]


def test_unknown_cpu_has_no_native_wheel(repo):
    spec = importlib.util.spec_from_file_location("scratch_build", repo.path / "build" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.native_platform_tag("x86_64") == "manylinux_2_35_x86_64"
    assert module.native_platform_tag("AMD64") == "manylinux_2_35_x86_64"
    with pytest.raises(module.BuildError, match="not built for the riscv64 CPU.*aarch64, x86_64"):
        module.native_platform_tag("riscv64")


def _bare_python(tmp_path):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    return bare / "bin" / "python"


def test_missing_jaxlib_is_a_clear_error_and_keeps_the_old_bazelrc(repo, tmp_path):
    bare = _bare_python(tmp_path)
    result = repo.run(
        "build", "--configure_only", f"--bazel_path={repo.bazel}", f"--python_bin_path={bare}"
    )
    assert result.returncode == 1
    assert result.stderr.count("error:") == 1
    assert f"{bare} cannot import jax and jaxlib" in result.stderr
    assert "jax.ffi.include_dir()" in result.stderr
    assert f"jaxlib=={THIS_PINS['jaxlib']}" in result.stderr and THIS_LOCK.name in result.stderr
    assert not (repo.path / ".jaxcore_configure.bazelrc").exists()
    # A working configuration stays exactly as it was; nothing half-written is left.
    assert repo.run("build", "--configure_only", f"--bazel_path={repo.bazel}").returncode == 0
    before = (repo.path / ".jaxcore_configure.bazelrc").read_bytes()
    result = repo.run(
        "build", "--wheels=all", f"--bazel_path={repo.bazel}", f"--python_bin_path={bare}"
    )
    assert result.returncode == 1 and "cannot import jax and jaxlib" in result.stderr
    assert (repo.path / ".jaxcore_configure.bazelrc").read_bytes() == before
    assert not [p for p in repo.path.iterdir() if p.name.endswith(".tmp")]
    assert not (repo.path / "dist").exists()
    assert not [c for c in repo.bazel_calls() if " build " in f" {c} "]


def test_jaxlib_without_ffi_headers_is_refused(repo, tmp_path):
    fake_jax = tmp_path / "fakejax"
    (fake_jax / "jax").mkdir(parents=True)
    (fake_jax / "jax" / "__init__.py").write_text("")
    (fake_jax / "jax" / "ffi.py").write_text(f"def include_dir():\n    return {str(tmp_path)!r}\n")
    result = repo.run(
        "build",
        "--configure_only",
        f"--bazel_path={repo.bazel}",
        extra_env={"PYTHONPATH": str(fake_jax)},
    )
    assert result.returncode == 1
    assert "has no xla/ffi/api/ffi.h" in result.stderr and "reinstall jaxlib" in result.stderr
    assert not (repo.path / ".jaxcore_configure.bazelrc").exists()


def test_cuda13_selects_the_cuda13_wheel_name(repo):
    (repo.bin / "jaxcore" / "tools" / "jaxcore_cuda13-0.1.0-py3-none-any.whl").write_bytes(
        (repo.bin / "jaxcore" / "tools" / ALL_WHEELS[1]).read_bytes()
    )
    result = repo.run(
        "build",
        "--wheels=jaxcore-cuda13",
        "--cuda_major_version=13",
        f"--bazel_path={repo.bazel}",
        "--output_path=out13",
    )
    assert result.returncode == 0, result.stderr
    assert [p.name for p in (repo.path / "out13").iterdir()] == [
        "jaxcore_cuda13-0.1.0-py3-none-any.whl"
    ]


def test_failed_bazel_build_leaves_no_wheel(repo):
    out = repo.path / "dist"
    out.mkdir()
    (out / "keep.txt").write_text("user file")
    result = repo.run(
        "build",
        "--wheels=all",
        f"--bazel_path={repo.bazel}",
        extra_env={"FAKE_BAZEL_BUILD_RC": "1"},
    )
    assert result.returncode == 1
    assert "command failed with exit code 1" in result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]


def test_missing_bazel_output_is_all_or_nothing(repo):
    (repo.bin / "jaxcore" / "tools" / ALL_WHEELS[4]).unlink()
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
        (
            ["--bazel_path=/nonexistent/bazel"],
            "--bazel_path=/nonexistent/bazel is not an executable file",
        ),
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
    assert result.returncode == 2, result.stdout
    assert message in result.stderr
    assert result.stderr.count("error:") == 1
    assert not (repo.path / ".jaxcore_configure.bazelrc").exists()
    assert not (repo.path / "dist").exists()


def test_too_old_bazel_is_refused(repo):
    result = repo.run(
        "build", f"--bazel_path={repo.bazel}", extra_env={"FAKE_BAZEL_VERSION": "3.7.2"}
    )
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
    bare = _bare_python(tmp_path)
    result = repo.run("setup", f"--bazel_path={repo.bazel}", f"--python_bin_path={bare}")
    assert result.returncode == 1
    assert "lacks the test requirements" in result.stderr
    assert "jax>=0.10.2,<0.12.1" in result.stderr and "pytest" in result.stderr
    assert f"install build/{THIS_LOCK.name} into it" in result.stderr
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
    # ... and the C++ compiler the native kernels need.
    assert "apt-get install -y g++" in result.stdout.splitlines()


def test_missing_compiler_outside_debian_names_what_to_install(repo, tmp_path):
    bin_dir = tmp_path / "nocompiler"
    bin_dir.mkdir()
    for tool in ("bash", "sh", "env"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    # No apt-get on PATH: build.py cannot install anything and says what is missing.
    result = repo.run(
        "build",
        "--configure_only",
        f"--bazel_path={repo.bazel}",
        extra_env={"PATH": str(bin_dir), "CC": ""},
    )
    assert result.returncode == 1
    assert "The C++ compiler for the native CPU kernels (gcc, g++) is missing" in result.stderr
    assert "apt-get install g++" in result.stderr
    assert not (repo.path / ".jaxcore_configure.bazelrc").exists()


def test_test_command_dry_run_lists_the_ci_scripts(repo):
    result = repo.run(
        "test", "--dry_run", f"--bazel_path={repo.bazel}", f"--python_bin_path={sys.executable}"
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    expected = [
        f"{repo.bazel} build //jaxcore_cpu:libjaxcore_cpu_kernels.so",
        f"bash {repo.path / 'ci' / 'run_bazel_test_cpu.sh'}",
        f"bash {repo.path / 'ci' / 'run_bazel_test_asan.sh'}",
        f"bash {repo.path / 'ci' / 'run_native_aarch64.sh'}",
        f"bash {repo.path / 'ci' / 'run_pytest_cpu.sh'}",
        f"bash {repo.path / 'ci' / 'run_pytest_newest.sh'}",
        f"bash {repo.path / 'ci' / 'run_docs.sh'}",
        f"bash {repo.path / 'ci' / 'run_lint.sh'}",
    ]
    assert [line for line in lines if line in expected] == expected


def test_test_command_hands_the_built_kernel_library_to_the_jobs(repo):
    ci = repo.path / "ci"
    ci.mkdir()
    seen = repo.path / "seen.txt"
    for name in ("run_bazel_test_cpu.sh", "run_pytest_cpu.sh", "run_bazel_test_asan.sh"):
        _executable(ci / name, f'#!/bin/sh\necho "{name} $JAXCORE_CPU_KERNELS_LIB" >> {seen}\n')
    result = repo.run(
        "test",
        f"--bazel_path={repo.bazel}",
        f"--python_bin_path={sys.executable}",
        "--runners=pytest,asan",
    )
    assert result.returncode == 0, result.stderr
    lib = repo.bin / NATIVE_LIB
    assert seen.read_text().splitlines() == [
        f"run_pytest_cpu.sh {lib}",
        f"run_bazel_test_asan.sh {lib}",
    ]
    builds = [c for c in repo.bazel_calls() if " build " in f" {c} "]
    assert builds == ["build //jaxcore_cpu:libjaxcore_cpu_kernels.so"]
    # A failed library build fails the test command before any job runs.
    seen.unlink()
    result = repo.run(
        "test",
        f"--bazel_path={repo.bazel}",
        f"--python_bin_path={sys.executable}",
        extra_env={"FAKE_BAZEL_BUILD_RC": "1"},
    )
    assert result.returncode == 1 and "command failed with exit code 1" in result.stderr
    assert not seen.exists()


def test_unknown_runner_is_refused(repo):
    result = repo.run(
        "test",
        "--runners=nose",
        f"--bazel_path={repo.bazel}",
        f"--python_bin_path={sys.executable}",
        "--dry_run",
    )
    assert result.returncode == 2
    assert (
        "--runners must list bazel, asan, aarch64, pytest, newest, docs, lint (any of them)"
        in result.stderr
    )
    assert not (repo.path / ".jaxcore_configure.bazelrc").exists()


def test_bazelrc_imports_generated_settings_last():
    lines = [ln.strip() for ln in (REPO / ".bazelrc").read_text().splitlines() if ln.strip()]
    assert lines[-2:] == [
        "try-import %workspace%/.jaxcore_configure.bazelrc",
        "try-import %workspace%/.bazelrc.user",
    ]
    text = "\n".join(lines)
    for config in ("cpu", "cuda", "rocm", "tpu", "ci", "asan", "aarch64"):
        assert f"build:{config} " in text or f"test:{config} " in text, config
    assert "test --test_output=errors" in text


# --- The lock file per end of the JAX range ---------------------------------------------------


@pytest.mark.parametrize(
    "version, lock",
    [
        ((3, 11), "requirements_lock.txt"),
        ((3, 12), "requirements_lock_3_13.txt"),
        ((3, 13), "requirements_lock_3_13.txt"),
        ((3, 14), "requirements_lock_3_13.txt"),
    ],
)
def test_each_python_gets_the_lock_of_its_end_of_the_jax_range(version, lock):
    assert BUILD_PY.lock_file(version).name == lock


def test_locks_pin_the_two_ends_of_the_jax_range():
    assert BUILD_PY.locked_versions(BUILD_PY.LOCK_FILES[(3, 11)]) == {
        "jax": "0.10.2",
        "jaxlib": "0.10.2",
    }
    assert BUILD_PY.locked_versions(BUILD_PY.LOCK_FILES[(3, 13)]) == {
        "jax": "0.12.0.1",
        "jaxlib": "0.12.0.1",
    }
    assert BUILD_PY.LOCK_FILES[(3, 11)] == BUILD_PY.LOCK_FILE


def test_python_older_than_every_lock_is_refused():
    with pytest.raises(BUILD_PY.BuildError, match="jaxcore needs Python 3.11 or newer, not 3.10"):
        BUILD_PY.lock_file((3, 10))


def _fake_jax_distributions(root: Path, version: str) -> str:
    """A directory that, first on PYTHONPATH, makes jax and jaxlib report `version`."""
    for name in ("jax", "jaxlib"):
        info = root / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return str(root)


def test_setup_says_which_lock_the_interpreter_uses(repo, tmp_path):
    # The interpreter has exactly its lock's jax and jaxlib.
    fake = _fake_jax_distributions(tmp_path / "locked", THIS_PINS["jax"])
    result = repo.run(
        "setup",
        f"--bazel_path={repo.bazel}",
        f"--python_bin_path={sys.executable}",
        extra_env={"PYTHONPATH": fake},
    )
    assert result.returncode == 0, result.stderr
    version = "{}.{}".format(*sys.version_info[:2])
    assert (
        f"build.py: Python {version}: test requirements from build/{THIS_LOCK.name} "
        f"(jax {THIS_PINS['jax']}, jaxlib {THIS_PINS['jaxlib']}), installed in "
        f"{sys.executable}"
    ) in result.stdout.splitlines()


def test_an_interpreter_with_another_tested_jax_is_accepted(repo, tmp_path):
    """--python_bin_path with any JAX of the tested range (the GPU machine's 0.11.2) works."""
    fake = _fake_jax_distributions(tmp_path / "mid", "0.11.2")
    result = repo.run(
        "setup",
        f"--bazel_path={repo.bazel}",
        f"--python_bin_path={sys.executable}",
        extra_env={"PYTHONPATH": fake},
    )
    assert result.returncode == 0, result.stderr
    assert (
        f"jax 0.11.2, jaxlib 0.11.2 in {sys.executable}, inside the tested range (its lock, "
        f"build/{THIS_LOCK.name}, pins jax {THIS_PINS['jax']})"
    ) in result.stdout


@pytest.mark.parametrize("version", ["0.10.1", "0.12.1", "0.13.0"])
def test_an_interpreter_with_an_untested_jax_is_refused(repo, tmp_path, version):
    fake = _fake_jax_distributions(tmp_path / "old", version)
    result = repo.run(
        "setup",
        f"--bazel_path={repo.bazel}",
        f"--python_bin_path={sys.executable}",
        extra_env={"PYTHONPATH": fake},
    )
    assert result.returncode == 1
    assert (
        f"lacks the test requirements jax>=0.10.2,<0.12.1 (has {version}), "
        f"jaxlib>=0.10.2,<0.12.1 (has {version})"
    ) in result.stderr
    assert not (repo.path / ".jaxcore_configure.bazelrc").exists()


def test_managed_venv_takes_the_lock_of_its_own_python(repo):
    # The ready venv runs this interpreter; its stamp is over this Python's lock, so nothing
    # is installed and the line names that lock.
    result = repo.run("setup", f"--bazel_path={repo.bazel}")
    assert result.returncode == 0, result.stderr
    assert f"test requirements from build/{THIS_LOCK.name}" in result.stdout


def _fake_python(path: Path, version: str) -> Path:
    """A `python` that reports `version` and otherwise runs this interpreter."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return _executable(
        path,
        textwrap.dedent(f"""\
        #!/bin/sh
        if [ "$1" = "-c" ] && [ "$2" = "import sys; print('%d.%d' % sys.version_info[:2])" ]; then
          echo {version}; exit 0
        fi
        exec "{sys.executable}" "$@"
        """),
    )


def test_python_version_finds_pyenvs_interpreter_and_its_lock(repo, tmp_path):
    # A Python other than the one running build.py (whose venv would be .venv).
    other = "3.12" if sys.version_info[:2] == (3, 13) else "3.13"
    pyenv = tmp_path / "pyenv"
    found = _fake_python(pyenv / "versions" / f"{other}.4" / "bin" / f"python{other}", other)
    # A shim on PATH that runs another version is passed over.
    shims = tmp_path / "shims"
    _fake_python(shims / f"python{other}", "3.11")
    env = {"PYENV_ROOT": str(pyenv), "PATH": f"{shims}:{os.environ['PATH']}", "JAXCORE_VENV": ""}
    result = repo.run("venv", "--dry_run", f"--python_version={other}", extra_env=env)
    assert result.returncode == 0, result.stderr
    venv = (repo.path / f".venv-{other}").resolve()
    assert result.stdout.splitlines() == [
        f"# Python {other}: test requirements from build/requirements_lock_3_13.txt "
        "(jax 0.12.0.1, jaxlib 0.12.0.1)",
        f"{found} -m venv {venv}",
        f"{venv}/bin/python -m pip install --disable-pip-version-check --require-hashes "
        f"-r {repo.path / 'build' / 'requirements_lock_3_13.txt'}",
    ]
    assert not venv.exists()


def test_python_version_that_is_not_installed_is_a_clear_error(repo, tmp_path):
    env = {"PYENV_ROOT": str(tmp_path / "nopyenv"), "JAXCORE_VENV": ""}
    result = repo.run("venv", "--python_version=3.99", extra_env=env)
    assert result.returncode == 1
    assert "no Python 3.99 found (looked for python3.99 on PATH and under" in result.stderr
    assert not (repo.path / ".venv-3.99").exists()


def test_existing_venv_of_another_python_is_refused(repo):
    # JAXCORE_VENV is the ready venv, which runs this interpreter.
    other = "3.99" if sys.version_info[:2] != (3, 99) else "3.98"
    result = repo.run("venv", f"--python_version={other}")
    assert result.returncode == 1
    version = "{}.{}".format(*sys.version_info[:2])
    assert f"is a Python {version} venv, not {other} (--python_version)" in result.stderr


def test_python_version_and_python_bin_path_exclude_each_other(repo):
    result = repo.run(
        "setup",
        f"--bazel_path={repo.bazel}",
        "--python_version=3.13",
        f"--python_bin_path={sys.executable}",
    )
    assert result.returncode == 2
    assert "give --python_bin_path or --python_version, not both" in result.stderr


@pytest.mark.parametrize(
    "runner, script", [("newest", "run_pytest_newest.sh"), ("aarch64", "run_native_aarch64.sh")]
)
def test_cpu_only_runners_are_left_out_for_accelerators(repo, runner, script):
    result = repo.run(
        "test",
        "--dry_run",
        "--backend=tpu",
        f"--bazel_path={repo.bazel}",
        f"--python_bin_path={sys.executable}",
    )
    assert result.returncode == 0, result.stderr
    assert script not in result.stdout
    assert f"bash {repo.path / 'ci' / 'run_pytest_tpu.sh'}" in result.stdout.splitlines()
    result = repo.run(
        "test",
        "--dry_run",
        "--backend=tpu",
        f"--runners={runner}",
        f"--bazel_path={repo.bazel}",
        f"--python_bin_path={sys.executable}",
    )
    assert result.returncode == 2
    assert f"the {runner} runner tests the CPU backend only, not --backend=tpu" in result.stderr


def test_aarch64_runner_installs_its_cross_tools_or_names_them(repo, tmp_path):
    bin_dir = tmp_path / "nocross"
    bin_dir.mkdir()
    for tool in ("bash", "sh", "env", "gcc", "g++", sys.executable):
        found = shutil.which(tool)
        if found:
            os.symlink(found, bin_dir / Path(tool).name)
    run = functools.partial(
        repo.run,
        "test",
        "--runners=aarch64",
        f"--bazel_path={repo.bazel}",
        f"--python_bin_path={sys.executable}",
    )
    # A dry run prints the apt-get command it would run, then the job.
    result = run("--dry_run", extra_env={"PATH": str(bin_dir)})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    install = "apt-get install -y g++-aarch64-linux-gnu qemu-user"
    assert install in lines
    assert lines.index(install) < lines.index(f"bash {repo.path / 'ci' / 'run_native_aarch64.sh'}")
    # Without apt-get (no Debian root) it says what to install and runs nothing.
    result = run(extra_env={"PATH": str(bin_dir)})
    assert result.returncode == 1
    assert "The aarch64 cross compiler and emulator (aarch64-linux-gnu-g++, qemu-aarch64)" in (
        result.stderr
    )
    assert "apt-get install g++-aarch64-linux-gnu qemu-user" in result.stderr
    assert "run_native_aarch64.sh" not in result.stdout + result.stderr.split("missing")[0]

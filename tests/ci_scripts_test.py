"""Tests of the ci/run_*.sh jobs and of the root conftest.py's xdist device pinning.

The jobs run for real, with `JAXCORE_DRY_RUN=1` (they print the commands they would run) or
with fake `bazel` / Python programs that record their arguments and return chosen exit codes,
so no Bazel, venv or accelerator is needed. Expected job counts are computed here from the
machine's cores and RAM, independently of the scripts.
"""

import importlib.util
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import types

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
CI = REPO / "ci"
SCHEDULER = REPO / "build" / "parallel_accelerator_execute.sh"

JOBS = {
    "run_bazel_test_asan.sh": "cpu",
    "run_bazel_test_cpu.sh": "cpu",
    "run_bazel_test_cuda.sh": "cuda",
    "run_bazel_test_rocm.sh": "rocm",
    "run_bazel_test_tpu.sh": "tpu",
    "run_pytest_cpu.sh": "cpu",
    "run_pytest_cuda.sh": "cuda",
    "run_pytest_rocm.sh": "rocm",
    "run_pytest_tpu.sh": "tpu",
}
ACCELERATOR_SUITE = {"cuda": "gpu", "rocm": "gpu", "tpu": "tpu"}
NATIVE_LIB = "jaxcore_cpu/libjaxcore_cpu_kernels.so"
NATIVE_TESTS = ["//jaxcore_cpu:qmm_native_test"]
ASAN_TESTS = [*NATIVE_TESTS, "//tests:cpu_kernels_asan_test_cpu"]
# Commands a job prints besides `build.py setup`: the asan job runs one `bazel test`, the CPU
# pytest job builds the native kernel library before its two phases, the rest run two phases.
COMMANDS = dict.fromkeys(JOBS, 2) | {"run_bazel_test_asan.sh": 1, "run_pytest_cpu.sh": 3}
_TOOLS = (
    "bash",
    "sh",
    "env",
    "nproc",
    "awk",
    "dirname",
    "mkdir",
    "grep",
    "id",
    "cat",
    "flock",
    "mkfifo",
    "rm",
    "date",
)

# A fake program: appends {"argv", "env"} to $FAKE_RECORD, then exits with the next code from
# the space-separated $FAKE_CODES (0 once they run out).
_FAKE_PROGRAM = textwrap.dedent("""\
    import json, os, sys
    record = os.environ["FAKE_RECORD"]
    calls = sum(1 for _ in open(record)) if os.path.exists(record) else 0
    keep = ("JAX_PLATFORMS", "JAXCORE_TEST_BACKEND", "JAXCORE_ENABLE_XDIST_PINNING",
            "JAXCORE_ACCELERATOR_PLATFORM", "JAXCORE_ACCELERATOR_COUNT",
            "JAXCORE_CPU_KERNELS_LIB")
    with open(record, "a") as f:
        f.write(json.dumps({"argv": sys.argv[1:],
                            "env": {k: os.environ[k] for k in keep if k in os.environ}}) + "\\n")
    codes = os.environ.get("FAKE_CODES", "").split()
    sys.exit(int(codes[calls]) if calls < len(codes) else 0)
    """)

# The marker as test sources spell it; assembled so this file itself is not such a source.
_MARK = "pytest.mark." + "multiaccelerator"


def _cores():
    return len(os.sched_getaffinity(0))


def _ram_jobs(gib_per_test=6):
    with open("/proc/meminfo") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
    return max(1, kib // (gib_per_test * 1024 * 1024))


class Job:
    """Runs ci/ scripts in a clean environment with fake tools."""

    def __init__(self, root: pathlib.Path):
        self.root = root
        tools = root / "tools"
        tools.mkdir()
        for tool in _TOOLS:
            found = shutil.which(tool)
            assert found, f"{tool} is needed by the ci scripts"
            (tools / tool).symlink_to(found)
        self.fake_bin = root / "fake_bin"
        self.fake_bin.mkdir()
        (root / "dev").mkdir()
        self.tests_dir = root / "tests"
        self.tests_dir.mkdir()
        self.record = root / "record.jsonl"
        fake = root / "fake_program"
        fake.write_text(f"#!{sys.executable}\n" + _FAKE_PROGRAM)
        fake.chmod(0o755)
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("JAXCORE_", "OMP_", "PYTEST_")) and k != "JAX_PLATFORMS"
        }
        self.env.update(
            PATH=f"{self.fake_bin}:{tools}",
            JAXCORE_SKIP_SETUP="1",
            JAXCORE_DRY_RUN="1",
            JAXCORE_BAZEL=str(fake),
            JAXCORE_PYTHON=str(fake),
            JAXCORE_TEST_DIR=str(self.tests_dir),
            JAXCORE_LOCK_DIR=str(root / "locks"),
            JAXCORE_ACCELERATOR_DEV_DIR=str(root / "dev"),
            FAKE_RECORD=str(self.record),
        )

    def run(self, script, **env):
        return subprocess.run(
            ["bash", str(CI / script)],
            env=dict(self.env, **env),
            capture_output=True,
            text=True,
            cwd=self.root,
            timeout=60,
        )

    def commands(self, script, **env):
        """The commands a dry run prints, each as an argv list."""
        result = self.run(script, **env)
        assert result.returncode == 0, result.stderr
        return [
            shlex.split(line[2:]) for line in result.stdout.splitlines() if line.startswith("+ ")
        ]

    def calls(self):
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]


@pytest.fixture
def job(tmp_path):
    return Job(tmp_path)


def _option(argv, name):
    values = [a.split("=", 1)[1] for a in argv if a.startswith(name + "=")]
    assert len(values) == 1, f"{name} given {len(values)} times in {argv}"
    return values[0]


@pytest.mark.parametrize("script", sorted(JOBS))
def test_every_job_sets_itself_up_unless_told_not_to(job, script):
    commands = job.commands(script, JAXCORE_SKIP_SETUP="0", JAXCORE_ACCELERATOR_COUNT="1")
    assert commands[0] == ["python3", "build/build.py", "setup", f"--backend={JOBS[script]}"]
    skipped = job.commands(script, JAXCORE_ACCELERATOR_COUNT="1")
    assert ["python3", "build/build.py", "setup", f"--backend={JOBS[script]}"] not in skipped
    assert len(skipped) == COMMANDS[script]


@pytest.mark.parametrize("script", sorted(JOBS))
def test_every_job_is_strict_and_reads_the_default_env(script):
    text = (CI / script).read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text
    assert "source ci/envs/default.env" in text
    assert os.access(CI / script, os.X_OK)


def test_jobs_run_from_any_directory(job):
    result = subprocess.run(
        ["bash", str(CI / "run_bazel_test_cpu.sh")],
        env=job.env,
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert result.returncode == 0, result.stderr
    assert "//tests:cpu_tests" in result.stdout


def test_bazel_cpu_job_runs_two_phases(job):
    phase1, phase2 = job.commands("run_bazel_test_cpu.sh")
    jobs = min(_cores(), _ram_jobs())
    # The native kernel tests run beside the Python ones in phase 1.
    assert phase1 == [
        job.env["JAXCORE_BAZEL"],
        "test",
        "--config=ci",
        "--config=cpu",
        f"--local_test_jobs={jobs}",
        "--test_tag_filters=jaxcore_test_cpu,-multiaccelerator",
        "--",
        "//tests:cpu_tests",
        *NATIVE_TESTS,
    ]
    assert phase2 == [
        job.env["JAXCORE_BAZEL"],
        "test",
        "--config=ci",
        "--config=cpu",
        "--local_test_jobs=1",
        # Bazel's tag filter ORs positive tags: the suite picks the backend,
        # the filter alone picks multiaccelerator.
        "--test_tag_filters=multiaccelerator",
        "--",
        "//tests:cpu_tests",
    ]


def test_asan_job_runs_the_native_tests_under_the_sanitizers(job):
    (command,) = job.commands(
        "run_bazel_test_asan.sh",
        JAXCORE_BAZEL_OPTIONS="--jobs=3",
        JAXCORE_BAZEL_STARTUP_OPTIONS="--output_base=/tmp/ob",
    )
    assert command == [
        job.env["JAXCORE_BAZEL"],
        "--output_base=/tmp/ob",
        "test",
        "--config=ci",
        "--config=asan",
        "--jobs=3",
        "--",
        *ASAN_TESTS,
    ]
    # The config it names exists, with both sanitizers and failing on the first report.
    bazelrc = (REPO / ".bazelrc").read_text()
    assert "build:asan --copt=-fsanitize=address,undefined" in bazelrc
    assert "build:asan --linkopt=-fsanitize=address,undefined" in bazelrc
    assert re.search(r"^test:asan --test_env=ASAN_OPTIONS=\S*halt_on_error=1", bazelrc, re.M)
    assert re.search(r"^test:asan --test_env=UBSAN_OPTIONS=\S*halt_on_error=1", bazelrc, re.M)


@pytest.mark.parametrize("code", [0, 1, 3])
def test_asan_job_status(job, code):
    result = job.run("run_bazel_test_asan.sh", JAXCORE_DRY_RUN="0", FAKE_CODES=str(code))
    assert result.returncode == code, result.stderr
    assert len(job.calls()) == 1


def test_ram_bounds_local_test_jobs(job):
    # With 1 TiB per test, RAM allows a single job whatever the machine.
    phase1, _ = job.commands("run_bazel_test_cpu.sh", JAXCORE_RAM_PER_TEST_GIB="1024")
    assert _option(phase1, "--local_test_jobs") == "1"


@pytest.mark.parametrize("platform", ["cuda", "rocm", "tpu"])
def test_bazel_accelerator_job_runs_tests_under_the_scheduler(job, platform):
    phase1, phase2 = job.commands(
        f"run_bazel_test_{platform}.sh",
        JAXCORE_ACCELERATOR_COUNT="2",
        JAXCORE_TESTS_PER_ACCELERATOR="3",
    )
    suite = ACCELERATOR_SUITE[platform]
    assert phase1[:4] == [job.env["JAXCORE_BAZEL"], "test", "--config=ci", f"--config={platform}"]
    assert phase1[-2:] == ["--", f"//tests:{suite}_tests"]
    assert _option(phase1, "--run_under") == str(SCHEDULER)
    assert _option(phase1, "--local_test_jobs") == str(min(2 * 3, _cores(), _ram_jobs()))
    assert _option(phase1, "--test_tag_filters") == f"jaxcore_test_{suite},-multiaccelerator"
    test_env = dict(a.split("=", 2)[1:] for a in phase1 if a.startswith("--test_env="))
    assert test_env == {
        "JAXCORE_ACCELERATOR_PLATFORM": platform,
        "JAXCORE_ACCELERATOR_COUNT": "2",
        "JAXCORE_TESTS_PER_ACCELERATOR": "3",
        "JAXCORE_ACCELERATOR_WAIT_S": "3600",
        "JAXCORE_LOCK_DIR": job.env["JAXCORE_LOCK_DIR"],
    }
    assert _option(phase1, "--sandbox_writable_path") == job.env["JAXCORE_LOCK_DIR"]
    # Phase 2: every device visible, one test at a time.
    assert not [a for a in phase2 if a.startswith(("--run_under", "--test_env"))]
    assert _option(phase2, "--local_test_jobs") == "1"
    assert _option(phase2, "--test_tag_filters") == "multiaccelerator"
    assert phase2[-2:] == ["--", f"//tests:{suite}_tests"]


def test_accelerators_bound_local_test_jobs(job):
    phase1, _ = job.commands(
        "run_bazel_test_cuda.sh", JAXCORE_ACCELERATOR_COUNT="1", JAXCORE_TESTS_PER_ACCELERATOR="1"
    )
    assert _option(phase1, "--local_test_jobs") == "1"


def test_tpu_jobs_default_to_one_test_per_chip(job):
    phase1, _ = job.commands("run_bazel_test_tpu.sh", JAXCORE_ACCELERATOR_COUNT="4")
    assert "--test_env=JAXCORE_TESTS_PER_ACCELERATOR=1" in phase1
    assert _option(phase1, "--local_test_jobs") == str(min(4, _cores(), _ram_jobs()))
    gpu_phase1, _ = job.commands("run_bazel_test_rocm.sh", JAXCORE_ACCELERATOR_COUNT="4")
    assert "--test_env=JAXCORE_TESTS_PER_ACCELERATOR=4" in gpu_phase1


def test_accelerator_log_is_passed_to_tests_and_writable(job):
    log = job.root / "logs" / "accelerators.tsv"
    phase1, _ = job.commands(
        "run_bazel_test_cuda.sh", JAXCORE_ACCELERATOR_COUNT="1", JAXCORE_ACCELERATOR_LOG=str(log)
    )
    assert f"--test_env=JAXCORE_ACCELERATOR_LOG={log}" in phase1
    assert f"--sandbox_writable_path={log.parent}" in phase1


def test_extra_bazel_options_come_last_in_every_phase(job):
    commands = job.commands(
        "run_bazel_test_cuda.sh",
        JAXCORE_ACCELERATOR_COUNT="1",
        JAXCORE_BAZEL_OPTIONS="--jobs=3 '--test_arg=a b'",
        JAXCORE_BAZEL_STARTUP_OPTIONS="--output_base=/tmp/ob",
    )
    for argv in commands:
        assert argv[1:3] == ["--output_base=/tmp/ob", "test"]
        separator = argv.index("--")
        assert argv[separator - 2 : separator] == ["--jobs=3", "--test_arg=a b"]


def test_accelerators_are_detected_for_the_job(job):
    smi = job.fake_bin / "nvidia-smi"
    smi.write_text(
        '#!/bin/sh\nfor i in 0 1 2; do echo "GPU $i: NVIDIA H100 (UUID: GPU-$i)"; done\n'
    )
    smi.chmod(0o755)
    phase1, _ = job.commands("run_bazel_test_cuda.sh")
    assert "--test_env=JAXCORE_ACCELERATOR_COUNT=3" in phase1
    pytest_phase1, _ = job.commands("run_pytest_cuda.sh")
    assert "JAXCORE_ACCELERATOR_COUNT=3" in pytest_phase1


@pytest.mark.parametrize(
    "script", ["run_bazel_test_cuda.sh", "run_pytest_rocm.sh", "run_bazel_test_tpu.sh"]
)
def test_missing_accelerators_fail_the_job_clearly(job, script):
    result = job.run(script, JAXCORE_DRY_RUN="0")
    assert result.returncode == 1
    assert "JAXCORE_ACCELERATOR_COUNT" in result.stderr
    assert job.calls() == []


def test_bad_accelerator_count_fails_the_job_clearly(job):
    result = job.run("run_bazel_test_cuda.sh", JAXCORE_ACCELERATOR_COUNT="lots")
    assert result.returncode == 1
    assert "JAXCORE_ACCELERATOR_COUNT='lots' is not a positive integer" in result.stderr
    assert "accelerator detection failed" in result.stderr
    assert job.calls() == []


@pytest.mark.parametrize(
    "codes,status",
    [
        ("0 0", 0),
        ("0 4", 0),  # no multiaccelerator tests: fine
        ("4 0", 4),  # no single-device tests at all: something is wrong
        ("3 0", 3),
        ("0 3", 3),
        ("1 3", 1),
    ],
)
@pytest.mark.parametrize("script", ["run_bazel_test_cpu.sh", "run_bazel_test_cuda.sh"])
def test_bazel_job_status(job, script, codes, status):
    result = job.run(script, JAXCORE_DRY_RUN="0", JAXCORE_ACCELERATOR_COUNT="1", FAKE_CODES=codes)
    assert result.returncode == status, result.stderr
    assert len(job.calls()) == 2  # The second phase runs even after the first failed.
    assert ("job passed" if status == 0 else "job failed") in result.stderr


@pytest.mark.parametrize(
    "codes,marked,status",
    [
        ("0 0", False, 0),
        ("0 5", False, 0),  # nothing is marked multiaccelerator: nothing to collect
        ("0 5", True, 5),  # marked tests exist but none were collected
        ("5 0", False, 5),
        ("1 0", False, 1),
        ("0 1", False, 1),
    ],
)
def test_pytest_cpu_job(job, codes, marked, status):
    (job.tests_dir / "plain_test.py").write_text("def test_a():\n    pass\n")
    if marked:
        (job.tests_dir / "mesh_test.py").write_text(f"import pytest\npytestmark = {_MARK}\n")
    # A library path given by the caller (build.py's test command) is used as it is.
    lib = str(job.root / "given" / "libjaxcore_cpu_kernels.so")
    result = job.run(
        "run_pytest_cpu.sh", JAXCORE_DRY_RUN="0", FAKE_CODES=codes, JAXCORE_CPU_KERNELS_LIB=lib
    )
    assert result.returncode == status, result.stderr
    phase1, phase2 = job.calls()
    test_dir = str(job.tests_dir)
    assert phase1["argv"] == ["-m", "pytest", "-n", "auto", "-m", "not multiaccelerator", test_dir]
    assert phase2["argv"] == ["-m", "pytest", "-p", "no:xdist", "-m", "multiaccelerator", test_dir]
    assert (
        phase1["env"] == phase2["env"] == {"JAX_PLATFORMS": "cpu", "JAXCORE_CPU_KERNELS_LIB": lib}
    )


_FAKE_BAZEL = """#!/usr/bin/env bash
echo "$*" >> "$FAKE_BAZEL_LOG"
case " $* " in
  *" info "*) echo "$FAKE_BAZEL_BIN" ;;
  *" build "*) exit "${FAKE_BAZEL_BUILD_RC:-0}" ;;
esac
"""


@pytest.mark.parametrize("build_rc", [0, 1])
def test_pytest_cpu_job_builds_the_native_library_first(job, build_rc):
    (job.tests_dir / "plain_test.py").write_text("def test_a():\n    pass\n")
    bazel = job.root / "bazel"
    bazel.write_text(_FAKE_BAZEL)
    bazel.chmod(0o755)
    bazel_bin = job.root / "bazel-out-bin"
    (bazel_bin / "jaxcore_cpu").mkdir(parents=True)
    (bazel_bin / NATIVE_LIB).write_bytes(b"")
    log = job.root / "bazel.log"
    result = job.run(
        "run_pytest_cpu.sh",
        JAXCORE_DRY_RUN="0",
        FAKE_CODES="0 5",
        JAXCORE_BAZEL=str(bazel),
        JAXCORE_BAZEL_OPTIONS="--jobs=3",
        FAKE_BAZEL_LOG=str(log),
        FAKE_BAZEL_BIN=str(bazel_bin),
        FAKE_BAZEL_BUILD_RC=str(build_rc),
    )
    assert result.returncode == build_rc, result.stderr
    calls = log.read_text().splitlines()
    assert calls[0] == "build --config=ci --jobs=3 -- //jaxcore_cpu:libjaxcore_cpu_kernels.so"
    phase1, phase2 = job.calls()  # pytest runs either way
    if build_rc == 0:
        assert calls[1:] == ["info --config=ci --jobs=3 bazel-bin"]
        assert phase1["env"]["JAXCORE_CPU_KERNELS_LIB"] == str(bazel_bin / NATIVE_LIB)
        assert "job passed" in result.stderr
    else:
        assert calls[1:] == []
        assert "JAXCORE_CPU_KERNELS_LIB" not in phase1["env"]
        assert "phase 0 (bazel build, native CPU kernels): FAILED (exit code 1)" in result.stderr


def test_pytest_cpu_job_refuses_a_library_bazel_did_not_build(job):
    bazel = job.root / "bazel"
    bazel.write_text(_FAKE_BAZEL)
    bazel.chmod(0o755)
    result = job.run(
        "run_pytest_cpu.sh",
        JAXCORE_DRY_RUN="0",
        JAXCORE_BAZEL=str(bazel),
        FAKE_BAZEL_LOG=str(job.root / "bazel.log"),
        FAKE_BAZEL_BIN=str(job.root / "empty"),
    )
    assert result.returncode == 1
    assert f"'{job.root / 'empty' / NATIVE_LIB}' is not a file" in result.stderr


@pytest.mark.parametrize("platform", ["cuda", "rocm", "tpu"])
def test_pytest_accelerator_job_pins_workers_then_runs_serially(job, platform):
    result = job.run(
        f"run_pytest_{platform}.sh",
        JAXCORE_DRY_RUN="0",
        JAXCORE_ACCELERATOR_COUNT="2",
        FAKE_CODES="0 5",
    )
    assert result.returncode == 0, result.stderr
    phase1, phase2 = job.calls()
    per = 1 if platform == "tpu" else 4
    workers = min(2 * per, _cores(), _ram_jobs())
    test_dir = str(job.tests_dir)
    assert phase1["argv"] == [
        "-m",
        "pytest",
        "-n",
        str(workers),
        "-m",
        "not multiaccelerator",
        test_dir,
    ]
    backend = ACCELERATOR_SUITE[platform]
    assert phase1["env"] == {
        "JAX_PLATFORMS": platform,
        "JAXCORE_TEST_BACKEND": backend,
        "JAXCORE_ENABLE_XDIST_PINNING": "1",
        "JAXCORE_ACCELERATOR_PLATFORM": platform,
        "JAXCORE_ACCELERATOR_COUNT": "2",
    }
    assert phase2["argv"] == ["-m", "pytest", "-p", "no:xdist", "-m", "multiaccelerator", test_dir]
    # No pinning: every device visible (the count is only what this test's caller set).
    assert phase2["env"] == {
        "JAX_PLATFORMS": platform,
        "JAXCORE_TEST_BACKEND": backend,
        "JAXCORE_ACCELERATOR_COUNT": "2",
    }


# --- the root conftest.py ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def root_conftest():
    spec = importlib.util.spec_from_file_location("jaxcore_root_conftest", REPO / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_workers_map_round_robin_onto_devices(root_conftest):
    devices = [
        root_conftest.device_environment(f"gw{n}", 3, "cuda", 8, environ={})["CUDA_VISIBLE_DEVICES"]
        for n in range(8)
    ]
    assert devices == ["0", "1", "2", "0", "1", "2", "0", "1"]


def test_worker_environment_per_platform(root_conftest):
    env = root_conftest.device_environment
    assert env("gw5", 4, "cuda", 8, environ={}) == {
        "CUDA_VISIBLE_DEVICES": "1",
        "JAXCORE_ACCELERATOR_INDEX": "1",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.450",
    }
    assert env("gw3", 2, "rocm", 3, environ={}) == {
        "ROCR_VISIBLE_DEVICES": "1",
        "HIP_VISIBLE_DEVICES": "0",
        "CUDA_VISIBLE_DEVICES": "0",
        "JAXCORE_ACCELERATOR_INDEX": "1",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.450",
    }
    assert env("gw2", 4, "tpu", 4, environ={}) == {
        "TPU_VISIBLE_CHIPS": "2",
        "TPU_CHIPS_PER_PROCESS_BOUNDS": "1,1,1",
        "TPU_PROCESS_BOUNDS": "1,1,1",
        "ALLOW_MULTIPLE_LIBTPU_LOAD": "true",
        "JAXCORE_ACCELERATOR_INDEX": "2",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.900",
    }
    generic = env("gw1", 2, "generic", 2, environ={})
    assert generic["CUDA_VISIBLE_DEVICES"] == generic["HIP_VISIBLE_DEVICES"] == "1"
    assert generic["TPU_VISIBLE_CHIPS"] == "1" and "ROCR_VISIBLE_DEVICES" not in generic


def test_worker_environment_keeps_caller_memory_settings(root_conftest):
    env = root_conftest.device_environment(
        "gw0",
        1,
        "cuda",
        4,
        environ={"XLA_PYTHON_CLIENT_PREALLOCATE": "true", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.3"},
    )
    assert env == {"CUDA_VISIBLE_DEVICES": "0", "JAXCORE_ACCELERATOR_INDEX": "0"}


@pytest.mark.parametrize(
    "args,message",
    [
        (("worker1", 2, "cuda", 2), "gw<N>"),
        (("gw0", 0, "cuda", 2), "JAXCORE_ACCELERATOR_COUNT"),
        (("gw0", 2, "cuda", 0), "worker count"),
        (("gw0", 2, "metal", 2), "JAXCORE_ACCELERATOR_PLATFORM='metal'"),
    ],
)
def test_worker_environment_errors(root_conftest, args, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        root_conftest.device_environment(*args, environ={})


def _config(workerid=None, workercount=2):
    if workerid is None:
        return types.SimpleNamespace()
    return types.SimpleNamespace(workerinput={"workerid": workerid, "workercount": workercount})


def test_pinning_sets_the_environment_of_workers_only(root_conftest, monkeypatch):
    for name in (
        "CUDA_VISIBLE_DEVICES",
        "XLA_PYTHON_CLIENT_PREALLOCATE",
        "XLA_PYTHON_CLIENT_MEM_FRACTION",
        "JAXCORE_ACCELERATOR_INDEX",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("JAXCORE_ACCELERATOR_COUNT", "2")
    monkeypatch.setenv("JAXCORE_ACCELERATOR_PLATFORM", "cuda")
    monkeypatch.delenv("JAXCORE_ENABLE_XDIST_PINNING", raising=False)
    root_conftest.pytest_configure(_config("gw1"))
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # Pinning is off.
    monkeypatch.setenv("JAXCORE_ENABLE_XDIST_PINNING", "1")
    root_conftest.pytest_configure(_config())
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # Not an xdist worker.
    root_conftest.pytest_configure(_config("gw3", workercount=4))
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    assert os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.450"


@pytest.mark.parametrize(
    "count,platform,message",
    [
        (None, "cuda", "JAXCORE_ACCELERATOR_COUNT=''"),
        ("many", "cuda", "JAXCORE_ACCELERATOR_COUNT='many'"),
        ("0", "cuda", "JAXCORE_ACCELERATOR_COUNT='0'"),
        ("2", "metal", "JAXCORE_ACCELERATOR_PLATFORM='metal'"),
    ],
)
def test_pinning_rejects_bad_settings(root_conftest, monkeypatch, count, platform, message):
    monkeypatch.setenv("JAXCORE_ENABLE_XDIST_PINNING", "1")
    monkeypatch.setenv("JAXCORE_ACCELERATOR_PLATFORM", platform)
    if count is None:
        monkeypatch.delenv("JAXCORE_ACCELERATOR_COUNT", raising=False)
    else:
        monkeypatch.setenv("JAXCORE_ACCELERATOR_COUNT", count)
    with pytest.raises(pytest.UsageError, match=message):
        root_conftest.pytest_configure(_config("gw0"))


def test_xdist_workers_see_their_pinned_device(tmp_path):
    """End to end: real pytest-xdist workers load the root conftest.py and get pinned."""
    pytest.importorskip("xdist")
    shutil.copy(REPO / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    record = tmp_path / "seen.jsonl"
    (tmp_path / "pinning_test.py").write_text(
        textwrap.dedent(f"""\
        import json, os, pytest

        @pytest.mark.parametrize("i", range(12))
        def test_record(i):
            with open({str(record)!r}, "a") as f:
                f.write(json.dumps([os.environ["PYTEST_XDIST_WORKER"],
                                    os.environ.get("CUDA_VISIBLE_DEVICES"),
                                    os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")]) + "\\n")
        """)
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("JAXCORE_", "XLA_PYTHON_CLIENT_", "CUDA_", "PYTEST_"))
    }
    # Only xdist is loaded (not every installed plugin), which keeps the four processes light.
    env.update(
        JAXCORE_ENABLE_XDIST_PINNING="1",
        JAXCORE_ACCELERATOR_COUNT="2",
        JAXCORE_ACCELERATOR_PLATFORM="cuda",
        PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "xdist.plugin",
            "-n",
            "3",
            "-p",
            "no:cacheprovider",
            "pinning_test.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    seen = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(seen) == 12
    for worker, device, fraction in seen:
        assert device == str(int(worker[2:]) % 2)
        assert fraction == "0.450"  # 3 workers on 2 devices: at most 2 share one.

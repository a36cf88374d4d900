"""Tests of build/parallel_accelerator_execute.sh with fake accelerators (runs on CPU):
scheduling, device variables, detection, logging, usage errors and runfiles lookup.

Every test runs the real script in a subprocess (tests/accelerator_sandbox.py).
"""

import collections
import concurrent.futures
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
from accelerator_sandbox import (  # sandbox_fixture registers the `sandbox` fixture
    EXIT_LOCK_DIR,
    EXIT_NOT_EXECUTABLE,
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    EXIT_WAIT_TIMEOUT,
    SCRIPT,
    sandbox_fixture,  # noqa: F401 - a pytest fixture, used by name
)


def _max_overlap(intervals):
    """Largest number of [start, end] intervals that contain one common instant."""
    points = sorted(
        [(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda p: (p[0], p[1])
    )
    best = current = 0
    for _, step in points:
        current += step
        best = max(best, current)
    return best


def _intervals_by_device(events):
    starts = {e["pid"]: e for e in events if e["event"] == "start"}
    ends = {e["pid"]: e for e in events if e["event"] == "end"}
    by_device = collections.defaultdict(list)
    for pid, start in starts.items():
        by_device[start["env"]["CUDA_VISIBLE_DEVICES"]].append((start["time"], ends[pid]["time"]))
    return by_device


def test_sixteen_concurrent_jobs_on_four_accelerators_with_two_slots(sandbox):
    env = {
        "JAXCORE_ACCELERATOR_COUNT": "4",
        "JAXCORE_TESTS_PER_ACCELERATOR": "2",
        "JAXCORE_ACCELERATOR_PLATFORM": "cuda",
    }
    jobs, tests_per_job = 16, 2

    def caller(job):
        return [
            sandbox.run(f"job{job}-{i}", "--sleep", "0.05", env=env).returncode
            for i in range(tests_per_job)
        ]

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        codes = [c for cs in pool.map(caller, range(jobs)) for c in cs]
    assert codes == [0] * (jobs * tests_per_job)
    events = sandbox.events()
    assert sum(e["event"] == "end" for e in events) == jobs * tests_per_job
    by_device = _intervals_by_device(events)
    assert sorted(by_device) == ["0", "1", "2", "3"]
    for device, intervals in by_device.items():
        assert _max_overlap(intervals) <= 2, f"device {device} ran more than 2 tests at once"
    all_intervals = [iv for ivs in by_device.values() for iv in ivs]
    assert _max_overlap(all_intervals) <= 8
    slots = {
        (e["env"]["JAXCORE_ACCELERATOR_INDEX"], e["env"]["JAXCORE_ACCELERATOR_SLOT"])
        for e in events
        if e["event"] == "start"
    }
    assert slots <= {(str(d), str(s)) for d in range(4) for s in range(2)}


def test_fills_every_accelerator_before_stacking(sandbox):
    env = {
        "JAXCORE_ACCELERATOR_COUNT": "4",
        "JAXCORE_TESTS_PER_ACCELERATOR": "3",
        "JAXCORE_ACCELERATOR_PLATFORM": "cuda",
    }
    procs, devices = [], []
    try:
        for i in range(8):
            proc = sandbox.start(f"h{i}", "--hold-until", str(sandbox.release), env=env)
            procs.append(proc)
            devices.append(sandbox.wait_started(f"h{i}", proc)["env"]["CUDA_VISIBLE_DEVICES"])
            # After each start, device loads differ by at most one.
            loads = collections.Counter(devices)
            assert max(loads.values()) - min(loads.get(str(d), 0) for d in range(4)) <= 1
    finally:
        sandbox.release.touch()
        codes = [p.wait(timeout=30) for p in procs]
    assert sorted(devices[:4]) == ["0", "1", "2", "3"]
    assert sorted(devices) == ["0", "0", "1", "1", "2", "2", "3", "3"]
    assert codes == [0] * 8


def test_waiters_are_served_in_arrival_order(sandbox):
    env = {
        "JAXCORE_ACCELERATOR_COUNT": "1",
        "JAXCORE_TESTS_PER_ACCELERATOR": "1",
        "JAXCORE_ACCELERATOR_PLATFORM": "cuda",
    }
    holder = sandbox.hold("holder", env)
    base = sandbox.queued()  # The holder found its slot free and did not queue.
    waiters = []
    for i in range(5):
        waiters.append(sandbox.start(f"w{i}", env=env))
        sandbox.wait_enqueued(base + 1 + i)
    sandbox.release.touch()
    assert holder.wait(timeout=30) == 0
    assert [w.wait(timeout=30) for w in waiters] == [0] * 5
    order = [e["name"] for e in sandbox.events() if e["event"] == "start"]
    assert order == ["holder", "w0", "w1", "w2", "w3", "w4"]


def test_waiters_spread_over_slots_and_keep_order_per_slot(sandbox):
    """The documented fairness: callers join the least-loaded slot's queue, first come first
    served within each slot's queue."""
    env = {
        "JAXCORE_ACCELERATOR_COUNT": "1",
        "JAXCORE_TESTS_PER_ACCELERATOR": "2",
        "JAXCORE_ACCELERATOR_PLATFORM": "cuda",
    }
    holders = [sandbox.hold(f"holder{i}", env) for i in range(2)]
    base = sandbox.queued()
    waiters = []
    for i in range(6):
        waiters.append(sandbox.start(f"w{i}", env=env))
        sandbox.wait_enqueued(base + 1 + i)
    per_slot = collections.Counter(
        node.name.split(".node.")[0]
        for node in sandbox.lock_dir.glob("*.node.*")
        if "queued" in node.read_text().split()
    )
    assert sorted(per_slot.values()) == [3, 3]
    sandbox.release.touch()
    assert [p.wait(timeout=30) for p in holders + waiters] == [0] * 8
    starts = [e for e in sandbox.events() if e["event"] == "start"]
    for slot in ("0", "1"):
        names = [e["name"] for e in starts if e["env"]["JAXCORE_ACCELERATOR_SLOT"] == slot]
        waiting = [n for n in names if n.startswith("w")]
        assert waiting == sorted(waiting), f"slot {slot} served {names}"
        assert len(waiting) == 3


@pytest.mark.parametrize("code", [0, 1, 3, 42])
def test_exit_code_passes_through(sandbox, code):
    result = sandbox.run("t", "--exit", str(code), env={"JAXCORE_ACCELERATOR_COUNT": "1"})
    assert result.returncode == code, result.stderr


def test_killed_test_frees_its_slot(sandbox):
    env = {"JAXCORE_ACCELERATOR_COUNT": "1", "JAXCORE_TESTS_PER_ACCELERATOR": "1"}
    crashed = sandbox.run("crash", "--kill-self", env=env)
    assert crashed.returncode == 128 + signal.SIGKILL
    # No waiting allowed: the slot must be free right away.
    after = sandbox.run("after", env=dict(env, JAXCORE_ACCELERATOR_WAIT_S="0"))
    assert after.returncode == 0, after.stderr
    assert sandbox.started("after")


def test_killed_wrapper_and_test_free_their_slot(sandbox):
    """Bazel kills a timed-out test's whole process group; nothing may stay locked."""
    env = {"JAXCORE_ACCELERATOR_COUNT": "1", "JAXCORE_TESTS_PER_ACCELERATOR": "1"}
    victim = sandbox.start("victim", "--sleep", "600", env=env, start_new_session=True)
    sandbox.wait_started("victim", victim)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait(timeout=30)
    after = sandbox.run("after", env=dict(env, JAXCORE_ACCELERATOR_WAIT_S="20"))
    assert after.returncode == 0, after.stderr
    assert sandbox.started("after")


def test_timeout_gives_one_message_and_distinct_exit_code(sandbox):
    env = {
        "JAXCORE_ACCELERATOR_COUNT": "1",
        "JAXCORE_TESTS_PER_ACCELERATOR": "1",
        "JAXCORE_ACCELERATOR_LOG": str(sandbox.root / "log.tsv"),
    }
    holder = sandbox.hold("holder", env)
    late = sandbox.run("late", env=dict(env, JAXCORE_ACCELERATOR_WAIT_S="0.3"))
    sandbox.release.touch()
    assert holder.wait(timeout=30) == 0
    assert late.returncode == EXIT_WAIT_TIMEOUT
    assert late.stderr.count("\n") == 1
    assert "JAXCORE_ACCELERATOR_WAIT_S=0.3s" in late.stderr
    assert "no free accelerator slot" in late.stderr
    assert not sandbox.started("late")
    log = (sandbox.root / "log.tsv").read_text().splitlines()
    assert any("exit=75" in line and "device=-" in line for line in log)


def test_waiters_that_give_up_do_not_break_the_queue(sandbox):
    """A waiter timing out inside the queue hands its place to its predecessor's successor."""
    env = {
        "JAXCORE_ACCELERATOR_COUNT": "1",
        "JAXCORE_TESTS_PER_ACCELERATOR": "1",
        "JAXCORE_ACCELERATOR_PLATFORM": "cuda",
    }
    holder = sandbox.hold("holder", env)
    base = sandbox.queued()
    first = sandbox.start("first", env=env)
    sandbox.wait_enqueued(base + 1)
    quitter = sandbox.start("quitter", env=dict(env, JAXCORE_ACCELERATOR_WAIT_S="0.2"))
    sandbox.wait_enqueued(base + 2)
    last = sandbox.start("last", env=env)
    sandbox.wait_enqueued(base + 3)
    assert quitter.wait(timeout=30) == EXIT_WAIT_TIMEOUT
    assert not sandbox.started("first") and not sandbox.started("last")
    sandbox.release.touch()
    assert [p.wait(timeout=30) for p in (holder, first, last)] == [0, 0, 0]
    order = [e["name"] for e in sandbox.events() if e["event"] == "start"]
    assert order == ["holder", "first", "last"]
    # With the queue drained, a caller that must not wait gets a slot at once.
    assert sandbox.run("again", env=dict(env, JAXCORE_ACCELERATOR_WAIT_S="0")).returncode == 0


def _device_env(sandbox, platform, **extra):
    env = dict(
        {
            "JAXCORE_ACCELERATOR_COUNT": "2",
            "JAXCORE_TESTS_PER_ACCELERATOR": "4",
            "JAXCORE_ACCELERATOR_PLATFORM": platform,
        },
        **extra,
    )
    result = sandbox.run("t", env=env)
    assert result.returncode == 0, result.stderr
    return sandbox.started("t")[-1]["env"]


def test_cuda_variables(sandbox):
    env = _device_env(sandbox, "cuda")
    assert env == {
        "CUDA_VISIBLE_DEVICES": "0",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.225",
        "JAXCORE_ACCELERATOR_INDEX": "0",
        "JAXCORE_ACCELERATOR_SLOT": "0",
    }


def test_rocm_variables_select_one_gpu_at_every_layer(sandbox):
    env = {
        "JAXCORE_ACCELERATOR_COUNT": "2",
        "JAXCORE_TESTS_PER_ACCELERATOR": "1",
        "JAXCORE_ACCELERATOR_PLATFORM": "rocm",
    }
    holder = sandbox.hold("holder", env)
    second = sandbox.run("second", env=env)
    sandbox.release.touch()
    assert holder.wait(timeout=30) == 0 and second.returncode == 0
    got = sandbox.started("second")[0]["env"]
    # ROCR keeps only GPU 1 visible; HIP and its CUDA alias then index that one GPU as 0.
    assert got == {
        "ROCR_VISIBLE_DEVICES": "1",
        "HIP_VISIBLE_DEVICES": "0",
        "CUDA_VISIBLE_DEVICES": "0",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.900",
        "JAXCORE_ACCELERATOR_INDEX": "1",
        "JAXCORE_ACCELERATOR_SLOT": "0",
    }


def test_tpu_variables(sandbox):
    env = _device_env(sandbox, "tpu", JAXCORE_TESTS_PER_ACCELERATOR="1")
    assert env == {
        "TPU_VISIBLE_CHIPS": "0",
        "TPU_CHIPS_PER_PROCESS_BOUNDS": "1,1,1",
        "TPU_PROCESS_BOUNDS": "1,1,1",
        "ALLOW_MULTIPLE_LIBTPU_LOAD": "true",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.900",
        "JAXCORE_ACCELERATOR_INDEX": "0",
        "JAXCORE_ACCELERATOR_SLOT": "0",
    }


def test_generic_platform_sets_every_runtime_variable(sandbox):
    env = _device_env(sandbox, "generic", JAXCORE_TESTS_PER_ACCELERATOR="3")
    assert env["CUDA_VISIBLE_DEVICES"] == env["HIP_VISIBLE_DEVICES"] == "0"
    assert env["TPU_VISIBLE_CHIPS"] == "0"
    assert "ROCR_VISIBLE_DEVICES" not in env
    assert env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.300"


def test_caller_memory_settings_are_kept(sandbox):
    env = _device_env(
        sandbox, "cuda", XLA_PYTHON_CLIENT_PREALLOCATE="true", XLA_PYTHON_CLIENT_MEM_FRACTION="0.5"
    )
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "true"
    assert env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.5"


def test_the_test_inherits_the_slot_lock_and_nothing_else(sandbox):
    """The slot lock lives as long as any process of the job (hardening issue, item 3)."""
    env = {"JAXCORE_ACCELERATOR_COUNT": "1", "JAXCORE_TESTS_PER_ACCELERATOR": "1"}
    holder = sandbox.hold("holder", env)
    waiter = sandbox.start("waiter", env=env)  # queues: it has a node file open while waiting
    sandbox.wait_enqueued(1)
    sandbox.release.touch()
    assert holder.wait(timeout=30) == 0 and waiter.wait(timeout=30) == 0
    for name in ("holder", "waiter"):
        fds = [f for f in sandbox.started(name)[0]["fds"] if str(sandbox.lock_dir) in f]
        assert fds == [str(sandbox.lock_dir / "accelerator_0_slot_0.lock")], fds


def _detected(sandbox, holders_env=None):
    """(platform-specific device variable names, accelerator count) the script detected.

    The count is measured by behaviour: with one slot per accelerator, hold tests until a
    caller that may not wait is refused.
    """
    env = dict({"JAXCORE_TESTS_PER_ACCELERATOR": "1"}, **(holders_env or {}))
    holders = []
    try:
        for i in range(9):
            proc = sandbox.start(
                f"d{i}",
                "--hold-until",
                str(sandbox.release),
                env=dict(env, JAXCORE_ACCELERATOR_WAIT_S="0"),
            )
            while not sandbox.started(f"d{i}") and proc.poll() is None:
                time.sleep(0.01)
            if proc.poll() is not None and not sandbox.started(f"d{i}"):
                assert proc.returncode == EXIT_WAIT_TIMEOUT, proc.stderr.read()
                break
            holders.append(proc)
    finally:
        sandbox.release.touch()
        for proc in holders:
            assert proc.wait(timeout=30) == 0
    names = set(sandbox.started("d0")[0]["env"]) - {
        "XLA_PYTHON_CLIENT_PREALLOCATE",
        "XLA_PYTHON_CLIENT_MEM_FRACTION",
        "JAXCORE_ACCELERATOR_INDEX",
        "JAXCORE_ACCELERATOR_SLOT",
    }
    return names, len(holders)


def test_detects_nvidia_gpus_with_nvidia_smi(sandbox):
    sandbox.fake_tool(
        "nvidia-smi",
        "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:08d})\n" for i in range(3)),
    )
    names, count = _detected(sandbox)
    assert names == {"CUDA_VISIBLE_DEVICES"}
    assert count == 3


def test_detection_runs_once_per_session(sandbox):
    """Later runs reuse the detection cached in the lock directory (no nvidia-smi per test)."""
    calls = sandbox.root / "nvidia_smi_calls"
    tool = sandbox.fake_bin / "nvidia-smi"
    tool.write_text(
        f"#!/bin/sh\necho called >> '{calls}'\n"
        "echo 'GPU 0: NVIDIA H100 (UUID: GPU-0)'\necho 'GPU 1: NVIDIA H100 (UUID: GPU-1)'\n"
    )
    tool.chmod(0o755)
    env = {"JAXCORE_TESTS_PER_ACCELERATOR": "1"}
    for i in range(3):
        result = sandbox.run(f"t{i}", env=env)
        assert result.returncode == 0, result.stderr
    assert calls.read_text().splitlines() == ["called"]
    assert {e["env"]["CUDA_VISIBLE_DEVICES"] for e in sandbox.events()} <= {"0", "1"}
    # A bad setting is still reported although the cache would answer.
    bad = sandbox.run("bad", env=dict(env, JAXCORE_ACCELERATOR_PLATFORM="opencl"))
    assert bad.returncode == EXIT_USAGE


def test_detects_amd_gpus_with_rocm_smi(sandbox):
    sandbox.fake_tool(
        "rocm-smi",
        "=== ROCm System Management Interface ===\n"
        "GPU[0]\t\t: Device ID: 0x74a1\nGPU[0]\t\t: Device Rev: 0x00\n"
        "GPU[1]\t\t: Device ID: 0x74a1\nGPU[1]\t\t: Device Rev: 0x00\n",
    )
    names, count = _detected(sandbox)
    assert names == {"ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"}
    assert count == 2


def test_detects_amd_render_nodes_and_skips_other_vendors(sandbox):
    dev, sys_dir = sandbox.root / "dev", sandbox.root / "sys"
    (dev / "kfd").touch()
    (dev / "dri").mkdir()
    for node, vendor in [
        ("renderD128", "0x1002"),
        ("renderD129", "0x8086"),
        ("renderD130", "0x1002"),
    ]:
        (dev / "dri" / node).touch()
        (sys_dir / "class" / "drm" / node / "device").mkdir(parents=True)
        (sys_dir / "class" / "drm" / node / "device" / "vendor").write_text(vendor + "\n")
    names, count = _detected(sandbox)
    assert "ROCR_VISIBLE_DEVICES" in names
    assert count == 2


def test_detects_tpu_chips_from_accel_nodes(sandbox):
    for i in range(4):
        (sandbox.root / "dev" / f"accel{i}").touch()
    names, count = _detected(sandbox)
    assert names == {
        "TPU_VISIBLE_CHIPS",
        "TPU_CHIPS_PER_PROCESS_BOUNDS",
        "TPU_PROCESS_BOUNDS",
        "ALLOW_MULTIPLE_LIBTPU_LOAD",
    }
    assert count == 4


def test_detects_tpu_chips_from_vfio_groups(sandbox):
    vfio = sandbox.root / "dev" / "vfio"
    vfio.mkdir()
    for name in ("0", "1", "vfio"):
        (vfio / name).touch()
    names, count = _detected(sandbox)
    assert "TPU_VISIBLE_CHIPS" in names
    assert count == 2


def test_defaults_to_one_generic_accelerator(sandbox):
    names, count = _detected(sandbox)
    assert {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "TPU_VISIBLE_CHIPS"} <= names
    assert count == 1


def test_explicit_count_overrides_detection(sandbox):
    sandbox.fake_tool("nvidia-smi", "GPU 0: NVIDIA H100 (UUID: GPU-0)\n")
    names, count = _detected(sandbox, {"JAXCORE_ACCELERATOR_COUNT": "2"})
    assert names == {"CUDA_VISIBLE_DEVICES"}
    assert count == 2


def test_log_has_one_line_per_test(sandbox):
    log = sandbox.root / "log.tsv"
    env = {
        "JAXCORE_ACCELERATOR_COUNT": "2",
        "JAXCORE_ACCELERATOR_LOG": str(log),
        "TEST_TARGET": "//tests:example_test_gpu",
    }
    assert sandbox.run("a", env=env).returncode == 0
    assert sandbox.run("b", "--exit", "3", env=env).returncode == 3
    lines = log.read_text().splitlines()
    assert len(lines) == 2
    fields = [dict(f.split("=", 1) for f in line.split("\t")[1:]) for line in lines]
    assert [f["test"] for f in fields] == ["//tests:example_test_gpu"] * 2
    assert [f["exit"] for f in fields] == ["0", "3"]
    assert all(f["device"] in ("0", "1") and f["slot"] == "0" for f in fields)
    assert all(float(f["wait_s"]) >= 0 and float(f["run_s"]) > 0 for f in fields)
    assert lines[0].split("\t")[0][:4].isdigit()


def test_unwritable_log_warns_but_keeps_the_exit_code(sandbox):
    env = {
        "JAXCORE_ACCELERATOR_COUNT": "1",
        "JAXCORE_ACCELERATOR_LOG": str(sandbox.root / "missing_dir" / "log"),
    }
    result = sandbox.run("t", "--exit", "4", env=env)
    assert result.returncode == 4
    assert "cannot append to JAXCORE_ACCELERATOR_LOG" in result.stderr


@pytest.mark.parametrize(
    "variable,value",
    [
        ("JAXCORE_ACCELERATOR_COUNT", "0"),
        ("JAXCORE_ACCELERATOR_COUNT", "two"),
        ("JAXCORE_TESTS_PER_ACCELERATOR", "-1"),
        ("JAXCORE_TESTS_PER_ACCELERATOR", ""),
        ("JAXCORE_ACCELERATOR_WAIT_S", "soon"),
        ("JAXCORE_ACCELERATOR_WAIT_S", "-5"),
        ("JAXCORE_ACCELERATOR_PLATFORM", "metal"),
    ],
)
def test_bad_settings_are_named(sandbox, variable, value):
    env = {"JAXCORE_ACCELERATOR_COUNT": "1", variable: value}
    if variable == "JAXCORE_TESTS_PER_ACCELERATOR" and value == "":
        env[variable] = " "
    result = sandbox.run("t", env=env)
    assert result.returncode == EXIT_USAGE
    assert variable in result.stderr
    assert not sandbox.started("t")


def test_no_command_is_a_usage_error(sandbox):
    result = subprocess.run([str(SCRIPT)], env=sandbox.env, capture_output=True, text=True)
    assert result.returncode == EXIT_USAGE
    assert "no test given" in result.stderr


def test_missing_test_is_reported(sandbox):
    result = subprocess.run(
        [str(SCRIPT), "tests/does_not_exist_test"],
        env=sandbox.env,
        capture_output=True,
        text=True,
        cwd=sandbox.root,
    )
    assert result.returncode == EXIT_NOT_FOUND
    assert "tests/does_not_exist_test" in result.stderr


def test_non_executable_test_is_reported(sandbox):
    target = sandbox.root / "not_executable_test"
    target.write_text("#!/bin/sh\nexit 0\n")
    result = subprocess.run(
        [str(SCRIPT), str(target)], env=sandbox.env, capture_output=True, text=True
    )
    assert result.returncode == EXIT_NOT_EXECUTABLE
    assert "not executable" in result.stderr


def test_uncreatable_lock_dir_is_reported(sandbox):
    blocker = sandbox.root / "a_file"
    blocker.write_text("")
    env = dict(sandbox.env, JAXCORE_LOCK_DIR=str(blocker / "locks"))
    result = subprocess.run(
        [str(SCRIPT), sys.executable, "-c", "pass"], env=env, capture_output=True, text=True
    )
    assert result.returncode == EXIT_LOCK_DIR
    assert "JAXCORE_LOCK_DIR" in result.stderr


def _runfiles_test(root: pathlib.Path) -> pathlib.Path:
    """A runfiles tree holding `<workspace>/tests/example_test`, which prints its args."""
    target = root / "runfiles" / "jaxcore" / "tests" / "example_test"
    target.parent.mkdir(parents=True)
    target.write_text('#!/bin/sh\necho "ran with $*"\nexit 5\n')
    target.chmod(0o755)
    return target


@pytest.mark.parametrize("variable", ["TEST_SRCDIR", "RUNFILES_DIR"])
def test_finds_the_test_in_the_runfiles_tree(sandbox, variable):
    _runfiles_test(sandbox.root)
    env = dict(
        sandbox.env,
        JAXCORE_ACCELERATOR_COUNT="1",
        TEST_WORKSPACE="jaxcore",
        **{variable: str(sandbox.root / "runfiles")},
    )
    result = subprocess.run(
        [str(SCRIPT), "tests/example_test", "--flag"],
        env=env,
        capture_output=True,
        text=True,
        cwd=sandbox.root,
    )
    assert result.returncode == 5, result.stderr
    assert result.stdout == "ran with --flag\n"


def test_finds_the_test_through_the_runfiles_manifest(sandbox):
    target = _runfiles_test(sandbox.root)
    manifest = sandbox.root / "MANIFEST"
    manifest.write_text(f"jaxcore/tests/other_file /nowhere\njaxcore/tests/example_test {target}\n")
    env = dict(
        sandbox.env,
        JAXCORE_ACCELERATOR_COUNT="1",
        TEST_WORKSPACE="jaxcore",
        RUNFILES_MANIFEST_FILE=str(manifest),
    )
    result = subprocess.run(
        [str(SCRIPT), "./tests/example_test"],
        env=env,
        capture_output=True,
        text=True,
        cwd=sandbox.root,
    )
    assert result.returncode == 5, result.stderr
    assert result.stdout == "ran with \n"

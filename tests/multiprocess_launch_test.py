"""`python -m jaxcore.launch`: environment, output, exit codes, timeouts, failures, cleanup.

Most tests launch small Python programs that never start JAX (fast); the failure tests run
a real JAX multi-process program in which one process dies while the others wait on it.
"""

import json
import socket
import sys
import textwrap
import types

import multiprocess_util as mp
import pytest

import jaxcore.launch

pytestmark = pytest.mark.multiprocess

PY = sys.executable


def _py(code: str) -> list[str]:
    return [PY, "-c", textwrap.dedent(code)]


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is not "bound"
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_initialize_is_a_no_op_outside_the_launcher(monkeypatch):
    monkeypatch.delenv("JAXCORE_PROCESS_ID", raising=False)
    assert not jaxcore.launch.launched()
    assert jaxcore.launch.initialize() is False
    import jax

    assert not jax.distributed.is_initialized()


def test_each_process_gets_its_place_and_prefixed_output():
    code = """
        import json, os
        keys = ["JAXCORE_PROCESS_ID", "JAXCORE_NUM_PROCESSES", "JAXCORE_COORDINATOR_ADDRESS",
                "JAX_COORDINATOR_BIND_ADDRESS", "JAX_CPU_COLLECTIVES_IMPLEMENTATION",
                "JAX_PLATFORMS", "XLA_FLAGS"]
        print("ENV", json.dumps({k: os.environ.get(k) for k in keys}))
        print("to stderr", file=__import__("sys").stderr)
    """
    env = mp.environment(XLA_FLAGS="--xla_cpu_foo=1 --xla_force_host_platform_device_count=8")
    run = mp.launch(3, 2, _py(code), env=env, timeout=60)
    assert run.returncode == 0, run.describe()
    seen = {}
    for line in run.stdout.splitlines():
        prefix, _, rest = line.partition(" ")
        assert prefix in ("[p0]", "[p1]", "[p2]"), line
        if rest.startswith("ENV "):
            seen[prefix] = json.loads(rest[4:])
    assert sorted(seen) == ["[p0]", "[p1]", "[p2]"]
    port = run.coordinator_port()
    for i in range(3):
        env_i = seen[f"[p{i}]"]
        assert env_i["JAXCORE_PROCESS_ID"] == str(i)
        assert env_i["JAXCORE_NUM_PROCESSES"] == "3"
        assert (
            env_i["JAXCORE_COORDINATOR_ADDRESS"]
            == env_i["JAX_COORDINATOR_BIND_ADDRESS"]
            == f"127.0.0.1:{port}"
        )
        assert env_i["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] == "gloo"
        assert env_i["JAX_PLATFORMS"] == "cpu"
        # The launcher's device count replaces the caller's; other flags are kept.
        assert env_i["XLA_FLAGS"].split() == [
            "--xla_cpu_foo=1",
            "--xla_force_host_platform_device_count=2",
        ]
        assert f"[p{i}] to stderr" in run.stderr
    assert _port_is_free(port)


def test_first_failure_decides_the_exit_code_and_stops_the_others(tmp_path):
    code = f"""
        import os, sys, time
        i = int(os.environ["JAXCORE_PROCESS_ID"])
        open(os.path.join({str(tmp_path)!r}, f"pid_{{i}}"), "w").write(str(os.getpid()))
        if i == 1:
            time.sleep(0.5)
            print("process 1 gives up", file=sys.stderr)
            sys.exit(3)
        time.sleep(120)
    """
    run = mp.launch(3, 1, _py(code), timeout=100)
    assert run.returncode == 3, run.describe()
    assert run.seconds < 30, run.describe()
    assert "process 1 exited with code 3; stopping the 2 still running" in run.stderr
    assert "[p1] process 1 gives up" in run.stderr
    pids = [int((tmp_path / f"pid_{i}").read_text()) for i in range(3)]
    assert not [pid for pid in pids if mp.alive(pid)]
    assert _port_is_free(run.coordinator_port())


def test_success_when_every_process_succeeds():
    run = mp.launch(
        2, 1, _py("import os; print('hi', os.environ['JAXCORE_PROCESS_ID'])"), timeout=60
    )
    assert run.returncode == 0, run.describe()
    assert "[p0] hi 0" in run.stdout and "[p1] hi 1" in run.stdout


def test_timeout_stops_everything_with_exit_code_124(tmp_path):
    code = f"""
        import os, subprocess, time
        child = subprocess.Popen(["sleep", "300"])  # a grandchild in the same process group
        i = os.environ["JAXCORE_PROCESS_ID"]
        open(os.path.join({str(tmp_path)!r}, f"pids_{{i}}"), "w").write(f"{{os.getpid()}} {{child.pid}}")
        time.sleep(300)
    """
    cmd = [PY, "-m", "jaxcore.launch", "-n", "2", "--timeout", "2", "--", *_py(code)]
    run = mp._run(cmd, mp.environment(), 60)
    assert run.returncode == jaxcore.launch.TIMEOUT_EXIT_CODE == 124, run.describe()
    assert "timed out after 2 s" in run.stderr
    assert run.seconds < 20
    pids = [int(p) for i in range(2) for p in (tmp_path / f"pids_{i}").read_text().split()]
    assert not [pid for pid in pids if mp.alive(pid)]


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "the following arguments are required: --processes"),
        (["-n", "2"], "give the command to run after `--`"),
        (["-n", "0", "--", "true"], "--processes must be >= 1"),
        (["-n", "1", "-d", "0", "--", "true"], "--devices-per-process must be >= 1"),
        (
            ["-n", "1", "--", "/nonexistent/program"],
            "command not found or not executable: '/nonexistent/program'",
        ),
    ],
)
def test_bad_usage_is_reported(argv, message, capsys):
    try:
        code = jaxcore.launch.main(argv)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    assert code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "processes, devices, how, code",
    [
        pytest.param(2, 2, "raise", 1, id="2x2-exception"),
        pytest.param(4, 1, "kill", 137, id="4x1-sigkill"),
    ],
)
def test_a_process_dying_mid_run_fails_the_launch_in_bounded_time(
    processes, devices, how, code, tmp_path
):
    """The others are blocked in a collective waiting for the dead one: never a hang."""
    run = mp.launch_program(processes, devices, "crash", str(tmp_path), how, timeout=120)
    last = processes - 1
    assert run.seconds < 60, run.describe()
    assert run.stdout.count("first collective done") == processes, run.describe()
    # The others' collectives fail a moment later ("Connection closed by peer"); the
    # launcher reports the dead process: the earliest failure, and a death by a signal
    # outranks exits with a code whatever order the exits were recorded in.
    assert run.returncode == code, run.describe()
    if how == "raise":
        assert f"process {last} exited with code 1; stopping" in run.stderr, run.describe()
        assert f"[p{last}] RuntimeError: deliberate failure in process {last}" in run.stderr, (
            run.describe()
        )
    else:
        assert f"process {last} was killed by SIGKILL; stopping" in run.stderr, run.describe()
    pids = [int((tmp_path / f"pid_{i}").read_text()) for i in range(processes)]
    pids.append(int((tmp_path / "grandchild_pid").read_text()))
    assert not [pid for pid in pids if mp.alive(pid)], run.describe()
    assert _port_is_free(run.coordinator_port())


def test_a_signal_death_is_blamed_before_exits_recorded_earlier():
    """On a loaded machine the waiter threads may record a killed process's exit last."""
    from jaxcore.launch import _launcher

    def failed(returncode, exit_time):
        p = object.__new__(_launcher._Process)
        p.popen = types.SimpleNamespace(returncode=returncode)
        p.exit_time = exit_time
        return p

    raised, later, killed = failed(1, 1.0), failed(1, 1.5), failed(-9, 2.0)
    assert min([raised, later, killed], key=_launcher._Process.blame_order) is killed
    assert min([later, raised], key=_launcher._Process.blame_order) is raised
    running = failed(None, None)
    assert min([running, later], key=_launcher._Process.blame_order) is later


def test_ci_job_runs_only_the_multiprocess_tests():
    """ci/run_multiprocess_cpu.sh: a Bazel phase and a pytest phase, both by the tag."""
    import os
    import pathlib
    import shlex
    import subprocess

    script = pathlib.Path(__file__).resolve().parents[1] / "ci" / "run_multiprocess_cpu.sh"
    text = script.read_text()
    assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text
    assert os.access(script, os.X_OK)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAXCORE_", "PYTEST_"))}
    env.update(
        JAXCORE_DRY_RUN="1",
        JAXCORE_SKIP_SETUP="1",
        JAXCORE_BAZEL="bazel",
        JAXCORE_PYTHON="python3",
        JAXCORE_TEST_DIR="tests",
    )
    result = subprocess.run(
        ["bash", str(script)], env=env, capture_output=True, text=True, cwd="/", timeout=60
    )
    assert result.returncode == 0, result.stderr
    bazel, pytest_run = [
        shlex.split(line[2:]) for line in result.stdout.splitlines() if line.startswith("+ ")
    ]
    assert bazel[:2] == ["bazel", "test"] and "--test_tag_filters=multiprocess" in bazel
    assert bazel[-2:] == ["--", "//tests:cpu_tests"]
    assert pytest_run[-7:] == ["-m", "pytest", "-n", "auto", "-m", "multiprocess", "tests"]

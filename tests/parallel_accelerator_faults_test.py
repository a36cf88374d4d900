"""Faults and hostile lock directories for build/parallel_accelerator_execute.sh: killed
wrappers, timeouts, malformed numbers, symlinked or foreign lock dirs and lock files.

Every test runs the real script in a subprocess (tests/accelerator_sandbox.py).
"""

import os
import signal
import subprocess
import time

import pytest
from accelerator_sandbox import (  # sandbox_fixture registers the `sandbox` fixture
    EXIT_LOCK_DIR,
    EXIT_USAGE,
    EXIT_WAIT_TIMEOUT,
    SCRIPT,
    sandbox_fixture,  # noqa: F401 - a pytest fixture, used by name
)

# ------------------------------------------------------------- faults and hostile lock dirs


def _wait_ended(sandbox, name, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not [e for e in sandbox.events() if e["event"] == "end" and e["name"] == name]:
        assert time.monotonic() < deadline, f"{name} never ended"
        time.sleep(0.01)


def test_sigkill_of_the_wrapper_keeps_the_slot_until_its_test_ends(sandbox):
    """Killing the wrapper alone must not free the slot while its test still runs."""
    env = {"JAXCORE_ACCELERATOR_COUNT": "1", "JAXCORE_TESTS_PER_ACCELERATOR": "1"}
    orphan = sandbox.hold("orphan", env)
    os.kill(orphan.pid, signal.SIGKILL)  # the wrapper only; its test keeps running
    orphan.wait(timeout=30)
    late = sandbox.run("late", env=dict(env, JAXCORE_ACCELERATOR_WAIT_S="0.5"))
    assert late.returncode == EXIT_WAIT_TIMEOUT, late.stderr
    assert not sandbox.started("late")
    waiter = sandbox.start("waiter", env=env)
    time.sleep(0.5)
    assert not sandbox.started("waiter")
    sandbox.release.touch()  # the orphaned test ends: now the slot is free
    assert waiter.wait(timeout=30) == 0
    end = [e for e in sandbox.events() if e["event"] == "end" and e["name"] == "orphan"][0]
    assert sandbox.started("waiter")[0]["time"] >= end["time"]


def test_all_accelerators_busy_times_out_naming_the_settings(sandbox):
    env = {"JAXCORE_ACCELERATOR_COUNT": "2", "JAXCORE_TESTS_PER_ACCELERATOR": "1"}
    holders = [sandbox.hold(f"h{i}", env) for i in range(2)]
    late = sandbox.run("late", env=dict(env, JAXCORE_ACCELERATOR_WAIT_S="0.3"))
    sandbox.release.touch()
    assert [h.wait(timeout=30) for h in holders] == [0, 0]
    assert late.returncode == EXIT_WAIT_TIMEOUT
    assert "2 accelerators x 1 slots stayed busy" in late.stderr


@pytest.mark.parametrize(
    "variable,value",
    [
        ("JAXCORE_ACCELERATOR_COUNT", "99999999999999999999"),  # used to overflow: endless loop
        ("JAXCORE_ACCELERATOR_COUNT", "9223372036854775808"),
        ("JAXCORE_ACCELERATOR_COUNT", "1025"),
        ("JAXCORE_ACCELERATOR_COUNT", "-1"),
        ("JAXCORE_ACCELERATOR_COUNT", "1e3"),
        ("JAXCORE_TESTS_PER_ACCELERATOR", "18446744073709551617"),
        ("JAXCORE_TESTS_PER_ACCELERATOR", "0"),
        ("JAXCORE_TESTS_PER_ACCELERATOR", "257"),
        ("JAXCORE_ACCELERATOR_WAIT_S", "99999999999999999999"),
        ("JAXCORE_ACCELERATOR_WAIT_S", "1.5.2"),
        ("JAXCORE_ACCELERATOR_WAIT_S", "inf"),
    ],
)
def test_huge_and_malformed_numbers_are_named(sandbox, variable, value):
    env = {"JAXCORE_ACCELERATOR_COUNT": "1", variable: value}
    result = sandbox.run("t", env=env, timeout=20)
    assert result.returncode == EXIT_USAGE, result.stderr
    assert f"{variable}='{value}' is not" in result.stderr
    assert result.stderr.count("\n") == 1
    assert not sandbox.started("t")


def test_huge_count_is_named_by_detect_too(sandbox):
    result = subprocess.run(
        [str(SCRIPT), "--detect"],
        capture_output=True,
        text=True,
        timeout=20,
        env=dict(sandbox.env, JAXCORE_ACCELERATOR_COUNT="9" * 20),
    )
    assert result.returncode == EXIT_USAGE and "JAXCORE_ACCELERATOR_COUNT" in result.stderr


def test_leading_zeros_are_still_numbers(sandbox):
    env = {
        "JAXCORE_ACCELERATOR_COUNT": "0" * 19 + "1",
        "JAXCORE_TESTS_PER_ACCELERATOR": "002",
        "JAXCORE_ACCELERATOR_WAIT_S": "0010.50",
    }
    result = sandbox.run("t", env=env)
    assert result.returncode == 0, result.stderr
    assert sandbox.started("t")[0]["env"]["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.450"


def _mode(path):
    return os.lstat(path).st_mode & 0o7777


def test_lock_dir_is_created_private(sandbox):
    assert sandbox.run("t", env={"JAXCORE_ACCELERATOR_COUNT": "1"}).returncode == 0
    assert _mode(sandbox.lock_dir) == 0o700


def test_default_lock_dir_prefers_xdg_runtime_dir(sandbox, tmp_path):
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {k: v for k, v in sandbox.env.items() if k != "JAXCORE_LOCK_DIR"}
    env.update(XDG_RUNTIME_DIR=str(runtime), JAXCORE_ACCELERATOR_COUNT="1")
    result = subprocess.run(
        sandbox.command("t"), env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    locks = runtime / "jaxcore_accelerator_locks"
    assert _mode(locks) == 0o700 and (locks / "accelerator_0_slot_0.lock").exists()


def _refused(sandbox, message, **env):
    result = sandbox.run("t", env=dict({"JAXCORE_ACCELERATOR_COUNT": "1"}, **env))
    assert result.returncode == EXIT_LOCK_DIR, result.stderr
    assert message in result.stderr and "JAXCORE_LOCK_DIR" in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1
    assert not sandbox.started("t")


def test_symlinked_lock_dir_is_refused_and_nothing_is_written_through_it(sandbox):
    """The symlink trap: a planted link must not make a run write where it points."""
    target = sandbox.root / "elsewhere"
    target.mkdir(mode=0o700)
    sandbox.lock_dir.symlink_to(target)
    _refused(sandbox, "is a symbolic link; refusing to follow it")
    assert list(target.iterdir()) == []


def test_lock_dir_owned_by_someone_else_is_refused(sandbox):
    if os.geteuid() == 0:
        sandbox.lock_dir.mkdir(mode=0o700)
        os.chown(sandbox.lock_dir, 65534, 65534)
        _refused(sandbox, "belongs to uid 65534, not to you (uid 0)")
        assert list(sandbox.lock_dir.iterdir()) == []
    else:  # an existing directory of root's stands in for another user's
        _refused(
            sandbox, f"belongs to uid 0, not to you (uid {os.geteuid()})", JAXCORE_LOCK_DIR="/"
        )


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777, 0o702])
def test_lock_dir_writable_by_others_is_refused(sandbox, mode):
    sandbox.lock_dir.mkdir()
    sandbox.lock_dir.chmod(mode)
    _refused(sandbox, f"is writable by group or others (mode {mode:o})")
    assert list(sandbox.lock_dir.iterdir()) == []


@pytest.mark.parametrize("mode", [0o000, 0o300, 0o500])
def test_lock_dir_without_owner_rwx_is_refused(sandbox, mode):
    sandbox.lock_dir.mkdir()
    sandbox.lock_dir.chmod(mode)
    try:
        _refused(sandbox, f"is not readable, writable and searchable by its owner (mode {mode:o})")
    finally:
        sandbox.lock_dir.chmod(0o700)


def test_lock_dir_that_is_a_file_is_refused(sandbox):
    sandbox.lock_dir.write_text("not a directory")
    _refused(sandbox, "not a directory")
    assert sandbox.lock_dir.read_text() == "not a directory"


def test_symlinked_lock_file_is_refused_and_its_target_kept(sandbox):
    victim = sandbox.root / "victim"
    victim.write_text("precious\n")
    victim.chmod(0o600)
    sandbox.lock_dir.mkdir(mode=0o700)
    (sandbox.lock_dir / "accelerator_0_slot_0.lock").symlink_to(victim)
    (sandbox.lock_dir / "accelerator_0_slot_0.owner").symlink_to(victim)
    result = sandbox.run("t", env={"JAXCORE_ACCELERATOR_COUNT": "1"})
    assert result.returncode == EXIT_LOCK_DIR
    assert "accelerator_0_slot_0.lock' in the lock directory is a symbolic link" in result.stderr
    assert victim.read_text() == "precious\n"
    assert not sandbox.started("t")


def test_unopenable_lock_file_names_the_file_and_the_reason(sandbox):
    sandbox.lock_dir.mkdir(mode=0o700)
    (sandbox.lock_dir / "accelerator_0_slot_0.lock").mkdir()
    result = sandbox.run("t", env={"JAXCORE_ACCELERATOR_COUNT": "1"})
    assert result.returncode == EXIT_LOCK_DIR
    assert result.stderr == (
        f"parallel_accelerator_execute.sh: error: cannot open the lock file "
        f"'{sandbox.lock_dir}/accelerator_0_slot_0.lock': Is a directory\n"
    )
    assert "ambiguous redirect" not in result.stderr


def test_sigterm_to_the_wrapper_alone_waits_for_the_test(sandbox):
    """The slot's record stays busy while the device may be in use; the signal becomes the
    exit status once the test ends."""
    env = {"JAXCORE_ACCELERATOR_COUNT": "1", "JAXCORE_TESTS_PER_ACCELERATOR": "1"}
    wrapper = sandbox.hold("held", env)
    wrapper.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert wrapper.poll() is None, wrapper.stderr.read()
    sandbox.release.touch()
    assert wrapper.wait(timeout=30) == 128 + signal.SIGTERM
    _wait_ended(sandbox, "held")
    after = sandbox.run("after", env=dict(env, JAXCORE_ACCELERATOR_WAIT_S="0"))
    assert after.returncode == 0, after.stderr


@pytest.mark.skipif(not os.access("/usr/bin/python3", os.X_OK), reason="no /usr/bin/python3")
def test_runs_without_python3_on_path(sandbox):
    """The ci/ scripts call `--detect` with a PATH that has no python3."""
    (sandbox.root / "tools" / "python3").unlink()
    result = sandbox.run("t", env={"JAXCORE_ACCELERATOR_COUNT": "1"})
    assert result.returncode == 0, result.stderr
    detect = subprocess.run(
        [str(SCRIPT), "--detect"], env=sandbox.env, capture_output=True, text=True, timeout=30
    )
    assert detect.stdout == "generic 1 default\n", detect.stderr

"""Unit tests of build/accelerator_slots.py, the logic of build/parallel_accelerator_execute.sh.

The script's behavior end to end (many callers, fake accelerators, faults) is tested in
tests/parallel_accelerator_execute_test.py; these check the module's parts one by one against
references written out here.
"""

import contextlib
import fcntl
import importlib.util
import os
import pathlib
import signal
import stat
import subprocess
import sys
import threading
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location(
    "accelerator_slots", REPO / "build" / "accelerator_slots.py"
)
slots = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(slots)


def _error(code, function, *args):
    """The message of the slots.Exit that `function(*args)` raises, checking its code."""
    with pytest.raises(slots.Exit) as info:
        function(*args)
    assert info.value.code == code
    return str(info.value)


# --- settings


@pytest.mark.parametrize("text", ["1", "7", "0000000000000000000042", "256"])
def test_int_setting_accepts_decimal_integers_in_range(text):
    assert slots.int_setting("N", text, 256) == int(text, 10)


@pytest.mark.parametrize(
    "text", ["0", "257", "-1", "+3", "1e3", "3.0", " 3", "3\n", "٣", "", "9" * 20, "0x10"]
)
def test_int_setting_names_the_variable_value_and_range(text):
    message = _error(slots.EXIT_USAGE, slots.int_setting, "JAXCORE_X", text, 256)
    assert message == f"JAXCORE_X='{text}' is not a positive integer (at most 256)"


@pytest.mark.parametrize(
    "text,seconds", [("0", 0.0), ("3600", 3600.0), ("0010.50", 10.5), ("2.", 2.0), ("0.3", 0.3)]
)
def test_wait_setting_reads_seconds(text, seconds):
    assert slots.wait_setting(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["-5", "inf", "nan", "1.5.2", ".5", "1e3", "1000000000", ""])
def test_wait_setting_rejects_the_rest(text):
    message = _error(slots.EXIT_USAGE, slots.wait_setting, text)
    assert message.startswith(f"JAXCORE_ACCELERATOR_WAIT_S='{text}' is not a number of seconds")


def test_platform_setting():
    assert [slots.platform_setting(p) for p in ("", "cuda", "generic")] == ["", "cuda", "generic"]
    message = _error(slots.EXIT_USAGE, slots.platform_setting, "metal")
    assert message == "JAXCORE_ACCELERATOR_PLATFORM='metal' is not one of cuda, rocm, tpu, generic"


# --- scheduling policy


def test_pick_slot_spreads_free_slots_over_accelerators():
    free = (0, 0, 0)
    busy = (1, 0, 100)
    # Accelerator 0 runs two tests, 1 runs one, 2 none: a free slot on 2 wins.
    loads = [[busy, busy, free], [busy, free, free], [free, free, free]]
    assert slots.pick_slot(loads) == (2, 0)
    loads[2][0] = busy
    assert slots.pick_slot(loads) == (1, 1)  # 1 and 2 now tie: the lower index


def test_pick_slot_queues_behind_the_test_that_started_first():
    loads = [[(1, 0, 300), (1, 0, 200)], [(1, 0, 250), (1, 1, 100)]]
    assert slots.pick_slot(loads) == (0, 1)  # (1, 1) started first but has a caller queued


def test_pick_slot_against_a_brute_force_reference():
    import random

    rng = random.Random(0)
    for _ in range(500):
        count, per = rng.randint(1, 4), rng.randint(1, 3)
        loads = [
            [
                (b, rng.randint(0, 2), rng.randint(1, 9) if b else 0)
                for b in (rng.randint(0, 1) for _ in range(per))
            ]
            for _ in range(count)
        ]
        running = [sum(b + q for b, q, _ in acc) for acc in loads]
        candidates = [
            (b + q, running[d] if b + q == 0 else t, d, s)
            for d, acc in enumerate(loads)
            for s, (b, q, t) in enumerate(acc)
        ]
        _, _, d, s = min(candidates)
        assert slots.pick_slot(loads) == (d, s), loads


# --- device variables


@pytest.mark.parametrize("per", [1, 2, 3, 4, 7, 256])
def test_memory_fraction_is_nine_tenths_split_evenly_rounded_down(per):
    env = slots.device_env("cuda", 0, 0, per, {})
    whole, fraction = env["XLA_PYTHON_CLIENT_MEM_FRACTION"].split(".")
    assert len(fraction) == 3 and int(whole) * 1000 + int(fraction) == 900 // per
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"


def test_device_variables_per_platform():
    base = {"JAXCORE_ACCELERATOR_INDEX": "3", "JAXCORE_ACCELERATOR_SLOT": "1"}
    memory = {"XLA_PYTHON_CLIENT_PREALLOCATE": "1", "XLA_PYTHON_CLIENT_MEM_FRACTION": ".5"}
    tpu = {
        "TPU_VISIBLE_CHIPS": "3",
        "TPU_CHIPS_PER_PROCESS_BOUNDS": "1,1,1",
        "TPU_PROCESS_BOUNDS": "1,1,1",
        "ALLOW_MULTIPLE_LIBTPU_LOAD": "true",
    }
    got = {p: slots.device_env(p, 3, 1, 2, memory) for p in slots.PLATFORMS}
    assert got["cuda"] == dict(base, CUDA_VISIBLE_DEVICES="3")
    assert got["rocm"] == dict(
        base, ROCR_VISIBLE_DEVICES="3", HIP_VISIBLE_DEVICES="0", CUDA_VISIBLE_DEVICES="0"
    )
    assert got["tpu"] == dict(base, **tpu)
    assert got["generic"] == dict(base, **tpu, CUDA_VISIBLE_DEVICES="3", HIP_VISIBLE_DEVICES="3")


# --- detection


def _tool(directory, name, output):
    path = directory / name
    path.write_text("#!/bin/sh\ncat <<'EOF'\n" + output + "EOF\n")
    path.chmod(0o755)


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """Empty fake /dev and /sys, and a PATH with only a directory for fake tools."""
    for name in ("dev", "sys", "bin"):
        (tmp_path / name).mkdir()
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/bin:/usr/bin")
    return tmp_path


def _detect(machine, platform="", count=None):
    return slots.detect(platform, count, str(machine / "dev"), str(machine / "sys"))


def test_detect_counts_each_platform(machine):
    assert _detect(machine) == ("generic", 1, "default")
    for i in range(3):
        (machine / "dev" / f"accel{i}").touch()
    (machine / "dev" / "accelerator").touch()  # not a chip
    assert _detect(machine) == ("tpu", 3, "found")
    _tool(machine / "bin", "rocm-smi", "GPU[0]\t: a\nGPU[0]\t: b\nGPU[3]\t: a\n")
    assert _detect(machine) == ("rocm", 2, "found")
    _tool(machine / "bin", "nvidia-smi", "GPU 0: A (UUID: 0)\nGPU 1: A (UUID: 1)\nMIG 1g\n")
    assert _detect(machine) == ("cuda", 2, "found")
    assert _detect(machine, "tpu") == ("tpu", 3, "found")  # a set platform is the only one tried


def test_detect_with_a_count_only_decides_the_platform_without_running_tools(machine):
    (machine / "bin" / "nvidia-smi").write_text("#!/bin/sh\nexit 1\n")  # would count 0
    (machine / "bin" / "nvidia-smi").chmod(0o755)
    assert _detect(machine, count=5) == ("cuda", 5, "found")
    assert _detect(machine, "rocm", 5) == ("rocm", 5, "found")


def test_detect_amd_render_nodes_of_amd_only(machine):
    dev, sysfs = machine / "dev", machine / "sys"
    (dev / "dri").mkdir()
    for node, vendor in [("renderD128", "0x1002"), ("renderD129", "0x8086"), ("renderD130", None)]:
        (dev / "dri" / node).touch()
        if vendor:
            (sysfs / "class/drm" / node / "device").mkdir(parents=True)
            (sysfs / "class/drm" / node / "device/vendor").write_text(vendor + "\n")
    assert _detect(machine) == ("generic", 1, "default")  # no /dev/kfd: not counted
    (dev / "kfd").touch()
    assert _detect(machine) == ("rocm", 2, "found")  # no vendor file: counted


def test_detect_tpu_vfio_groups(machine):
    (machine / "dev" / "vfio").mkdir()
    for name in ("0", "12", "vfio", "x1"):
        (machine / "dev" / "vfio" / name).touch()
    assert _detect(machine) == ("tpu", 2, "found")


def test_cached_detect_reuses_a_fresh_matching_record(machine, monkeypatch):
    locks = machine / "locks"
    locks.mkdir(mode=0o700)
    calls = []
    real = slots.detect
    monkeypatch.setattr(slots, "detect", lambda *a: calls.append(a) or real(*a))
    args = (str(locks), "", str(machine / "dev"), str(machine / "sys"))
    assert slots.cached_detect(*args) == ("generic", 1, "default")
    (machine / "dev" / "accel0").touch()
    assert slots.cached_detect(*args) == ("generic", 1, "default")  # from the cache
    assert len(calls) == 1
    assert slots.cached_detect(args[0], "tpu", *args[2:]) == ("tpu", 1, "found")  # other key
    record = (locks / "detected").read_bytes()
    assert len(record) == 1024 and record.endswith(b"\n")
    # A stale or garbled record is detected again (and rewritten in place).
    when = int(time.time()) - slots.DETECT_CACHE_S
    (locks / "detected").write_text(f"generic 1 default {when} |{args[2]}|{args[3]}|x")
    monkeypatch.setenv("PATH", "x")
    assert slots.cached_detect(*args) == ("tpu", 1, "found")
    (locks / "detected").write_text("garbage")
    assert slots.cached_detect(*args) == ("tpu", 1, "found")
    assert len(calls) == 4


def test_cached_detect_never_follows_a_symlinked_record(machine):
    locks, victim = machine / "locks", machine / "victim"
    locks.mkdir(mode=0o700)
    victim.write_text("generic 9 found 99999999999 key\n")
    (locks / "detected").symlink_to(victim)
    got = slots.cached_detect(str(locks), "", str(machine / "dev"), str(machine / "sys"))
    assert got == ("generic", 1, "default")
    assert victim.read_text() == "generic 9 found 99999999999 key\n"


# --- the lock directory and its files


def test_lock_dir_is_created_0700_whatever_the_umask(tmp_path):
    old = os.umask(0o277)
    try:
        slots.prepare_lock_dir(str(tmp_path / "a" / "b" / "locks"))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.lstat(tmp_path / "a/b/locks").st_mode) == 0o700


@pytest.mark.parametrize(
    "mode,message",
    [
        (0o777, "is writable by group or others (mode 777)"),
        (0o720, "is writable by group or others (mode 720)"),
        (0o600, "is not readable, writable and searchable by its owner (mode 600)"),
    ],
)
def test_lock_dir_modes_are_checked(tmp_path, mode, message):
    locks = tmp_path / "locks"
    locks.mkdir()
    locks.chmod(mode)
    try:
        assert message in _error(slots.EXIT_LOCK_DIR, slots.prepare_lock_dir, str(locks))
    finally:
        locks.chmod(0o700)


def test_lock_dir_symlink_file_and_foreign_owner_are_refused(tmp_path):
    (tmp_path / "target").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "target")
    (tmp_path / "file").write_text("")
    error = lambda p: _error(slots.EXIT_LOCK_DIR, slots.prepare_lock_dir, str(p))  # noqa: E731
    assert "is a symbolic link; refusing to follow it" in error(tmp_path / "link")
    assert "is not a directory" in error(tmp_path / "file")
    assert "cannot create" in error(tmp_path / "file" / "locks")
    if os.geteuid() != 0:
        assert f"belongs to uid 0, not to you (uid {os.geteuid()})" in error("/")


def test_default_lock_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert slots.default_lock_dir() == str(tmp_path / "jaxcore_accelerator_locks")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "missing"))
    assert slots.default_lock_dir() == f"/tmp/jaxcore_accelerator_locks_{os.geteuid()}"


def test_lock_files_are_appended_never_truncated_nor_followed(tmp_path):
    path = tmp_path / "f.lock"
    path.write_bytes(b"kept\n")
    fd = slots.open_lock_file(str(path))
    os.write(fd, b"more\n")
    assert os.get_inheritable(fd) is False
    os.close(fd)
    assert path.read_bytes() == b"kept\nmore\n"
    (tmp_path / "link.lock").symlink_to(path)
    message = _error(slots.EXIT_LOCK_DIR, slots.open_lock_file, str(tmp_path / "link.lock"))
    assert message.endswith(
        "link.lock' in the lock directory is a symbolic link; refusing to follow it: remove it"
    )
    (tmp_path / "dir.lock").mkdir()
    message = _error(slots.EXIT_LOCK_DIR, slots.open_lock_file, str(tmp_path / "dir.lock"))
    assert message == f"cannot open the lock file '{tmp_path / 'dir.lock'}': Is a directory"
    assert path.read_bytes() == b"kept\nmore\n"


def test_flock_until_waits_at_most_until_the_deadline(tmp_path):
    path = str(tmp_path / "x.lock")
    holder = slots.open_lock_file(path)
    fcntl.flock(holder, fcntl.LOCK_EX)
    fd = slots.open_lock_file(path)  # its own open file description: the locks conflict
    before = signal.getsignal(signal.SIGALRM)
    start = time.monotonic()
    assert slots.flock_until(fd, start + 0.2) is False
    assert 0.19 <= time.monotonic() - start < 2
    assert slots.flock_until(fd, time.monotonic() - 1) is False
    assert signal.getsignal(signal.SIGALRM) is before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    threading.Timer(0.1, os.close, [holder]).start()  # released while it waits
    start = time.monotonic()
    assert slots.flock_until(fd, start + 10) is True
    assert time.monotonic() - start < 5
    os.close(fd)


# --- owner records, queue nodes, cleanup


def test_owner_record_round_trip_and_stale_records(tmp_path):
    table = slots.Slots(str(tmp_path), 1, 1)
    assert table.read_owner(0, 0) == (0, 0, 0)  # no record yet
    before = time.time_ns() // 1000
    table.write_owner(0, 0, 1, 7, os.getpid(), "//tests:a b")
    busy, place, since = table.read_owner(0, 0)
    assert (busy, place) == (1, 7) and before <= since <= time.time_ns() // 1000
    assert len((tmp_path / "accelerator_0_slot_0.owner").read_bytes()) == 256
    # A busy record of a dead wrapper is busy only while its lock is held.
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    table.write_owner(0, 0, 1, 8, int(dead.stdout), "t")
    assert table.read_owner(0, 0) == (0, 8, 0)
    lock = slots.open_lock_file(table.path(0, 0, "lock"))
    fcntl.flock(lock, fcntl.LOCK_EX)
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
        pass_fds=(lock,),
    )
    os.close(lock)  # only the child holds it now, like an orphaned test
    try:
        assert table.read_owner(0, 0)[:2] == (1, 8)
    finally:
        child.communicate("")
    assert table.read_owner(0, 0) == (0, 8, 0)
    (tmp_path / "accelerator_0_slot_0.owner").write_text("1 x 2 3 t\n")
    assert table.read_owner(0, 0) == (0, 0, 0)


def test_node_states(tmp_path):
    table = slots.Slots(str(tmp_path), 1, 1)
    node = tmp_path / "n"
    assert table.node_state(str(node)) == ("done", 0)
    node.write_text("pid=123\n")
    assert table.node_state(str(node)) == ("new", 123)
    node.write_text("pid=123\nqueued\n")
    assert table.node_state(str(node)) == ("queued", 123)
    node.write_text("pid=123\nqueued\ndone\n")
    assert table.node_state(str(node)) == ("done", 123)


def test_choose_takes_the_next_free_place_in_the_queue(tmp_path):
    table = slots.Slots(str(tmp_path), 1, 1)
    assert table.choose() == (0, 0, 1, 0, False)
    assert (tmp_path / "accelerator_0_slot_0.node.1").read_text() == f"pid={os.getpid()}\n"
    assert table.choose() == (0, 0, 2, 0, True)  # place 1 is queued ahead
    table.write_owner(0, 0, 0, 2, 0, "-")  # places up to 2 had their turn; the slot is free
    assert table.choose() == (0, 0, 3, 2, False)


def test_cleanup_deletes_old_nodes_every_64_places(tmp_path):
    table = slots.Slots(str(tmp_path), 1, 1)
    for n in range(1, 131):
        (tmp_path / f"accelerator_0_slot_0.node.{n}").touch()
    (tmp_path / "accelerator_1_slot_0.node.1").touch()
    table.cleanup(0, 0, 127)  # not a multiple of 64: nothing goes
    assert len(list(tmp_path.iterdir())) == 131
    table.cleanup(0, 0, 128)
    left = sorted(int(p.name.rsplit(".", 1)[1]) for p in tmp_path.glob("accelerator_0_*"))
    assert left == list(range(65, 131))
    assert (tmp_path / "accelerator_1_slot_0.node.1").exists()


# --- the test executable


def test_resolve_executable(tmp_path, monkeypatch):
    runfiles = tmp_path / "runfiles"
    target = runfiles / "ws" / "tests" / "t"
    target.parent.mkdir(parents=True)
    target.write_text("#!/bin/sh\n")
    target.chmod(0o755)
    env = {"TEST_SRCDIR": str(runfiles), "TEST_WORKSPACE": "ws"}
    assert slots.resolve_executable("./tests/t", env) == str(target)
    assert slots.resolve_executable("sh", {}) in ("/bin/sh", "/usr/bin/sh")
    manifest = tmp_path / "MANIFEST"
    manifest.write_text(f"ws/tests/t {target}\n")
    assert slots.resolve_executable(
        "tests/t", {"RUNFILES_MANIFEST_FILE": str(manifest), "TEST_WORKSPACE": "ws"}
    ) == str(target)
    target.chmod(0o644)
    message = _error(slots.EXIT_NOT_EXECUTABLE, slots.resolve_executable, "tests/t", env)
    assert message == f"test 'tests/t' was found at '{target}' but is not executable"
    message = _error(slots.EXIT_NOT_FOUND, slots.resolve_executable, "tests/none", env)
    assert message.startswith("test 'tests/none' not found")


def test_run_test_passes_only_the_slot_descriptor_and_the_exit_status(tmp_path):
    slot_fd = slots.open_lock_file(str(tmp_path / "s.lock"))
    other = slots.open_lock_file(str(tmp_path / "other.lock"))
    probe = f"import os, sys; sys.exit(40 + os.path.exists('/proc/self/fd/{slot_fd}') + 2 * os.path.exists('/proc/self/fd/{other}'))"
    with contextlib.ExitStack() as stack:
        stack.callback(os.close, slot_fd)
        stack.callback(os.close, other)
        assert slots.run_test(sys.executable, ["-c", probe], dict(os.environ), slot_fd) == 41
        kill = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
        assert slots.run_test(sys.executable, ["-c", kill], dict(os.environ), slot_fd) == 137


def test_run_test_restores_default_signal_actions_and_runs_scripts_without_shebang(tmp_path):
    """Python ignores SIGPIPE and SIGXFSZ; the test must not inherit that."""
    slot_fd = slots.open_lock_file(str(tmp_path / "s.lock"))
    script = tmp_path / "no_shebang"
    script.write_text("exit 7\n")
    script.chmod(0o755)
    status = tmp_path / "status"
    try:
        shell = f"grep SigIgn /proc/self/status > {status}"
        assert slots.run_test("/bin/sh", ["-c", shell], dict(os.environ), slot_fd) == 0
        ignored = int(status.read_text().split()[1], 16)
        assert not ignored & (1 << (signal.SIGPIPE - 1) | 1 << (signal.SIGXFSZ - 1))
        assert slots.run_test(str(script), [], dict(os.environ), slot_fd) == 7
    finally:
        os.close(slot_fd)

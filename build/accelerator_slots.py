"""The logic of build/parallel_accelerator_execute.sh: runs one test on one accelerator slot.

The shell script finds a Python and calls this module's `cli` (stdlib only, Python >= 3.9)
with the test's command line; `--detect` prints "<platform> <count> <source>" instead. Settings,
exit statuses and files are documented in the script's header.

How a slot is taken (balanced, first come first served per slot, no scheduler process):
  * `Slots.choose` reads every slot's owner record and queue and joins the least-loaded slot
    (`pick_slot`): a free slot on the accelerator running the fewest tests, else the busy
    slot whose test started first. Its place in that slot's queue is a node file made with
    O_EXCL, so two callers never share a place; one that loses the race looks again.
  * A waiting caller locks its own node and blocks (flock) on the node of the caller just
    ahead of it, then on the slot's lock, so the kernel hands a slot over the moment it is
    released. A waiter that dies or gives up leaves its node unlocked, and the one behind it
    waits on the one before it instead. Only the slot lock bounds the tests per accelerator.
  * The test inherits the locked slot descriptor (and no other lock-directory file), so the
    slot stays locked as long as any process of the job lives: a SIGKILLed wrapper does not
    free it while its test runs. The kernel drops the lock when the last holder exits, so no
    stale lock survives a crash; a busy owner record whose wrapper is gone counts as busy only
    while its lock is still held.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import signal
import stat
import sys
import time

PROG = "parallel_accelerator_execute.sh"
EXIT_USAGE, EXIT_LOCK_DIR, EXIT_WAIT_TIMEOUT = 2, 73, 75
EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND = 126, 127
PLATFORMS = ("cuda", "rocm", "tpu", "generic")
NODE_CLEANUP_EVERY = 64  # old queue nodes go when a place is a multiple of this
OWNER_RECORD_BYTES = 256
DETECT_CACHE_S = 300


class Exit(Exception):
    """A one-line error for stderr and the exit status that goes with it."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


# --- Settings ------------------------------------------------------------------------------


def int_setting(name: str, value: str, most: int) -> int:
    """Parses setting `name` as an integer from 1 to `most` (leading zeros allowed).

    Raises:
      Exit: (usage) naming the variable, its value and the allowed range.
    """
    match = re.fullmatch(r"0*([0-9]{1,9})", value)
    if not match or not 1 <= int(match.group(1)) <= most:
        raise Exit(EXIT_USAGE, f"{name}='{value}' is not a positive integer (at most {most})")
    return int(match.group(1))


def wait_setting(value: str) -> float:
    """Parses JAXCORE_ACCELERATOR_WAIT_S: seconds from 0 to 999999999, decimals allowed."""
    match = re.fullmatch(r"0*([0-9]{1,9})(\.[0-9]*)?", value)
    if not match:
        raise Exit(
            EXIT_USAGE,
            f"JAXCORE_ACCELERATOR_WAIT_S='{value}' is not a number of seconds from 0 to 999999999",
        )
    return int(match.group(1)) + float("0" + (match.group(2) or ".0"))


def platform_setting(value: str) -> str:
    """Checks JAXCORE_ACCELERATOR_PLATFORM ("" means: detect)."""
    if value and value not in PLATFORMS:
        raise Exit(
            EXIT_USAGE,
            f"JAXCORE_ACCELERATOR_PLATFORM='{value}' is not one of {', '.join(PLATFORMS)}",
        )
    return value


# --- Accelerator detection -----------------------------------------------------------------


def _which(tool: str) -> str | None:
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        path = os.path.join(directory or ".", tool)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _tool_lines(tool: str, *args: str) -> list[str]:
    """The output lines of `tool args` ([] when it is missing or fails to start)."""
    path = _which(tool)
    if path is None:
        return []
    import subprocess  # only here: it costs a few ms to import

    try:
        run = subprocess.run([path, *args], capture_output=True, text=True, errors="replace")
    except OSError:
        return []
    return run.stdout.splitlines()


def count_cuda() -> int:
    """NVIDIA GPUs listed by `nvidia-smi -L`."""
    return sum(bool(re.match(r"GPU [0-9]", line)) for line in _tool_lines("nvidia-smi", "-L"))


def count_rocm(dev: str, sysfs: str) -> int:
    """AMD GPUs: distinct GPU[i] of `rocm-smi --showid`, else AMD render nodes (PCI vendor
    0x1002, so another vendor's integrated GPU is not counted) when <dev>/kfd exists."""
    ids = {
        m.group(1)
        for m in map(re.compile(r"GPU\[([0-9]+)\]").match, _tool_lines("rocm-smi", "--showid"))
        if m
    }
    if ids or not os.path.exists(os.path.join(dev, "kfd")):
        return len(ids)
    count = 0
    for node in _listdir(os.path.join(dev, "dri")):
        if node.startswith("renderD"):
            try:
                with open(os.path.join(sysfs, "class", "drm", node, "device", "vendor")) as f:
                    vendor = f.readline().strip()
            except OSError:
                vendor = ""
            count += vendor in ("", "0x1002")
    return count


def count_tpu(dev: str) -> int:
    """TPU chips: <dev>/accel<N> (TPU v2-v4), else <dev>/vfio/<N> IOMMU groups (v5e+)."""
    accel = sum(n[:5] == "accel" and n[5:].isascii() and n[5:].isdigit() for n in _listdir(dev))
    return accel or sum(n.isascii() and n.isdigit() for n in _listdir(os.path.join(dev, "vfio")))


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def detect(platform: str, count: int | None, dev: str, sysfs: str) -> tuple[str, int, str]:
    """(platform, count, "found" | "default") from the settings and what the machine has.

    A set platform restricts detection to it; a set count is never re-counted (a platform
    then is decided from the tools and device nodes present, without running any tool).
    """
    order = [platform] if platform and platform != "generic" else ["cuda", "rocm", "tpu"]
    if not platform or count is None:
        present = {
            "cuda": lambda: _which("nvidia-smi") or os.path.exists(os.path.join(dev, "nvidiactl")),
            "rocm": lambda: _which("rocm-smi") or os.path.exists(os.path.join(dev, "kfd")),
            "tpu": lambda: count_tpu(dev) > 0,
        }
        counters = {
            "cuda": count_cuda,
            "rocm": lambda: count_rocm(dev, sysfs),
            "tpu": lambda: count_tpu(dev),
        }
        for candidate in order:
            if count is not None:
                if present[candidate]():
                    platform = candidate
                    break
                continue
            found = counters[candidate]()
            if found > 0:
                platform, count = platform or candidate, found
                break
    if count is None:
        return platform or "generic", 1, "default"
    return platform or "generic", count, "found"


def cached_detect(lock_dir: str, platform: str, dev: str, sysfs: str) -> tuple[str, int, str]:
    """`detect` with no count set, reusing for DETECT_CACHE_S seconds what an earlier run with
    the same settings found (file `detected`), so a suite does not run `nvidia-smi` per test."""
    path = os.path.join(lock_dir, "detected")
    key = f"{platform}|{dev}|{sysfs}|{os.environ.get('PATH', '')}"
    now = int(time.time())
    fields = _read_record(path, 1024).split(" ", 4)
    if len(fields) == 5 and fields[4].rstrip() == key:
        cached, count, source, when = fields[:4]
        fresh = re.fullmatch(r"[0-9]{1,12}", when) and 0 <= now - int(when) < DETECT_CACHE_S
        if fresh and re.fullmatch(r"[1-9][0-9]{0,3}", count):
            return cached, int(count), source
    found = detect(platform, None, dev, sysfs)
    try:
        _write_record(path, 1024, f"{found[0]} {found[1]} {found[2]} {now} {key}")
    except (OSError, Exit):
        return found  # a cache that cannot be written only costs the next run a detection
    return found


# --- The lock directory and its files --------------------------------------------------------


def default_lock_dir() -> str:
    """$XDG_RUNTIME_DIR/jaxcore_accelerator_locks when that is the caller's, else /tmp/...<uid>."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    try:
        if (
            runtime
            and stat.S_ISDIR(os.stat(runtime).st_mode)
            and os.stat(runtime).st_uid == os.geteuid()
        ):
            return os.path.join(runtime, "jaxcore_accelerator_locks")
    except OSError:
        pass
    return f"/tmp/jaxcore_accelerator_locks_{os.geteuid()}"


def prepare_lock_dir(path: str) -> None:
    """Creates `path` 0700 if missing; refuses it unless nobody but the caller can tamper with
    it: a real directory (not a symlink), owned by the caller, rwx for the owner and not
    writable by group or others. One lstat reads type, owner and mode together; a directory
    that passes cannot be replaced by another user (in /tmp the sticky bit sees to that).

    Raises:
      Exit: (lock dir) naming the directory, the problem and the fix.
    """
    fix = "choose another directory with JAXCORE_LOCK_DIR"
    where = f"the lock directory '{path}' (JAXCORE_LOCK_DIR)"
    if not os.path.lexists(path):
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            os.mkdir(path, 0o700)
            os.chmod(path, 0o700)  # whatever the umask
        except OSError as e:
            if e.errno == errno.EEXIST and os.path.lexists(path):
                pass  # made by a concurrent run a moment ago: checked below like any other
            else:
                raise Exit(EXIT_LOCK_DIR, f"cannot create {where}: {e.strerror}; {fix}") from None
    try:
        info = os.lstat(path)
    except OSError as e:
        raise Exit(EXIT_LOCK_DIR, f"cannot inspect {where}: {e.strerror}") from None
    mode, uid = stat.S_IMODE(info.st_mode), os.geteuid()
    if stat.S_ISLNK(info.st_mode):
        raise Exit(
            EXIT_LOCK_DIR,
            f"{where} is a symbolic link; refusing to follow it (someone else may have planted "
            f"it): remove it or {fix}",
        )
    if not stat.S_ISDIR(info.st_mode):
        raise Exit(EXIT_LOCK_DIR, f"{where} is not a directory; {fix}")
    if info.st_uid != uid:
        raise Exit(
            EXIT_LOCK_DIR,
            f"{where} belongs to uid {info.st_uid}, not to you (uid {uid}); refusing to use it: "
            f"{fix}",
        )
    if mode & 0o022:
        raise Exit(
            EXIT_LOCK_DIR,
            f"{where} is writable by group or others (mode {mode:o}); refusing to use it: run "
            f"chmod 700 '{path}' or {fix}",
        )
    if mode & 0o700 != 0o700:
        raise Exit(
            EXIT_LOCK_DIR,
            f"{where} is not readable, writable and searchable by its owner (mode {mode:o}): run "
            f"chmod 700 '{path}' or {fix}",
        )


def open_lock_file(path: str, flags: int = os.O_APPEND) -> int:
    """Opens lock-directory file `path` for writing (created if missing, never truncated,
    never through a symbolic link; appending unless `flags` say otherwise); the descriptor is
    not inherited by the test.

    Raises:
      Exit: (lock dir) naming the file and the reason.
    """
    if os.path.islink(path):
        raise Exit(
            EXIT_LOCK_DIR,
            f"'{path}' in the lock directory is a symbolic link; refusing to follow it: remove it",
        )
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | flags, 0o600)
    except OSError as e:
        if e.errno == errno.EEXIST and flags & os.O_EXCL:
            raise
        raise Exit(EXIT_LOCK_DIR, f"cannot open the lock file '{path}': {e.strerror}") from None


def _read_record(path: str, size: int) -> str:
    """The text of lock-directory file `path` ("" if missing, unreadable or a symlink)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return ""
    try:
        return os.read(fd, size).decode(errors="replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def _write_record(path: str, size: int, text: str) -> None:
    """Overwrites `path` in place with `text` padded to `size` bytes, in one write and without
    O_TRUNC (which would make ext4 flush the file on close, costing milliseconds)."""
    fd = open_lock_file(path, 0)
    try:
        os.write(fd, text.encode()[: size - 1].ljust(size - 1) + b"\n")
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # someone else's process: it exists
    return True


def _lock_is_held(path: str) -> bool:
    """Whether some process holds the lock of lock file `path` (it is not tried for long)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def flock_until(fd: int, deadline: float) -> bool:
    """Locks `fd` exclusively, waiting until time.monotonic() `deadline`; False if it did not."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        pass
    left = deadline - time.monotonic()
    if left <= 0:
        return False
    armed = [True]

    def on_alarm(signum, frame):
        if armed[0]:
            raise TimeoutError

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, left)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        armed[0] = False
    except TimeoutError:
        pass
    armed[0] = False
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)
    try:  # succeeds at once if the lock is already ours (also when the alarm came late)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


# --- Scheduling ----------------------------------------------------------------------------


def pick_slot(loads: list[list[tuple[int, int, int]]]) -> tuple[int, int]:
    """The (accelerator, slot) to queue on.

    Args:
      loads: per accelerator, per slot, (busy 0/1, callers queued, start time of its test in
        microseconds, 0 when free).

    Returns:
      The least-loaded slot; among equals, a free slot on the accelerator running the fewest
      tests, or the busy slot whose test started first; then the lowest index.
    """
    per_accelerator = [sum(b + q for b, q, _ in slots) for slots in loads]
    best, best_key = (0, 0), None
    for d, slots in enumerate(loads):
        for s, (busy, queued, since) in enumerate(slots):
            load = busy + queued
            key = (load, per_accelerator[d] if load == 0 else since)
            if best_key is None or key < best_key:
                best, best_key = (d, s), key
    return best


class Slots:
    """The slots of `count` accelerators x `per` tests, kept in lock directory `lock_dir`."""

    def __init__(self, lock_dir: str, count: int, per: int):
        self.lock_dir, self.count, self.per = lock_dir, count, per

    def path(self, d: int, s: int, suffix: str) -> str:
        return os.path.join(self.lock_dir, f"accelerator_{d}_slot_{s}.{suffix}")

    def read_owner(self, d: int, s: int) -> tuple[int, int, int]:
        """(busy, place, since_us) of slot (d, s)'s owner record ("0 0 0" when there is none).
        A busy record whose wrapper is gone is busy only while its test still holds the lock."""
        for _ in range(2):  # an empty read happened during a rewrite: look once more
            text = _read_record(self.path(d, s, "owner"), OWNER_RECORD_BYTES)
            if text.strip():
                break
        match = re.match(r"([0-9]{1,15}) ([0-9]{1,15}) ([0-9]{1,20}) ([0-9]{1,10}) ", text)
        if not match:
            return 0, 0, 0
        busy, place, since, pid = (int(g) for g in match.groups())
        if busy and not _alive(pid) and not _lock_is_held(self.path(d, s, "lock")):
            busy = 0
        return int(busy != 0), place, since if busy else 0

    def write_owner(self, d: int, s: int, busy: int, place: int, pid: int, test: str) -> None:
        """Rewrites slot (d, s)'s owner record: "<busy> <place> <since_us> <pid> <test>"."""
        record = f"{busy} {place} {time.time_ns() // 1000} {pid} {test}"
        _write_record(self.path(d, s, "owner"), OWNER_RECORD_BYTES, record)

    def node_state(self, path: str) -> tuple[str, int]:
        """(state, pid) of queue node `path`: "done" (had its turn, or is gone), "queued" (its
        caller holds the node's lock while it waits, or gave up) or "new" (its caller is about
        to take the slot or to lock the node)."""
        if not os.path.lexists(path):
            return "done", 0
        lines = _read_record(path, 4096).split()
        pid = next((int(x[4:]) for x in lines if re.fullmatch(r"pid=[0-9]{1,10}", x)), 0)
        state = "done" if "done" in lines else "queued" if "queued" in lines else "new"
        return state, pid

    def choose(self) -> tuple[int, int, int, int, bool]:
        """Joins the queue of the slot `pick_slot` chooses. Returns (accelerator, slot, this
        caller's place, the place of the slot's last owner, whether it must wait)."""
        while True:
            loads, seqs = [], {}
            for d in range(self.count):
                loads.append([])
                for s in range(self.per):
                    busy, place, since = self.read_owner(d, s)
                    n = place + 1  # callers queued: the places after the owner's
                    while os.path.lexists(self.path(d, s, f"node.{n}")):
                        n += 1
                    loads[d].append((busy, n - 1 - place, since))
                    seqs[d, s] = place
            d, s = pick_slot(loads)
            busy, queued, _ = loads[d][s]
            place = seqs[d, s] + queued + 1
            node = self.path(d, s, f"node.{place}")
            try:
                fd = open_lock_file(node, os.O_EXCL | os.O_APPEND)
            except FileExistsError:
                continue  # another caller took that place a moment ago: look again
            os.write(fd, f"pid={os.getpid()}\n".encode())
            os.close(fd)
            return d, s, place, seqs[d, s], busy + queued > 0

    def acquire(self, deadline: float, test: str) -> tuple[int, int, int, int] | None:
        """Waits for a slot; (accelerator, slot, place, locked slot fd), or None at `deadline`."""
        d, s, place, last_owner, must_wait = self.choose()
        node = self.path(d, s, f"node.{place}")
        node_fd = None
        if must_wait:  # callers queued behind this one wait on this node: none can overtake it
            node_fd = open_lock_file(node)
            try:
                fcntl.flock(node_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.write(node_fd, b"queued\n")
            except BlockingIOError:
                os.close(node_fd)
                node_fd = None
        try:
            # Wait until every caller queued ahead has taken the slot (or given up / died).
            for ahead in range(place - 1, last_owner, -1):
                path = self.path(d, s, f"node.{ahead}")
                state, pid = self.node_state(path)
                if state == "done":
                    break
                if state == "queued":
                    fd = open_lock_file(path)
                    try:
                        if not flock_until(fd, deadline):
                            return None
                    finally:
                        os.close(fd)
                    if self.node_state(path)[0] == "done":
                        break
                elif _alive(pid):
                    break  # made a moment ago by a live caller: both now contend for the slot
                # Its caller died or gave up before its turn: wait for the one before it.
            slot_fd = open_lock_file(self.path(d, s, "lock"))
            if not flock_until(slot_fd, deadline):
                os.close(slot_fd)
                return None
            self.write_owner(d, s, 1, place, os.getpid(), test)
            fd = node_fd if node_fd is not None else open_lock_file(node)
            os.write(fd, b"done\n")
            if node_fd is None:
                os.close(fd)
        finally:
            if node_fd is not None:
                os.close(node_fd)
        return d, s, place, slot_fd

    def cleanup(self, d: int, s: int, place: int) -> None:
        """Deletes slot (d, s)'s old queue nodes once every NODE_CLEANUP_EVERY places: every
        place before this caller's has had its turn, so nobody reads those any more."""
        if place % NODE_CLEANUP_EVERY:
            return
        prefix = f"accelerator_{d}_slot_{s}.node."
        for name in _listdir(self.lock_dir):
            n = name[len(prefix) :]
            old = re.fullmatch(r"[0-9]{1,15}", n) and int(n) <= place - NODE_CLEANUP_EVERY
            if name.startswith(prefix) and old:
                try:
                    os.unlink(os.path.join(self.lock_dir, name))
                except OSError:
                    continue  # deleted by another caller


# --- The test ------------------------------------------------------------------------------


def resolve_executable(command: str, environ) -> str:
    """The executable for `command`: as given (path, or on PATH), else in the runfiles tree
    (RUNFILES_DIR, TEST_SRCDIR, with or without TEST_WORKSPACE) or manifest, as Bazel does.

    Raises:
      Exit: 126 when found but not executable, 127 when not found.
    """
    cmd, ws = command.removeprefix("./"), environ.get("TEST_WORKSPACE", "")
    candidates = []
    if "/" not in command:
        found = _which(command)
        if found:
            return found
    else:
        candidates.append(command)
    for base in (environ.get("RUNFILES_DIR", ""), environ.get("TEST_SRCDIR", "")):
        if base:
            candidates += [f"{base}/{ws}/{cmd}"] if ws else []
            candidates.append(f"{base}/{cmd}")
    for candidate in candidates:
        if os.path.isfile(candidate):
            if not os.access(candidate, os.X_OK):
                raise Exit(
                    EXIT_NOT_EXECUTABLE,
                    f"test '{command}' was found at '{candidate}' but is not executable",
                )
            return candidate
    manifest = environ.get("RUNFILES_MANIFEST_FILE", "")
    if manifest and os.path.isfile(manifest):
        with open(manifest, errors="replace") as f:
            for line in f:
                key, _, path = line.rstrip("\n").partition(" ")
                if (key == cmd or (ws and key == f"{ws}/{cmd}")) and os.access(path, os.X_OK):
                    return path
    raise Exit(
        EXIT_NOT_FOUND,
        f"test '{command}' not found (looked at the path itself, on PATH and in the runfiles: "
        f"RUNFILES_DIR='{environ.get('RUNFILES_DIR', '')}', "
        f"TEST_SRCDIR='{environ.get('TEST_SRCDIR', '')}', RUNFILES_MANIFEST_FILE='{manifest}')",
    )


def device_env(platform: str, device: int, slot: int, per: int, environ) -> dict[str, str]:
    """The variables restricting a test to accelerator `device`, with 0.9 of its memory split
    evenly over its `per` slots (memory settings already in `environ` are kept)."""
    d = str(device)
    env: dict[str, str] = {}
    if platform == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = d
    elif platform == "rocm":
        # ROCR filters at the lowest layer; HIP (and its CUDA alias) then number the devices
        # ROCR left visible, where the chosen one is 0.
        env.update(ROCR_VISIBLE_DEVICES=d, HIP_VISIBLE_DEVICES="0", CUDA_VISIBLE_DEVICES="0")
    else:  # tpu, or generic: every runtime's variable, all indexing the full device list
        if platform == "generic":
            env.update(CUDA_VISIBLE_DEVICES=d, HIP_VISIBLE_DEVICES=d)
        env.update(
            TPU_VISIBLE_CHIPS=d,
            TPU_CHIPS_PER_PROCESS_BOUNDS="1,1,1",
            TPU_PROCESS_BOUNDS="1,1,1",
            ALLOW_MULTIPLE_LIBTPU_LOAD="true",
        )
    env.update(JAXCORE_ACCELERATOR_INDEX=d, JAXCORE_ACCELERATOR_SLOT=str(slot))
    if "XLA_PYTHON_CLIENT_PREALLOCATE" not in environ:
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    if "XLA_PYTHON_CLIENT_MEM_FRACTION" not in environ:
        thousandths = 900 // per
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{thousandths // 1000}.{thousandths % 1000:03d}"
    return env


def log_line(test: str, device: str, slot: str, wait_s: float, run_s: float, code: int) -> None:
    """Appends one tab-separated line about this test to JAXCORE_ACCELERATOR_LOG, if set."""
    log = os.environ.get("JAXCORE_ACCELERATOR_LOG", "")
    if not log:
        return
    line = (
        f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')}\ttest={test}\tdevice={device}\tslot={slot}"
        f"\twait_s={wait_s:.3f}\trun_s={run_s:.3f}\texit={code}\n"
    )
    try:
        with open(log, "a") as f:
            f.write(line)
    except OSError:
        print(f"{PROG}: warning: cannot append to JAXCORE_ACCELERATOR_LOG={log}", file=sys.stderr)


def run_test(exe: str, args: list[str], env: dict[str, str], slot_fd: int) -> int:
    """Runs the test, which inherits the locked `slot_fd`; returns its exit status (128 + N
    when killed by signal N). SIGTERM/SIGINT/SIGHUP to the wrapper alone wait for the test to
    end and then become the status when the test itself exited 0."""
    caught = []
    previous = {}
    for signum, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)):
        previous[signum] = signal.signal(signum, lambda *_, code=code: caught.append(code))
    try:
        return _spawn_and_wait(exe, args, env, slot_fd, caught)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _spawn_and_wait(exe: str, args: list[str], env: dict[str, str], slot_fd: int, caught) -> int:
    """`run_test` with the signal handlers in place (`caught`: the statuses they recorded)."""
    os.set_inheritable(slot_fd, True)
    # Python ignores SIGPIPE and SIGXFSZ; the test gets the default actions back.
    default = (signal.SIGPIPE, signal.SIGXFSZ)
    try:
        try:
            pid = os.posix_spawn(exe, [exe, *args], env, setsigdef=default)
        except OSError as e:
            if e.errno != errno.ENOEXEC:
                raise
            # No #! line: run it with sh, as bash and execvp do.
            pid = os.posix_spawn("/bin/sh", ["/bin/sh", exe, *args], env, setsigdef=default)
    except OSError as e:
        code = EXIT_NOT_FOUND if e.errno == errno.ENOENT else EXIT_NOT_EXECUTABLE
        raise Exit(code, f"cannot execute the test '{exe}': {e.strerror}") from None
    _, status = os.waitpid(pid, 0)  # retried after a handled signal (PEP 475)
    code = os.waitstatus_to_exitcode(status)
    code = 128 - code if code < 0 else code
    return caught[0] if caught and code == 0 else code


def main(argv: list[str]) -> int:
    """Runs `argv` (the test and its arguments) on a slot, or handles `--detect`."""
    if not argv:
        raise Exit(EXIT_USAGE, f"no test given; usage: {PROG} <test executable> [args...]")
    environ = os.environ
    per = int_setting(
        "JAXCORE_TESTS_PER_ACCELERATOR", environ.get("JAXCORE_TESTS_PER_ACCELERATOR", "4"), 256
    )
    wait_text = environ.get("JAXCORE_ACCELERATOR_WAIT_S", "3600")
    wait_s = wait_setting(wait_text)
    platform = platform_setting(environ.get("JAXCORE_ACCELERATOR_PLATFORM", ""))
    count_text = environ.get("JAXCORE_ACCELERATOR_COUNT", "")
    count = int_setting("JAXCORE_ACCELERATOR_COUNT", count_text, 1024) if count_text else None
    dev = environ.get("JAXCORE_ACCELERATOR_DEV_DIR") or "/dev"
    sysfs = environ.get("JAXCORE_ACCELERATOR_SYSFS_DIR") or "/sys"
    if argv[0] == "--detect":  # for the ci/ scripts: what detection finds, running nothing
        platform, count_found, source = detect(platform, count, dev, sysfs)
        origin = "env" if count is not None else "default" if source == "default" else "detected"
        print(f"{platform} {count_found} {origin}")
        return 0
    lock_dir = environ.get("JAXCORE_LOCK_DIR") or default_lock_dir()
    prepare_lock_dir(lock_dir)
    if count is None:
        platform, count, _ = cached_detect(lock_dir, platform, dev, sysfs)
    else:
        platform = detect(platform, count, dev, sysfs)[0]
    exe = resolve_executable(argv[0], environ)
    test = environ.get("TEST_TARGET") or exe
    slots = Slots(lock_dir, count, per)
    start = time.monotonic()
    got = slots.acquire(start + wait_s, test)
    if got is None:
        log_line(test, "-", "-", time.monotonic() - start, 0, EXIT_WAIT_TIMEOUT)
        raise Exit(
            EXIT_WAIT_TIMEOUT,
            f"no free accelerator slot for '{test}' within JAXCORE_ACCELERATOR_WAIT_S="
            f"{wait_text}s ({count} accelerators x {per} slots stayed busy, locks in "
            f"'{lock_dir}'); raise JAXCORE_ACCELERATOR_WAIT_S or lower --local_test_jobs / "
            "pytest -n",
        )
    d, s, place, slot_fd = got
    started = time.monotonic()
    env = dict(environ, **device_env(platform, d, s, per, environ))
    try:
        code = run_test(exe, argv[1:], env, slot_fd)
    finally:  # the record says free (keeping its last place), then the lock goes
        slots.write_owner(d, s, 0, place, 0, "-")
        os.close(slot_fd)
    log_line(test, str(d), str(s), started - start, time.monotonic() - started, code)
    slots.cleanup(d, s, place)
    return code


def cli(argv: list[str]) -> None:
    """Runs `main`, turning an `Exit` into its one-line message and exit status."""
    if sys.version_info < (3, 9):  # noqa: UP036 - the system Python may predate the repo's 3.11
        version = sys.version.split()[0]
        print(
            f"{PROG}: error: Python >= 3.9 is needed, {sys.executable} is {version}",
            file=sys.stderr,
        )
        sys.exit(EXIT_USAGE)
    try:
        sys.exit(main(argv))
    except Exit as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        sys.exit(e.code)


if __name__ == "__main__":
    cli(sys.argv[1:])

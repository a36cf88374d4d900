"""What every part of build.py shares: the repository root, its errors and how it runs programs.

The other private modules of build/ import this one and nothing else of build/ unless they
need it; it imports nothing of build/, so there is no import cycle.
"""

import os
import shlex
import signal
import subprocess
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# Seconds a quick question to a program (`python -c ...`, `bazel --version`, `gcc --version`)
# may take before build.py gives up on it: a hung interpreter or wrapper must not hang the build.
PROBE_TIMEOUT_S = 60
# Seconds `import jax` may take in a probe (the first import after an install compiles bytecode).
IMPORT_TIMEOUT_S = 600


class BuildError(Exception):
    """A problem the user can fix; the message says what and how (exit status 1)."""


class UsageError(BuildError):
    """A bad command-line option; the message names the flag (exit status 2, as argparse's)."""


def log(msg):
    """Prints one progress line, prefixed like every other line build.py prints."""
    print(f"build.py: {msg}", flush=True)


def fmt(cmd):
    """Returns `cmd` as one shell-quoted line, for logs and dry runs."""
    return " ".join(shlex.quote(str(c)) for c in cmd)


def dotted(version):
    """Returns a version tuple as text: (3, 13) -> "3.13"."""
    return ".".join(map(str, version))


def pip_install_command(python, lock):
    """The command that installs the hash-locked requirements file `lock` for `python`."""
    return [
        str(python),
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--require-hashes",
        "-r",
        str(lock),
    ]


def run(cmd, *, verbose, env=None, check=True, capture=False, cwd=REPO_ROOT):
    """Runs a long-lived command (Bazel, pip, a CI job), without a time limit.

    Args:
      cmd: the program and its arguments.
      verbose: whether to log the command first.
      env: the environment (default: this process's).
      check: whether a non-zero exit status is a BuildError.
      capture: whether to capture stdout and stderr (as text) instead of passing them through.
      cwd: the working directory (default: the repository root).

    Returns:
      The subprocess.CompletedProcess.
    """
    if verbose:
        log(f"running: {fmt(cmd)}")
    try:
        result = subprocess.run(
            [str(c) for c in cmd],
            cwd=cwd,
            env=env,
            text=True,
            stdout=subprocess.PIPE if capture else None,
            stderr=subprocess.PIPE if capture else None,
        )
    except FileNotFoundError as e:
        raise BuildError(f"cannot run {cmd[0]}: {e.strerror}") from None
    if check and result.returncode != 0:
        detail = f"\n{result.stderr.strip()}" if capture and result.stderr else ""
        raise BuildError(f"command failed with exit code {result.returncode}: {fmt(cmd)}{detail}")
    return result


def probe(cmd, *, what, timeout=None, cwd=REPO_ROOT):
    """Runs a quick question to a program and returns its CompletedProcess (output captured).

    The program runs in a session of its own, and on timeout the whole session is killed: a
    wrapper script whose child hangs (a pyenv shim, a `sh` that execs nothing) would otherwise
    keep the output pipes open and the wait endless.

    Args:
      cmd: the program and its arguments.
      what: what the program is asked, for the timeout message ("for its version").
      timeout: seconds to wait (default: PROBE_TIMEOUT_S, read at call time).
      cwd: the working directory.

    Returns:
      The subprocess.CompletedProcess, with text stdout and stderr.

    Raises:
      BuildError: the program cannot be started, or did not finish within `timeout` seconds.
    """
    timeout = PROBE_TIMEOUT_S if timeout is None else timeout
    cmd = [str(c) for c in cmd]
    try:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    except OSError as e:
        raise BuildError(f"cannot run {cmd[0]}: {e.strerror}") from None
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_session(proc)
        raise BuildError(
            f"{cmd[0]} did not answer within {timeout:g} s when asked {what}; it hangs"
        ) from None
    except BaseException:
        _kill_session(proc)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def _kill_session(proc):
    """Kills `proc` and everything it started in its session, and reaps it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    for pipe in (proc.stdout, proc.stderr):
        if pipe:
            pipe.close()
    proc.wait()


def write_atomically(path, text):
    """Replaces `path` in one step, so readers never see a half-written file.

    Raises:
      BuildError: the directory cannot be written; nothing is left behind.
    """
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise BuildError(f"cannot write {path}: {e.strerror}") from None
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise BuildError(f"cannot write {path}: {e.strerror}") from None
        raise

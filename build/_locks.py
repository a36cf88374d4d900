"""Python interpreters and their hash-locked test requirements: which lock, which venv.

Finds and checks interpreters (--python_bin_path, --python_version), picks the lock file of an
interpreter's Python version, and creates the managed venv with that lock installed.
"""

import hashlib
import json
import os
import re
import shutil
import sys
from pathlib import Path

from _apt import apt_install
from _common import (
    REPO_ROOT,
    BuildError,
    UsageError,
    dotted,
    fmt,
    log,
    pip_install_command,
    probe,
    run,
)
from _wheels import in_jax_range, jax_range

# The hash-locked test requirements, one per end of the tested JAX range
# (jaxcore/_jax_internals.py), by the Python version each was locked for: the oldest end
# (jax 0.10.2) for Python 3.11, the newest (jax 0.12.0.1) for Python 3.13. An interpreter
# without a lock of its own installs the next newer one's (3.12 and later: the 3.13 lock).
LOCK_FILES = {
    (3, 11): REPO_ROOT / "build" / "requirements_lock.txt",
    (3, 13): REPO_ROOT / "build" / "requirements_lock_3_13.txt",
}
# The default interpreter's lock (the oldest end); Docker images install this one.
LOCK_FILE = LOCK_FILES[(3, 11)]
# Packages the test suite imports, by distribution name; jax and jaxlib must have the
# versions the interpreter's lock file pins (see locked_versions).
TEST_REQUIREMENTS = {
    "jax": None,
    "jaxlib": None,
    "numpy": None,
    "absl-py": None,
    "pytest": None,
    "pytest-xdist": None,
    "hypothesis": None,
}
_VERSION_PROBE = "import sys; print('%d.%d' % sys.version_info[:2])"


def venv_dir(python_version=None):
    """The managed venv: $JAXCORE_VENV, else .venv (or .venv-X.Y for another --python_version)."""
    if os.environ.get("JAXCORE_VENV"):
        return Path(os.environ["JAXCORE_VENV"]).resolve()
    if python_version is None or python_version == sys.version_info[:2]:
        return (REPO_ROOT / ".venv").resolve()
    return (REPO_ROOT / f".venv-{dotted(python_version)}").resolve()


def parse_python_version(value):
    """Turns `--python_version=3.13` into (3, 13)."""
    found = re.fullmatch(r"(\d+)\.(\d+)", value.strip())
    if not found:
        raise UsageError(f"--python_version={value!r} is not a MAJOR.MINOR version such as 3.13")
    return int(found.group(1)), int(found.group(2))


def python_version(python):
    """Returns the (major, minor) version of the interpreter `python`.

    Raises:
      BuildError: it does not run, does not answer in time, or prints no version.
    """
    out = probe([python, "-c", _VERSION_PROBE], what="for its Python version")
    if out.returncode != 0 or not re.fullmatch(r"\d+\.\d+", out.stdout.strip()):
        raise BuildError(f"{python} does not run as a Python interpreter")
    major, minor = map(int, out.stdout.strip().split("."))
    return major, minor


def check_python(path):
    """Checks that `path` (--python_bin_path) is a Python 3.11+ interpreter.

    Returns:
      Its absolute path.

    Raises:
      UsageError: it is missing, not executable, hangs, is no Python or is too old.
    """
    python = Path(path)
    if not python.is_absolute():
        found = shutil.which(str(path))
        if not found:
            raise UsageError(f"Python interpreter {path!r} not found (--python_bin_path)")
        python = Path(found)
    if not python.exists():
        raise UsageError(f"Python interpreter {python} does not exist (--python_bin_path)")
    if python.is_dir() or not os.access(python, os.X_OK):
        raise UsageError(f"Python interpreter {python} is not executable (--python_bin_path)")
    try:
        major, minor = python_version(python)
    except BuildError as e:
        raise UsageError(f"{e} (--python_bin_path)") from None
    oldest = min(LOCK_FILES)
    if (major, minor) < oldest:
        raise UsageError(
            f"--python_bin_path={path} is Python {major}.{minor}; jaxcore needs Python "
            f"{dotted(oldest)} or newer"
        )
    return python


def find_python(version):
    """Finds an interpreter of Python `version` ((3, 13)): `python3.13` on PATH, else pyenv's.

    A pyenv shim on PATH that does not run the version (pyenv has it, but another is selected)
    is passed over for the interpreter under $PYENV_ROOT/versions (default ~/.pyenv).
    """
    name = f"python{dotted(version)}"
    candidates = []
    if shutil.which(name):
        candidates.append(Path(shutil.which(name)))
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    installed = sorted(
        (pyenv_root / "versions").glob(f"{dotted(version)}.*/bin/{name}"),
        key=lambda p: [
            int(x) if x.isdigit() else -1 for x in re.split(r"[.]", p.parent.parent.name)
        ],
        reverse=True,
    )
    candidates += installed
    for candidate in candidates:
        try:
            if python_version(candidate) == version:
                return candidate
        except BuildError:
            continue
    raise BuildError(
        f"no Python {dotted(version)} found (looked for {name} on PATH and under "
        f"{pyenv_root / 'versions'}); install it (e.g. `pyenv install {dotted(version)}`) or "
        "pass --python_bin_path"
    )


def lock_file(version):
    """The lock file for Python `version` ((3, 12)): its own, else the next newer Python's.

    Pythons newer than every lock use the newest lock.
    """
    if version < min(LOCK_FILES):
        raise BuildError(
            f"jaxcore needs Python {dotted(min(LOCK_FILES))} or newer, not {dotted(version)}"
        )
    newer = sorted(v for v in LOCK_FILES if v >= version)
    return LOCK_FILES[newer[0] if newer else max(LOCK_FILES)]


def locked_versions(lock):
    """The jax and jaxlib versions `lock` pins, e.g. {'jax': '0.10.2', 'jaxlib': '0.10.2'}."""
    try:
        text = lock.read_text()
    except OSError as e:
        raise BuildError(
            f"cannot read {lock}: {e.strerror}; it pins every test requirement with hashes"
        ) from None
    pins = {}
    for name in ("jax", "jaxlib"):
        found = re.search(rf"^{name}==(\S+)", text, re.MULTILINE)
        if not found:
            raise BuildError(f"{lock} pins no {name} version")
        pins[name] = found.group(1)
    return pins


def describe_lock(version, lock):
    """One line saying which lock an interpreter of Python `version` uses."""
    pins = locked_versions(lock)
    return (
        f"Python {dotted(version)}: test requirements from "
        f"{lock.relative_to(REPO_ROOT)} (jax {pins['jax']}, jaxlib {pins['jaxlib']})"
    )


def _installed_versions(python, names):
    """The installed versions of the distributions `names` for `python` (None: not installed)."""
    code = (
        "import json, sys\n"
        "from importlib import metadata\n"
        "out = {}\n"
        "for name in json.loads(sys.argv[1]):\n"
        "    try: out[name] = metadata.version(name)\n"
        "    except metadata.PackageNotFoundError: out[name] = None\n"
        "print(json.dumps(out))\n"
    )
    result = probe(
        [python, "-c", code, json.dumps(list(names))],
        what="for its installed packages",
    )
    if result.returncode != 0:
        raise BuildError(f"cannot inspect the packages of {python}: {result.stderr.strip()}")
    return json.loads(result.stdout)


def missing_requirements(python, lock=None, *, exact=True):
    """Returns the test requirements `python` lacks, as 'name==version' strings.

    With `exact`, jax and jaxlib must have the versions `lock` pins (default: the lock for
    `python`'s version); otherwise any version in the tested JAX range (jax_range) will do,
    e.g. an interpreter of one's own with jax 0.11.2.
    """
    lock = lock or lock_file(python_version(python))
    pins = {name: pin or locked_versions(lock).get(name) for name, pin in TEST_REQUIREMENTS.items()}
    found = _installed_versions(python, pins)
    missing = []
    for name, pinned in pins.items():
        have = found.get(name)
        if pinned and not exact and name in ("jax", "jaxlib"):
            if have is None or not in_jax_range(have):
                low, high = jax_range()
                missing.append(f"{name}>={low},<{high}" + (f" (has {have})" if have else ""))
            continue
        if have is None or (pinned and have != pinned):
            want = f"{name}=={pinned}" if pinned else name
            missing.append(want + (f" (has {have})" if have else ""))
    return missing


def installed_jax(python):
    """The jax and jaxlib versions installed for `python`, e.g. {'jax': '0.11.2', ...}."""
    found = _installed_versions(python, ("jax", "jaxlib"))
    missing = [name for name, version in found.items() if version is None]
    if missing:
        raise BuildError(f"cannot inspect the packages of {python}: no {', '.join(missing)}")
    return found


def _lock_stamp(python, lock=None):
    digest = hashlib.sha256((lock or LOCK_FILE).read_bytes()).hexdigest()
    return f"{digest} {python}"


def ensure_venv(*, verbose, dry_run, python_version_wanted=None):
    """Creates the managed venv and installs the hash-locked requirements of its Python into it.

    The venv is made with this interpreter, or with Python `python_version_wanted` (found by
    :func:`find_python`); the lock file is the one for the venv's Python version
    (:func:`lock_file`), and which one is said.

    Returns:
      (the venv's interpreter, the lock file installed in it).
    """
    venv = venv_dir(python_version_wanted)
    python = venv / "bin" / "python"
    stamp = venv / ".jaxcore_requirements_stamp"
    if python.exists():
        version = python_version(python)
        if python_version_wanted and version != python_version_wanted:
            raise BuildError(
                f"{venv} is a Python {dotted(version)} venv, not {dotted(python_version_wanted)} "
                "(--python_version); remove it or set JAXCORE_VENV to another directory"
            )
        base = None
    elif python_version_wanted:
        base = find_python(python_version_wanted)
        version = python_version_wanted
    else:
        base = Path(sys.executable)
        version = sys.version_info[:2]
    lock = lock_file(version)
    if not lock.exists():
        raise BuildError(f"{lock} is missing; it pins every test requirement with hashes")
    create = [str(base or sys.executable), "-m", "venv", str(venv)]
    install = pip_install_command(python, lock)
    if dry_run:
        print(f"# {describe_lock(version, lock)}")
        if not python.exists():
            print(fmt(create))
        print(fmt(install))
        return python, lock
    log(describe_lock(version, lock))
    if not python.exists():
        log(f"creating the virtual environment {venv} with {base}")
        result = run(create, verbose=verbose, check=False, capture=True)
        if result.returncode != 0:
            if "ensurepip" not in (result.stderr + result.stdout):
                raise BuildError(f"could not create {venv}: {result.stderr.strip()}")
            shutil.rmtree(venv, ignore_errors=True)
            apt_install(
                [f"python{dotted(version)}-venv"], reason="Python's venv module", verbose=verbose
            )
            run(create, verbose=verbose)
    if stamp.exists() and stamp.read_text() == _lock_stamp(python, lock):
        return python, lock
    log(f"installing {lock.relative_to(REPO_ROOT)} into {venv}")
    run(install, verbose=verbose)
    missing = missing_requirements(python, lock)
    if missing:
        raise BuildError(
            f"{python} still lacks {', '.join(missing)} after installing the lock file"
        )
    stamp.write_text(_lock_stamp(python, lock))
    return python, lock

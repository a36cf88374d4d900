#!/usr/bin/env python3
"""Builds jaxcore's wheels with Bazel, and runs its test suite.

  python3 build/build.py build --wheels=all        # the five wheels, into dist/
  python3 build/build.py test                      # the whole CPU test suite
  python3 build/build.py setup                     # Bazel + .venv + generated bazelrc only
  python3 build/build.py venv --python_version=3.13   # .venv-3.13 from the newest-JAX lock

It finds (or, on Debian/Ubuntu as root, installs) Bazel and the C++ compiler, writes the
machine-specific settings to .jaxcore_configure.bazelrc (which .bazelrc imports) -- among
them jaxlib's XLA FFI headers, which the native CPU kernels compile against -- and drives
Bazel. Settings
in that file are never repeated on the Bazel command line, so a plain `bazel build` or
`bazel test` afterwards behaves exactly like the commands this script runs.
"""

import argparse
import ast
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# Toolchain versions. The Dockerfiles' ARG defaults and .bazelrc must use the same numbers
# (tests/docker_config_test.py checks).
PYTHON_VERSION = "3.11"
BAZEL_VERSION = "4.2.3"
DEFAULT_CUDA_MAJOR_VERSION = 12
CUDA_VERSIONS = {12: "12.8.1", 13: "13.0.0"}
CUDNN_VERSION = "9.8.0"
ROCM_VERSION = "6.4.4"
# GCC that builds the native jaxcore-cpu wheel in CI (Debian bookworm's g++-12); Dockerfile.cpu
# pins the Debian package of this version. Another compiler works, but its wheel's bytes differ.
CXX_COMPILER_VERSION = "12.2.0"

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIGURE_BAZELRC = REPO_ROOT / ".jaxcore_configure.bazelrc"
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
# Docs and CI-check tools (mkdocs, actionlint), layered on the main lock; ci/run_docs.sh uses them.
DEV_LOCK_FILE = REPO_ROOT / "build" / "requirements_dev_lock.txt"
VERSION_BZL = REPO_ROOT / "jaxcore" / "version.bzl"
PLATFORM_TAGS_BZL = REPO_ROOT / "jaxcore" / "tools" / "platform_tags.bzl"
BACKENDS = ("cpu", "cuda", "rocm", "tpu")
# Debian packages that give an offline Bazel 4.2.3 and the rules the WORKSPACE points at.
BAZEL_DEBIAN_PACKAGES = ("bazel-bootstrap", "bazel-rules-java", "bazel-platforms")
BAZEL_LOCAL_REPOSITORIES = (Path("/usr/share/bazel/rules/java"), Path("/usr/share/bazel/platforms"))
# Debian packages of the C++ compiler Bazel's autoconfigured toolchain runs (`gcc`, `g++`).
CXX_DEBIAN_PACKAGES = ("g++",)
# Wheels with native code: their platform tag comes from PLATFORM_TAGS_BZL, by CPU.
NATIVE_WHEELS = ("jaxcore-cpu",)
# The native CPU kernel library; the pytest run loads the one Bazel built
# ($JAXCORE_CPU_KERNELS_LIB).
NATIVE_KERNELS_TARGET = "//jaxcore_cpu:libjaxcore_cpu_kernels.so"
NATIVE_KERNELS_PATH = "jaxcore_cpu/libjaxcore_cpu_kernels.so"
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


class BuildError(Exception):
    """A problem the user can fix; the message says what and how."""


def _log(msg):
    print(f"build.py: {msg}", flush=True)


def _fmt(cmd):
    return " ".join(shlex.quote(str(c)) for c in cmd)


def _run(cmd, *, verbose, env=None, check=True, capture=False, cwd=REPO_ROOT):
    if verbose:
        _log(f"running: {_fmt(cmd)}")
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
        raise BuildError(f"command failed with exit code {result.returncode}: {_fmt(cmd)}{detail}")
    return result


# --- Wheels -------------------------------------------------------------------------------


def jaxcore_version():
    """Reads the version the Bazel wheel rules use (jaxcore/version.bzl)."""
    found = re.search(r'JAXCORE_VERSION\s*=\s*"([^"]+)"', VERSION_BZL.read_text())
    if not found:
        raise BuildError(f"{VERSION_BZL} defines no JAXCORE_VERSION")
    return found.group(1)


def jax_range():
    """The tested JAX range as ("0.10.2", "0.12.1"): inclusive low, exclusive high.

    Read from the wheels' JAX_REQUIREMENT in jaxcore/version.bzl (which
    tests/jax_version_test.py keeps equal to jaxcore/_jax_internals.py's range).
    """
    try:
        text = VERSION_BZL.read_text()
    except OSError as e:
        raise BuildError(f"cannot read {VERSION_BZL}: {e.strerror}") from None
    found = re.search(r'^JAX_REQUIREMENT\s*=\s*"jax>=([\d.]+),<([\d.]+)"', text, re.MULTILINE)
    if not found:
        raise BuildError(f'{VERSION_BZL} defines no JAX_REQUIREMENT = "jax>=LOW,<HIGH"')
    return found.group(1), found.group(2)


def _release(version):
    """The leading numbers of a version string: "0.12.0.1" -> (0, 12, 0, 1)."""
    return tuple(int(part) for part in re.match(r"\d+(?:\.\d+)*", version).group(0).split("."))


def in_jax_range(version):
    """Whether a jax/jaxlib version string lies in the tested range (jax_range)."""
    low, high = jax_range()
    try:
        return _release(low) <= _release(version) < _release(high)
    except AttributeError:  # no leading number
        return False


def wheel_specs(cuda_major):
    """Maps each wheel's dist name to its Bazel target."""
    return {
        "jaxcore": "//jaxcore/tools:jaxcore_wheel",
        "jaxcore-cpu": "//jaxcore/tools:jaxcore_cpu_wheel",
        f"jaxcore-cuda{cuda_major}": "//jaxcore/tools:jaxcore_cuda12_wheel",
        "jaxcore-rocm6": "//jaxcore/tools:jaxcore_rocm6_wheel",
        "jaxcore-tpu": "//jaxcore/tools:jaxcore_tpu_wheel",
    }


def native_platform_tag(machine=None):
    """Returns the platform tag of the native wheels built on this CPU.

    The tags live in jaxcore/tools/platform_tags.bzl, which the wheel rules use too; the wheel
    builder checks that the library really runs on the glibc the tag names.
    """
    try:
        text = PLATFORM_TAGS_BZL.read_text()
    except OSError as e:
        raise BuildError(f"cannot read {PLATFORM_TAGS_BZL}: {e.strerror}") from None
    found = re.search(r"^NATIVE_PLATFORM_TAGS\s*=\s*(\{[^}]*\})", text, re.MULTILINE)
    if not found:
        raise BuildError(f"{PLATFORM_TAGS_BZL} defines no NATIVE_PLATFORM_TAGS")
    tags = ast.literal_eval(found.group(1))
    machine = (machine or platform.machine()).lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    if machine not in tags:
        raise BuildError(
            f"the native wheels ({', '.join(NATIVE_WHEELS)}) are not built for the {machine} CPU; "
            f"{PLATFORM_TAGS_BZL.relative_to(REPO_ROOT)} has tags for {', '.join(sorted(tags))}"
        )
    return tags[machine]


def wheel_filename(dist_name, version, platform_tag="any"):
    return f"{re.sub(r'[-_.]+', '_', dist_name)}-{version}-py3-none-{platform_tag}.whl"


def parse_wheels(value, cuda_major):
    """Turns `--wheels=a,b` (or `all`) into the ordered list of dist names."""
    specs = wheel_specs(cuda_major)
    names = [w.strip() for w in value.split(",") if w.strip()]
    if not names:
        raise BuildError("--wheels is empty; give a comma-separated list or 'all'")
    if names == ["all"]:
        return list(specs)
    unknown = [n for n in names if n not in specs]
    if unknown:
        raise BuildError(
            f"unknown wheel {', '.join(repr(u) for u in unknown)} in --wheels; "
            f"choose from {', '.join(specs)} or 'all'"
        )
    return list(dict.fromkeys(names))


# --- Python -------------------------------------------------------------------------------


def venv_dir(python_version=None):
    """The managed venv: $JAXCORE_VENV, else .venv (or .venv-X.Y for another --python_version)."""
    if os.environ.get("JAXCORE_VENV"):
        return Path(os.environ["JAXCORE_VENV"]).resolve()
    if python_version is None or python_version == sys.version_info[:2]:
        return (REPO_ROOT / ".venv").resolve()
    return (REPO_ROOT / f".venv-{_dotted(python_version)}").resolve()


def _dotted(version):
    return ".".join(map(str, version))


def parse_python_version(value):
    """Turns `--python_version=3.13` into (3, 13)."""
    found = re.fullmatch(r"(\d+)\.(\d+)", value.strip())
    if not found:
        raise BuildError(f"--python_version={value!r} is not a MAJOR.MINOR version such as 3.13")
    return int(found.group(1)), int(found.group(2))


def python_version(python):
    """Returns the (major, minor) version of the interpreter `python`."""
    try:
        out = subprocess.run(
            [str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BuildError(f"{python} does not run as a Python interpreter: {e}") from None
    if out.returncode != 0 or not re.fullmatch(r"\d+\.\d+", out.stdout.strip()):
        raise BuildError(f"{python} does not run as a Python interpreter (--python_bin_path)")
    major, minor = map(int, out.stdout.strip().split("."))
    return major, minor


def check_python(path):
    """Checks that `path` is a Python 3.11+ interpreter; returns its absolute path."""
    python = Path(path)
    if not python.is_absolute():
        found = shutil.which(str(path))
        if not found:
            raise BuildError(f"Python interpreter {path!r} not found (--python_bin_path)")
        python = Path(found)
    if not python.exists():
        raise BuildError(f"Python interpreter {python} does not exist (--python_bin_path)")
    if not os.access(python, os.X_OK):
        raise BuildError(f"Python interpreter {python} is not executable (--python_bin_path)")
    major, minor = python_version(python)
    oldest = min(LOCK_FILES)
    if (major, minor) < oldest:
        raise BuildError(
            f"{python} is Python {major}.{minor}; jaxcore needs Python {_dotted(oldest)} or newer"
        )
    return python


def find_python(version):
    """Finds an interpreter of Python `version` ((3, 13)): `python3.13` on PATH, else pyenv's.

    A pyenv shim on PATH that does not run the version (pyenv has it, but another is selected)
    is passed over for the interpreter under $PYENV_ROOT/versions (default ~/.pyenv).
    """
    name = f"python{_dotted(version)}"
    candidates = []
    if shutil.which(name):
        candidates.append(Path(shutil.which(name)))
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    installed = sorted(
        (pyenv_root / "versions").glob(f"{_dotted(version)}.*/bin/{name}"),
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
        f"no Python {_dotted(version)} found (looked for {name} on PATH and under "
        f"{pyenv_root / 'versions'}); install it (e.g. `pyenv install {_dotted(version)}`) or "
        "pass --python_bin_path"
    )


def lock_file(version):
    """The lock file for Python `version` ((3, 12)): its own, else the next newer Python's.

    Pythons newer than every lock use the newest lock.
    """
    if version < min(LOCK_FILES):
        raise BuildError(
            f"jaxcore needs Python {_dotted(min(LOCK_FILES))} or newer, not {_dotted(version)}"
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
        f"Python {_dotted(version)}: test requirements from "
        f"{lock.relative_to(REPO_ROOT)} (jax {pins['jax']}, jaxlib {pins['jaxlib']})"
    )


def missing_requirements(python, lock=None, *, exact=True):
    """Returns the test requirements `python` lacks, as 'name==version' strings.

    With `exact`, jax and jaxlib must have the versions `lock` pins (default: the lock for
    `python`'s version); otherwise any version in the tested JAX range (jax_range) will do,
    e.g. an interpreter of one's own with jax 0.11.2.
    """
    lock = lock or lock_file(python_version(python))
    pins = {name: pin or locked_versions(lock).get(name) for name, pin in TEST_REQUIREMENTS.items()}
    probe = (
        "import json, sys\n"
        "from importlib import metadata\n"
        "out = {}\n"
        "for name in json.loads(sys.argv[1]):\n"
        "    try: out[name] = metadata.version(name)\n"
        "    except metadata.PackageNotFoundError: out[name] = None\n"
        "print(json.dumps(out))\n"
    )
    result = subprocess.run(
        [str(python), "-c", probe, json.dumps(list(pins))],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise BuildError(f"cannot inspect the packages of {python}: {result.stderr.strip()}")
    found = json.loads(result.stdout)
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
    probe = (
        "import json\nfrom importlib import metadata\n"
        "print(json.dumps({n: metadata.version(n) for n in ('jax', 'jaxlib')}))\n"
    )
    result = subprocess.run([str(python), "-c", probe], capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError(f"cannot inspect the packages of {python}: {result.stderr.strip()}")
    return json.loads(result.stdout)


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
                f"{venv} is a Python {_dotted(version)} venv, not {_dotted(python_version_wanted)} "
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
    install = [
        str(python),
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--require-hashes",
        "-r",
        str(lock),
    ]
    if dry_run:
        print(f"# {describe_lock(version, lock)}")
        if not python.exists():
            print(_fmt(create))
        print(_fmt(install))
        return python, lock
    _log(describe_lock(version, lock))
    if not python.exists():
        _log(f"creating the virtual environment {venv} with {base}")
        result = _run(create, verbose=verbose, check=False, capture=True)
        if result.returncode != 0:
            if "ensurepip" not in (result.stderr + result.stdout):
                raise BuildError(f"could not create {venv}: {result.stderr.strip()}")
            shutil.rmtree(venv, ignore_errors=True)
            apt_install(
                [f"python{_dotted(version)}-venv"], reason="Python's venv module", verbose=verbose
            )
            _run(create, verbose=verbose)
    if stamp.exists() and stamp.read_text() == _lock_stamp(python, lock):
        return python, lock
    _log(f"installing {lock.relative_to(REPO_ROOT)} into {venv}")
    _run(install, verbose=verbose)
    missing = missing_requirements(python, lock)
    if missing:
        raise BuildError(
            f"{python} still lacks {', '.join(missing)} after installing the lock file"
        )
    stamp.write_text(_lock_stamp(python, lock))
    return python, lock


def ensure_dev_tools(python, *, verbose, dry_run):
    """Installs DEV_LOCK_FILE (docs and workflow-check tools) into the managed venv.

    Its pins of packages the main lock also has equal the main lock's, so this never changes
    a test requirement. Skipped when the lock file is absent.
    """
    if not DEV_LOCK_FILE.exists():
        return
    stamp = python.parent.parent / ".jaxcore_dev_tools_stamp"
    want = f"{hashlib.sha256(DEV_LOCK_FILE.read_bytes()).hexdigest()} {python}"
    if stamp.exists() and stamp.read_text() == want:
        return
    install = [
        str(python),
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--require-hashes",
        "-r",
        str(DEV_LOCK_FILE),
    ]
    if dry_run:
        print(_fmt(install))
        return
    _log(f"installing {DEV_LOCK_FILE.relative_to(REPO_ROOT)} into {python.parent.parent}")
    _run(install, verbose=verbose)
    stamp.write_text(want)


# --- Bazel --------------------------------------------------------------------------------


def _is_debian_root():
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("apt-get"):
        return False
    try:
        release = Path("/etc/os-release").read_text()
    except OSError:
        return False
    ids = re.findall(r"^(?:ID|ID_LIKE)=\"?([^\"\n]+)", release, re.MULTILINE)
    return any(word in ("debian", "ubuntu") for line in ids for word in line.split())


_BAZEL_HINT = "install Bazel 4.2.3 (https://bazel.build) and pass --bazel_path"


def apt_install(packages, *, reason, verbose, hint=_BAZEL_HINT):
    """Installs Debian packages; only where that is possible without asking anybody."""
    if not _is_debian_root():
        raise BuildError(
            f"{reason} is missing. Install the Debian/Ubuntu packages "
            f"{' '.join(packages)} (apt-get install {' '.join(packages)}), or on other systems "
            f"{hint}."
        )
    _log(f"installing {' '.join(packages)} with apt-get ({reason})")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    _run(["apt-get", "update", "-qq"], verbose=verbose, env=env)
    _run(["apt-get", "install", "-y", "-qq", *packages], verbose=verbose, env=env)


def bazel_version(bazel):
    """Returns Bazel's version as a tuple, reading Debian's package version if need be."""
    result = subprocess.run(
        [str(bazel), "--version"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    if result.returncode != 0:
        raise BuildError(f"{bazel} --version failed: {(result.stderr or result.stdout).strip()}")
    text = result.stdout.strip()
    found = re.search(r"(\d+)\.(\d+)\.(\d+)", text)
    if not found and "no_version" in text and shutil.which("dpkg-query"):
        # Debian's bazel-bootstrap is built without a version stamp.
        pkg = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", "bazel-bootstrap"], capture_output=True, text=True
        )
        found = re.match(r"(\d+)\.(\d+)\.(\d+)", pkg.stdout.strip())
    if not found:
        raise BuildError(f"cannot tell the version of {bazel} (it printed {text!r})")
    return tuple(int(v) for v in found.groups())


def find_bazel(bazel_path, *, verbose, dry_run):
    """Finds Bazel (installing Debian's where possible) and checks its version."""
    if bazel_path:
        bazel = Path(bazel_path)
        if not bazel.is_file() or not os.access(bazel, os.X_OK):
            raise BuildError(f"--bazel_path={bazel_path} is not an executable file")
    else:
        found = shutil.which("bazel")
        missing_repos = [str(p) for p in BAZEL_LOCAL_REPOSITORIES if not p.is_dir()]
        if not found or missing_repos:
            what = (
                "Bazel"
                if not found
                else f"Bazel's local rule repositories ({', '.join(missing_repos)})"
            )
            if dry_run:
                print(_fmt(["apt-get", "install", "-y", *BAZEL_DEBIAN_PACKAGES]))
                return Path(found or "bazel")
            apt_install(BAZEL_DEBIAN_PACKAGES, reason=what, verbose=verbose)
            found = shutil.which("bazel")
            if not found:
                raise BuildError("apt-get installed bazel-bootstrap but no `bazel` is on PATH")
        bazel = Path(found)
    version = bazel_version(bazel)
    shown = ".".join(map(str, version))
    want = tuple(int(v) for v in BAZEL_VERSION.split("."))
    if version < want:
        raise BuildError(
            f"Bazel {shown} at {bazel} is too old; jaxcore needs "
            f"{BAZEL_VERSION} or newer (4.x; see .bazelversion)"
        )
    if version[0] != want[0]:
        _log(
            f"warning: Bazel {shown} is untested; jaxcore's WORKSPACE targets Bazel {BAZEL_VERSION}"
        )
    if verbose:
        _log(f"using Bazel {shown} at {bazel}")
    return bazel


# --- Native code: the C++ compiler and jaxlib's XLA FFI headers ----------------------------


def find_cxx_compiler(*, verbose, dry_run):
    """Finds the compiler Bazel's C++ toolchain runs, installing Debian's g++ where possible.

    Bazel's autoconfigured toolchain compiles and links with $CC or `gcc`, and needs `g++`'s
    libstdc++ headers. Returns the compiler's `--version` line, which the generated bazelrc
    records (the Dockerfiles pin the compiler; see CXX_COMPILER_VERSION).
    """
    cc = os.environ.get("CC") or "gcc"
    missing = [tool for tool in dict.fromkeys([cc, "gcc", "g++"]) if not shutil.which(tool)]
    if missing:
        if dry_run:
            print(_fmt(["apt-get", "install", "-y", *CXX_DEBIAN_PACKAGES]))
            return "unknown (not installed yet)"
        apt_install(
            CXX_DEBIAN_PACKAGES,
            reason=f"The C++ compiler for the native CPU kernels ({', '.join(missing)})",
            verbose=verbose,
            hint="install GCC's C and C++ compilers (gcc and g++ on PATH, or set CC)",
        )
        still = [tool for tool in missing if not shutil.which(tool)]
        if still:
            raise BuildError(
                f"apt-get installed {' '.join(CXX_DEBIAN_PACKAGES)} but {', '.join(still)} is not on PATH"
            )
    result = subprocess.run([cc, "--version"], capture_output=True, text=True)
    line = (result.stdout.strip().splitlines() or [""])[0].strip()
    if result.returncode != 0 or not line:
        raise BuildError(f"the C++ compiler {cc} does not run ({cc} --version failed)")
    full = subprocess.run([cc, "-dumpfullversion"], capture_output=True, text=True)
    version = full.stdout.strip()
    if "gcc" in line.lower() and full.returncode == 0 and version != CXX_COMPILER_VERSION:
        _log(
            f"note: {cc} is GCC {version}; CI builds the jaxcore-cpu wheel with GCC "
            f"{CXX_COMPILER_VERSION}, so this wheel works but its bytes differ from CI's"
        )
    if verbose:
        _log(f"C++ compiler: {line}")
    return line


# Prints jaxlib's FFI include directory; jax.ffi.include_dir() is the documented way to get it.
_FFI_PROBE = "import jax.ffi; print(jax.ffi.include_dir())"


def _lock_for_message(python):
    """The lock file `python` should have installed (the default one if it does not run)."""
    try:
        return lock_file(python_version(python))
    except BuildError:
        return LOCK_FILE


def xla_ffi_include(python, *, dry_run=False):
    """Returns the XLA FFI header directory of the jaxlib installed for `python`."""
    if dry_run and not Path(python).exists():
        return f"<jax.ffi.include_dir() of {python}>"
    lock = _lock_for_message(python)
    jaxlib = f"jaxlib=={locked_versions(lock)['jaxlib']}"
    fix = (
        f"install {lock.relative_to(REPO_ROOT)} (jax/{jaxlib}) into it, or drop "
        "--python_bin_path to let build.py manage .venv"
    )
    try:
        result = subprocess.run(
            [str(python), "-c", _FFI_PROBE], capture_output=True, text=True, timeout=600
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BuildError(f"cannot ask {python} for jaxlib's XLA FFI headers: {e}") from None
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines()
        raise BuildError(
            f"{python} cannot import jax and jaxlib, whose XLA FFI headers "
            f"(jax.ffi.include_dir()) the native CPU kernels compile against "
            f"({lines[-1] if lines else 'no error message'}); {fix}"
        )
    include = Path((result.stdout.strip().splitlines() or [""])[-1])
    if not include.is_absolute() or not (include / "xla" / "ffi" / "api" / "ffi.h").is_file():
        raise BuildError(
            f"jaxlib's include directory {str(include)!r} (jax.ffi.include_dir() of {python}) "
            f"has no xla/ffi/api/ffi.h; reinstall {jaxlib} or {fix}"
        )
    return include


# --- The generated bazelrc ------------------------------------------------------------------


def configure_bazelrc_text(*, python, cuda_major, rocm_version, ffi_include, compiler):
    """Returns the text of .jaxcore_configure.bazelrc: one line per setting."""
    lines = [
        "# Written by build/build.py; re-run it to change these settings. Do not edit.",
        f"# C++ compiler (Bazel's autoconfigured toolchain): {compiler}",
        f"build --repo_env=PYTHON_BIN_PATH={python}",
        f"build --action_env=PYTHON_BIN_PATH={python}",
        f"build --repo_env=JAXCORE_XLA_FFI_INCLUDE={ffi_include}",
        "build --action_env=SOURCE_DATE_EPOCH",
        f"build --define=jaxcore_cuda_major={cuda_major}",
        f"build:cuda --action_env=JAXCORE_CUDA_VERSION={CUDA_VERSIONS[cuda_major]}",
        f"build:cuda --action_env=JAXCORE_CUDNN_VERSION={CUDNN_VERSION}",
        f"build:rocm --action_env=JAXCORE_ROCM_VERSION={rocm_version}",
    ]
    return "\n".join(lines) + "\n"


def write_atomically(path, text):
    """Replaces `path` in one step, so readers never see a half-written file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# --- Commands -----------------------------------------------------------------------------


def _check_versions(args):
    if args.cuda_major_version not in CUDA_VERSIONS:
        raise BuildError(
            f"--cuda_major_version={args.cuda_major_version} is not supported; "
            f"choose from {', '.join(map(str, CUDA_VERSIONS))}"
        )
    if not re.fullmatch(r"6\.\d+(\.\d+)?", args.rocm_version):
        raise BuildError(
            f"--rocm_version={args.rocm_version!r} is not supported; the jaxcore-rocm6 wheel "
            "needs a ROCm 6.x version such as " + ROCM_VERSION
        )


def configure(args, python, bazel=None):
    """Finds Bazel, the compiler and the FFI headers, and writes the generated bazelrc.

    Returns the Bazel path. Nothing is written unless every setting was found: a failure
    leaves an existing .jaxcore_configure.bazelrc exactly as it was.
    """
    if bazel is None:
        bazel = find_bazel(args.bazel_path, verbose=args.verbose, dry_run=args.dry_run)
    compiler = find_cxx_compiler(verbose=args.verbose, dry_run=args.dry_run)
    ffi_include = xla_ffi_include(python, dry_run=args.dry_run)
    text = configure_bazelrc_text(
        python=python,
        cuda_major=args.cuda_major_version,
        rocm_version=args.rocm_version,
        ffi_include=ffi_include,
        compiler=compiler,
    )
    if args.dry_run:
        print(f"# would write {CONFIGURE_BAZELRC.name}:")
        print(text, end="")
    else:
        write_atomically(CONFIGURE_BAZELRC, text)
        if args.verbose:
            _log(f"wrote {CONFIGURE_BAZELRC}")
    return bazel


def bazel_command(bazel, args, command, *options_and_targets):
    return [
        str(bazel),
        *args.bazel_startup_options,
        command,
        *args.bazel_options,
        *options_and_targets,
    ]


def _wanted_python_version(args):
    """--python_version as (major, minor), or None; it conflicts with --python_bin_path."""
    if not args.python_version:
        return None
    if args.python_bin_path:
        raise BuildError("give --python_bin_path or --python_version, not both")
    return parse_python_version(args.python_version)


def _checked_python(args):
    """--python_bin_path, checked: a Python 3.11+ with the test requirements, and a jax and
    jaxlib in the tested range (its lock's pins, or any other tested release)."""
    python = check_python(args.python_bin_path)
    version = python_version(python)
    lock = lock_file(version)
    missing = missing_requirements(python, lock, exact=False)
    if missing:
        raise BuildError(
            f"{python} lacks the test requirements {', '.join(missing)}; install "
            f"{lock.relative_to(REPO_ROOT)} into it, or drop --python_bin_path to "
            "let build.py manage .venv"
        )
    if not args.dry_run:
        have, pins = installed_jax(python), locked_versions(lock)
        if have == pins:
            _log(f"{describe_lock(version, lock)}, installed in {python}")
        else:
            _log(
                f"Python {_dotted(version)}: jax {have['jax']}, jaxlib {have['jaxlib']} in "
                f"{python}, inside the tested range (its lock, {lock.relative_to(REPO_ROOT)}, "
                f"pins jax {pins['jax']})"
            )
    return python


def _build_python(args):
    """The interpreter whose jaxlib the build uses: --python_bin_path, else the managed venv."""
    wanted = _wanted_python_version(args)
    if args.python_bin_path:
        return check_python(args.python_bin_path)
    return ensure_venv(verbose=args.verbose, dry_run=args.dry_run, python_version_wanted=wanted)[0]


def cmd_build(args):
    _check_versions(args)
    wheels = parse_wheels(args.wheels, args.cuda_major_version)
    output = Path(args.output_path)
    if not output.is_absolute():
        output = REPO_ROOT / output
    if output.exists() and not output.is_dir():
        raise BuildError(f"--output_path={args.output_path} exists and is not a directory")
    tags = {w: native_platform_tag() if w in NATIVE_WHEELS else "any" for w in wheels}
    # Bazel first: a bad --bazel_path fails before anything is installed.
    bazel = find_bazel(args.bazel_path, verbose=args.verbose, dry_run=args.dry_run)
    python = _build_python(args)
    configure(args, python, bazel)
    if args.configure_only:
        return 0
    specs = wheel_specs(args.cuda_major_version)
    targets = [specs[w] for w in wheels]
    build = bazel_command(bazel, args, "build", *targets)
    info = bazel_command(bazel, args, "info", "bazel-bin")
    if args.dry_run:
        print(_fmt(build))
        return 0
    _run(build, verbose=args.verbose)
    bazel_bin = Path(_run(info, verbose=args.verbose, capture=True).stdout.strip())
    version = jaxcore_version()
    built = []
    for dist in wheels:
        package_dir = specs[dist].split(":")[0].lstrip("/")
        path = bazel_bin / package_dir / wheel_filename(dist, version, tags[dist])
        if not path.is_file():
            raise BuildError(f"Bazel reported success but {path} is missing")
        with zipfile.ZipFile(path) as zf:
            if zf.testzip() is not None:
                raise BuildError(f"{path} is a corrupt zip file")
        built.append(path)
    install_outputs(built, output)
    for path in built:
        digest = hashlib.sha256((output / path.name).read_bytes()).hexdigest()
        print(f"{output / path.name}  sha256={digest}")
    return 0


def install_outputs(paths, output):
    """Copies every wheel into `output`, all or none: nothing partial is ever left there."""
    output.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".jaxcore-wheels-", dir=output))
    try:
        for path in paths:
            shutil.copyfile(path, staging / path.name)
        for path in paths:
            os.replace(staging / path.name, output / path.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def setup(args):
    """Bazel, the managed venv (or a checked interpreter) and the generated bazelrc."""
    _check_versions(args)
    wanted = _wanted_python_version(args)
    if args.python_bin_path:
        python = _checked_python(args)
    else:
        python, lock = ensure_venv(
            verbose=args.verbose, dry_run=args.dry_run, python_version_wanted=wanted
        )
        if lock == LOCK_FILE:
            # The docs/CI-check tools are locked beside the default lock only.
            ensure_dev_tools(python, verbose=args.verbose, dry_run=args.dry_run)
    bazel = configure(args, python)
    return python, bazel


def cmd_setup(args):
    python, _ = setup(args)
    if not args.dry_run:
        _log(f"ready: tests run with {python}")
    return 0


def cmd_venv(args):
    """Only the managed venv of --python_version (no Bazel, no bazelrc): for the newest-end job."""
    wanted = _wanted_python_version(args)
    python, _ = ensure_venv(
        verbose=args.verbose, dry_run=args.dry_run, python_version_wanted=wanted
    )
    if not args.dry_run:
        _log(f"ready: {python}")
    return 0


def build_native_kernels(bazel, args):
    """Builds the native CPU kernel library; returns its absolute path (None in a dry run)."""
    build = bazel_command(bazel, args, "build", NATIVE_KERNELS_TARGET)
    if args.dry_run:
        print(_fmt(build))
        return None
    _log(f"building {NATIVE_KERNELS_TARGET}")
    _run(build, verbose=args.verbose)
    info = bazel_command(bazel, args, "info", "bazel-bin")
    lib = Path(_run(info, verbose=args.verbose, capture=True).stdout.strip()) / NATIVE_KERNELS_PATH
    if not lib.is_absolute() or not lib.is_file():
        raise BuildError(f"Bazel reported success but {lib} is missing")
    return lib


# The ci/ job script each --runners entry runs ({backend}: the --backend given).
RUNNER_SCRIPTS = {
    "bazel": "run_bazel_test_{backend}.sh",
    "asan": "run_bazel_test_asan.sh",
    "pytest": "run_pytest_{backend}.sh",
    # The whole pytest suite again on the newest Python found (3.13, else 3.12) with the
    # newest end of the JAX range (build/requirements_lock_3_13.txt); CPU only.
    "newest": "run_pytest_newest.sh",
    "docs": "run_docs.sh",
}


def default_runners(backend):
    """The runners `test` runs without --runners: the newest-end job on CPU only."""
    return [r for r in RUNNER_SCRIPTS if backend == "cpu" or r != "newest"]


def cmd_test(args):
    if args.runners is None:
        args.runners = ",".join(default_runners(args.backend))
    runners = [r.strip() for r in args.runners.split(",") if r.strip()]
    unknown = [r for r in runners if r not in RUNNER_SCRIPTS]
    if unknown or not runners:
        raise BuildError(
            f"--runners must list {', '.join(RUNNER_SCRIPTS)} (any of them), got {args.runners!r}"
        )
    if "newest" in runners and args.backend != "cpu":
        raise BuildError(
            f"the newest runner tests the CPU backend only, not --backend={args.backend}"
        )
    python, bazel = setup(args)
    env = dict(
        os.environ,
        JAXCORE_SKIP_SETUP="1",
        JAXCORE_PYTHON=str(python),
        JAXCORE_BAZEL=str(bazel),
        JAXCORE_BAZEL_OPTIONS=_fmt(args.bazel_options),
        JAXCORE_BAZEL_STARTUP_OPTIONS=_fmt(args.bazel_startup_options),
    )
    if "pytest" in runners or "newest" in runners:
        # pytest loads the library Bazel builds (the ci jobs keep a path given here).
        lib = build_native_kernels(bazel, args)
        if lib is not None:
            env["JAXCORE_CPU_KERNELS_LIB"] = str(lib)
    scripts = [REPO_ROOT / "ci" / RUNNER_SCRIPTS[r].format(backend=args.backend) for r in runners]
    failed = []
    for script in scripts:
        cmd = ["bash", str(script)]
        if args.dry_run:
            print(_fmt(cmd))
            continue
        if not script.exists():
            raise BuildError(f"{script.relative_to(REPO_ROOT)} is missing")
        _log(f"running {script.relative_to(REPO_ROOT)}")
        if _run(cmd, verbose=args.verbose, env=env, check=False).returncode != 0:
            failed.append(script.name)
    if failed:
        raise BuildError(f"test run failed: {', '.join(failed)}")
    if not args.dry_run:
        _log("all tests passed")
    return 0


def make_parser():
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--python_bin_path",
        help="Python for Bazel's toolchain (default: the managed .venv, else this interpreter)",
    )
    common.add_argument(
        "--python_version",
        help="MAJOR.MINOR: make the managed venv with that Python (found on PATH or "
        "under pyenv; .venv-X.Y unless it is this interpreter's) and install the "
        "lock file for it (3.11: the oldest JAX, 3.12+: the newest)",
    )
    common.add_argument(
        "--bazel_path",
        help="Bazel binary (default: `bazel` on PATH, installed with apt-get if missing)",
    )
    common.add_argument(
        "--bazel_options",
        action="append",
        default=[],
        help="extra Bazel command option (repeatable)",
    )
    common.add_argument(
        "--bazel_startup_options",
        action="append",
        default=[],
        help="Bazel startup option (repeatable)",
    )
    common.add_argument(
        "--configure_only", action="store_true", help="write .jaxcore_configure.bazelrc and stop"
    )
    common.add_argument(
        "--dry_run", action="store_true", help="print the commands instead of running them"
    )
    common.add_argument("--verbose", action="store_true", help="print every command before it runs")
    common.add_argument(
        "--cuda_major_version",
        type=int,
        default=DEFAULT_CUDA_MAJOR_VERSION,
        help="CUDA major version (12 or 13)",
    )
    common.add_argument("--rocm_version", default=ROCM_VERSION, help="ROCm version (6.x)")
    common.add_argument(
        "--output_path", default="dist", help="where wheels are copied (default: dist/)"
    )

    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", parents=[common], help="build wheels into --output_path")
    build.add_argument(
        "--wheels",
        default="jaxcore",
        help="comma-separated: jaxcore, jaxcore-cpu, jaxcore-cuda12, jaxcore-rocm6, jaxcore-tpu, or all",
    )
    build.set_defaults(func=cmd_build)
    test = sub.add_parser("test", parents=[common], help="run the test suite (Bazel, then pytest)")
    test.add_argument("--backend", choices=BACKENDS, default="cpu")
    test.add_argument(
        "--runners",
        default=None,
        help="comma-separated, run in this order: bazel (Bazel tests), asan (native "
        "tests under AddressSanitizer/UBSan), pytest, newest (pytest on the "
        "newest Python and JAX; cpu only), docs (actionlint and mkdocs build "
        "--strict) (default: all five; all but newest for an accelerator)",
    )
    test.set_defaults(func=cmd_test)
    setup_parser = sub.add_parser(
        "setup", parents=[common], help="install Bazel and .venv, write the bazelrc"
    )
    setup_parser.add_argument("--backend", choices=BACKENDS, default="cpu")
    setup_parser.set_defaults(func=cmd_setup)
    venv_parser = sub.add_parser(
        "venv",
        parents=[common],
        help="only create/update the managed venv (e.g. --python_version=3.13)",
    )
    venv_parser.set_defaults(func=cmd_venv)
    return parser


def main(argv=None):
    args = make_parser().parse_args(argv)
    if args.command == "test" and args.configure_only:
        args.func = cmd_setup
    try:
        return args.func(args)
    except BuildError as e:
        print(f"build.py: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("build.py: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

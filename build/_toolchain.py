"""The programs the build runs: Bazel, the C++ compiler, and jaxlib's XLA FFI headers.

Each is found (and, as root on Debian/Ubuntu, installed) and its version checked; the
generated bazelrc records what was found (see _configure.py).
"""

import os
import re
import shutil
from pathlib import Path

from _apt import apt_install
from _common import IMPORT_TIMEOUT_S, REPO_ROOT, BuildError, UsageError, fmt, log, probe
from _locks import LOCK_FILE, lock_file, locked_versions, python_version

# Debian packages that give an offline Bazel 4.2.3 and the rules the WORKSPACE points at.
BAZEL_DEBIAN_PACKAGES = ("bazel-bootstrap", "bazel-rules-java", "bazel-platforms")
BAZEL_LOCAL_REPOSITORIES = (Path("/usr/share/bazel/rules/java"), Path("/usr/share/bazel/platforms"))
# Debian packages of the C++ compiler Bazel's autoconfigured toolchain runs (`gcc`, `g++`).
CXX_DEBIAN_PACKAGES = ("g++",)
# The aarch64 runner's cross compiler (build/toolchains/aarch64) and the emulator its native
# test runs under.
AARCH64_DEBIAN_PACKAGES = ("g++-aarch64-linux-gnu", "qemu-user")
AARCH64_TOOLS = ("aarch64-linux-gnu-g++", "qemu-aarch64")
# Prints jaxlib's FFI include directory; jax.ffi.include_dir() is the documented way to get it.
_FFI_PROBE = "import jax.ffi; print(jax.ffi.include_dir())"


def check_bazel_path(bazel_path):
    """Checks that --bazel_path names an executable file; returns it as a Path."""
    bazel = Path(bazel_path)
    if not bazel.is_file() or not os.access(bazel, os.X_OK):
        raise UsageError(f"--bazel_path={bazel_path} is not an executable file")
    return bazel


def bazel_version(bazel):
    """Returns Bazel's version as a tuple, reading Debian's package version if need be."""
    result = probe([bazel, "--version"], what="for its version (--version)")
    if result.returncode != 0:
        raise BuildError(f"{bazel} --version failed: {(result.stderr or result.stdout).strip()}")
    text = result.stdout.strip()
    found = re.search(r"(\d+)\.(\d+)\.(\d+)", text)
    if not found and "no_version" in text and shutil.which("dpkg-query"):
        # Debian's bazel-bootstrap is built without a version stamp.
        pkg = probe(
            ["dpkg-query", "-W", "-f=${Version}", "bazel-bootstrap"],
            what="for bazel-bootstrap's version",
        )
        found = re.match(r"(\d+)\.(\d+)\.(\d+)", pkg.stdout.strip())
    if not found:
        raise BuildError(f"cannot tell the version of {bazel} (it printed {text!r})")
    return tuple(int(v) for v in found.groups())


def find_bazel(bazel_path, *, min_version, verbose, dry_run):
    """Finds Bazel (installing Debian's where possible) and checks its version.

    Args:
      bazel_path: --bazel_path, or None to look for `bazel` on PATH.
      min_version: the oldest Bazel that builds the WORKSPACE ("4.2.3"); another major
        version than its own is used with a warning.
      verbose: whether to log what was found.
      dry_run: print the install command instead of running it.

    Returns:
      The Bazel binary's path.
    """
    if bazel_path:
        bazel = check_bazel_path(bazel_path)
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
                print(fmt(["apt-get", "install", "-y", *BAZEL_DEBIAN_PACKAGES]))
                return Path(found or "bazel")
            apt_install(BAZEL_DEBIAN_PACKAGES, reason=what, verbose=verbose)
            found = shutil.which("bazel")
            if not found:
                raise BuildError("apt-get installed bazel-bootstrap but no `bazel` is on PATH")
        bazel = Path(found)
    version = bazel_version(bazel)
    shown = ".".join(map(str, version))
    want = tuple(int(v) for v in min_version.split("."))
    if version < want:
        raise BuildError(
            f"Bazel {shown} at {bazel} is too old; jaxcore needs "
            f"{min_version} or newer (4.x; see .bazelversion)"
        )
    if version[0] != want[0]:
        log(f"warning: Bazel {shown} is untested; jaxcore's WORKSPACE targets Bazel {min_version}")
    if verbose:
        log(f"using Bazel {shown} at {bazel}")
    return bazel


def _install_missing(tools, packages, *, reason, hint, verbose, dry_run):
    """Installs Debian `packages` when any of `tools` is not on PATH.

    Returns:
      True when every tool is on PATH now; False in a dry run that printed the apt-get command
      instead.

    Raises:
      BuildError: a tool is missing and cannot be installed (not root on Debian/Ubuntu), or is
        still missing after apt-get.
    """
    missing = [tool for tool in tools if not shutil.which(tool)]
    if not missing:
        return True
    if dry_run:
        print(fmt(["apt-get", "install", "-y", *packages]))
        return False
    apt_install(packages, reason=f"{reason} ({', '.join(missing)})", verbose=verbose, hint=hint)
    still = [tool for tool in missing if not shutil.which(tool)]
    if still:
        raise BuildError(
            f"apt-get installed {' '.join(packages)} but {', '.join(still)} is not on PATH"
        )
    return True


def find_cxx_compiler(*, ci_version, verbose, dry_run):
    """Finds the compiler Bazel's C++ toolchain runs, installing Debian's g++ where possible.

    Bazel's autoconfigured toolchain compiles and links with $CC or `gcc`, and needs `g++`'s
    libstdc++ headers.

    Args:
      ci_version: the GCC version CI builds the native wheel with; another one is noted.
      verbose: whether to log the compiler found.
      dry_run: print the install command instead of running it.

    Returns:
      The compiler's `--version` line, which the generated bazelrc records.
    """
    cc = os.environ.get("CC") or "gcc"
    if not _install_missing(
        dict.fromkeys([cc, "gcc", "g++"]),
        CXX_DEBIAN_PACKAGES,
        reason="The C++ compiler for the native CPU kernels",
        hint="install GCC's C and C++ compilers (gcc and g++ on PATH, or set CC)",
        verbose=verbose,
        dry_run=dry_run,
    ):
        return "unknown (not installed yet)"
    result = probe([cc, "--version"], what="for its version")
    line = (result.stdout.strip().splitlines() or [""])[0].strip()
    if result.returncode != 0 or not line:
        raise BuildError(f"the C++ compiler {cc} does not run ({cc} --version failed)")
    full = probe([cc, "-dumpfullversion"], what="for its full version")
    version = full.stdout.strip()
    if "gcc" in line.lower() and full.returncode == 0 and version != ci_version:
        log(
            f"note: {cc} is GCC {version}; CI builds the jaxcore-cpu wheel with GCC "
            f"{ci_version}, so this wheel works but its bytes differ from CI's"
        )
    if verbose:
        log(f"C++ compiler: {line}")
    return line


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
        result = probe(
            [python, "-c", _FFI_PROBE],
            what="for jaxlib's XLA FFI headers (import jax.ffi)",
            timeout=IMPORT_TIMEOUT_S,
        )
    except BuildError as e:
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


def bazel_command(bazel, args, command, *options_and_targets):
    """`bazel [--bazel_startup_options] COMMAND [--bazel_options] OPTIONS_AND_TARGETS`."""
    return [
        str(bazel),
        *args.bazel_startup_options,
        command,
        *args.bazel_options,
        *options_and_targets,
    ]


def find_aarch64_tools(*, verbose, dry_run):
    """Finds the aarch64 cross compiler and qemu-aarch64, installing them where possible.

    The `aarch64` runner builds the native CPU kernels for linux-aarch64 with Debian's cross
    GCC (Bazel's --config=aarch64) and runs their native test under qemu-aarch64.

    Raises:
      BuildError: a tool is missing and cannot be installed (not root on Debian/Ubuntu).
    """
    _install_missing(
        AARCH64_TOOLS,
        AARCH64_DEBIAN_PACKAGES,
        reason="The aarch64 cross compiler and emulator",
        hint="install an aarch64-linux-gnu GCC cross compiler and qemu-user, or leave the "
        "aarch64 runner out (--runners)",
        verbose=verbose,
        dry_run=dry_run,
    )

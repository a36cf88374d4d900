#!/usr/bin/env python3
"""Builds jaxcore's wheels with Bazel, and runs its test suite.

  python3 build/build.py build --wheels=all        # the five wheels, into dist/
  python3 build/build.py test                      # the whole CPU test suite
  python3 build/build.py setup                     # Bazel + .venv + generated bazelrc only
  python3 build/build.py venv --python_version=3.13   # .venv-3.13 from the newest-JAX lock

It finds (or, on Debian/Ubuntu as root, installs) Bazel and the C++ compiler, writes the
machine-specific settings to .jaxcore_configure.bazelrc (which .bazelrc imports) -- among
them jaxlib's XLA FFI headers, which the native CPU kernels compile against -- and drives
Bazel. Settings in that file are never repeated on the Bazel command line, so a plain
`bazel build` or `bazel test` afterwards behaves exactly like the commands this script runs.

Every option is checked before anything is installed or written. Exit status: 0 on success,
1 when the build, a test or the machine fails (the message says what to fix), 2 for a bad
option (one line, `build.py: error: ...`, naming the flag), 130 when interrupted.

This file is the command line; the work is in the private modules beside it: _options.py
(checking the options), _locks.py (interpreters, lock files, the managed venv), _devtools.py
(docs and lint tools), _toolchain.py (Bazel, the compiler, the FFI headers), _configure.py
(the generated bazelrc), _wheels.py (wheel names and copying them out), _runners.py (the
`test` runners) and _common.py (errors, logging, running programs).
"""

import argparse
import hashlib
import sys
from pathlib import Path

# The private modules live beside this file. Make them importable however this file was
# loaded (as a script, by Bazel or by a test from another checkout's path), and never take
# another checkout's modules that an earlier import left in sys.modules.
_HERE = Path(__file__).resolve().parent
_MODULES = (
    "_common",
    "_apt",
    "_wheels",
    "_locks",
    "_devtools",
    "_toolchain",
    "_configure",
    "_runners",
    "_options",
)
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))
for _name in _MODULES:
    _module = sys.modules.get(_name)
    if _module is not None and Path(_module.__file__).resolve().parent != _HERE:
        del sys.modules[_name]

import _options  # noqa: E402 (after the sys.path set-up above)
from _common import REPO_ROOT, BuildError, UsageError, dotted, fmt, log, run  # noqa: E402
from _configure import CONFIGURE_BAZELRC, write_configure_bazelrc  # noqa: E402
from _devtools import ensure_dev_tools  # noqa: E402
from _locks import (  # noqa: E402
    LOCK_FILE,
    LOCK_FILES,
    describe_lock,
    ensure_venv,
    installed_jax,
    lock_file,
    locked_versions,
    missing_requirements,
    python_version,
)
from _runners import RUNNER_SCRIPTS, run_runners  # noqa: E402
from _toolchain import bazel_command, find_aarch64_tools, find_bazel  # noqa: E402
from _wheels import (  # noqa: E402
    NATIVE_WHEELS,
    check_wheel,
    install_outputs,
    jaxcore_version,
    native_platform_tag,
    wheel_filename,
    wheel_specs,
)

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
BACKENDS = ("cpu", "cuda", "rocm", "tpu")

__all__ = [
    "CONFIGURE_BAZELRC",
    "LOCK_FILE",
    "LOCK_FILES",
    "BuildError",
    "UsageError",
    "lock_file",
    "locked_versions",
    "main",
    "native_platform_tag",
]


# --- Commands -----------------------------------------------------------------------------


def _find_bazel(args):
    return find_bazel(
        args.bazel_path, min_version=BAZEL_VERSION, verbose=args.verbose, dry_run=args.dry_run
    )


def configure(args, python):
    """Writes the generated bazelrc for `python` and the CUDA/ROCm options."""
    write_configure_bazelrc(
        python=python,
        cuda_major=args.cuda_major_version,
        cuda_version=CUDA_VERSIONS[args.cuda_major_version],
        cudnn_version=CUDNN_VERSION,
        rocm_version=args.rocm_version,
        ci_compiler_version=CXX_COMPILER_VERSION,
        verbose=args.verbose,
        dry_run=args.dry_run,
    )


def _checked_python(args):
    """--python_bin_path (checked by _options) with the test requirements, and a jax and
    jaxlib in the tested range (its lock's pins, or any other tested release)."""
    python = args.python
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
            log(f"{describe_lock(version, lock)}, installed in {python}")
        else:
            log(
                f"Python {dotted(version)}: jax {have['jax']}, jaxlib {have['jaxlib']} "
                f"in {python}, inside the tested range (its lock, {lock.relative_to(REPO_ROOT)}, "
                f"pins jax {pins['jax']})"
            )
    return python


def _managed_venv(args):
    return ensure_venv(
        verbose=args.verbose,
        dry_run=args.dry_run,
        python_version_wanted=args.wanted_python_version,
    )


def cmd_build(args):
    wheels = args.wheel_list
    output = args.output_dir
    tags = {w: native_platform_tag() if w in NATIVE_WHEELS else "any" for w in wheels}
    # Bazel first: a Bazel that is missing or too old fails before anything is installed.
    bazel = _find_bazel(args)
    python = args.python or _managed_venv(args)[0]
    configure(args, python)
    if args.configure_only:
        return 0
    specs = wheel_specs(args.cuda_major_version)
    build = bazel_command(bazel, args, "build", *(specs[w] for w in wheels))
    info = bazel_command(bazel, args, "info", "bazel-bin")
    if args.dry_run:
        print(fmt(build))
        return 0
    run(build, verbose=args.verbose)
    bazel_bin = Path(run(info, verbose=args.verbose, capture=True).stdout.strip())
    version = jaxcore_version()
    built = []
    for dist in wheels:
        package_dir = specs[dist].split(":")[0].lstrip("/")
        path = bazel_bin / package_dir / wheel_filename(dist, version, tags[dist])
        check_wheel(path)
        built.append(path)
    install_outputs(built, output)
    for path in built:
        digest = hashlib.sha256((output / path.name).read_bytes()).hexdigest()
        print(f"{output / path.name}  sha256={digest}")
    return 0


def setup(args):
    """Bazel, the managed venv (or a checked interpreter) and the generated bazelrc."""
    if args.python:
        python = _checked_python(args)
    else:
        python, lock = _managed_venv(args)
        if lock == LOCK_FILE:
            # The docs/CI-check tools are locked beside the default lock only.
            ensure_dev_tools(python, verbose=args.verbose, dry_run=args.dry_run)
    bazel = _find_bazel(args)
    configure(args, python)
    return python, bazel


def cmd_setup(args):
    python, _ = setup(args)
    if not args.dry_run:
        log(f"ready: tests run with {python}")
    return 0


def cmd_venv(args):
    """Only the managed venv of --python_version (no Bazel, no bazelrc): for the newest-end job."""
    python, _ = _managed_venv(args)
    if not args.dry_run:
        log(f"ready: {python}")
    return 0


def cmd_test(args):
    if args.configure_only:
        return cmd_setup(args)
    python, bazel = setup(args)
    if "aarch64" in args.runner_list:
        find_aarch64_tools(verbose=args.verbose, dry_run=args.dry_run)
    run_runners(args.runner_list, python=python, bazel=bazel, args=args)
    if not args.dry_run:
        log("all tests passed")
    return 0


# --- The command line -----------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, `build.py: error: ...`, exit status 2."""

    def error(self, message):
        self.exit(2, f"build.py: error: {message} (see {self.prog} --help)\n")


def make_parser():
    common = _Parser(add_help=False)
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

    parser = _Parser(prog="build.py", description=__doc__.strip().splitlines()[0])
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
        "--strict), lint (ruff, mypy, shellcheck: ci/run_lint.sh) (default: all "
        f"{len(RUNNER_SCRIPTS)}; all but newest for an accelerator)",
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
    """Runs build.py with `argv` (default: sys.argv[1:]); returns the exit status."""
    args = make_parser().parse_args(argv)
    try:
        _options.validate(args, cuda_versions=CUDA_VERSIONS, rocm_example=ROCM_VERSION)
        return args.func(args)
    except UsageError as e:
        print(f"build.py: error: {e}", file=sys.stderr)
        return 2
    except BuildError as e:
        print(f"build.py: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # a file build.py reads or writes itself (a stamp, a lock file)
        where = f"{e.filename}: " if e.filename else ""
        print(f"build.py: error: {where}{e.strerror or e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("build.py: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""`build.py test`: the runners, each a CI job script under ci/, and running them in order.

A runner is run as `bash ci/<script>` with the interpreter, Bazel and its options in the
environment (JAXCORE_PYTHON, JAXCORE_BAZEL, ...) and JAXCORE_SKIP_SETUP=1, since build.py has
done the setup; a failing runner does not stop the ones after it, but fails the command.
"""

import os
from pathlib import Path

from _common import REPO_ROOT, BuildError, UsageError, fmt, log, run
from _toolchain import bazel_command

# The ci/ job script each --runners entry runs ({backend}: the --backend given), in the
# default order.
RUNNER_SCRIPTS = {
    "bazel": "run_bazel_test_{backend}.sh",
    "asan": "run_bazel_test_asan.sh",
    # The native CPU kernels cross-compiled for linux-aarch64 (their portable build), their
    # native test run under qemu-aarch64, and the aarch64 jaxcore-cpu wheel; CPU only.
    "aarch64": "run_native_aarch64.sh",
    "pytest": "run_pytest_{backend}.sh",
    # The whole pytest suite again on the newest Python found (3.13, else 3.12) with the
    # newest end of the JAX range (build/requirements_lock_3_13.txt); CPU only.
    "newest": "run_pytest_newest.sh",
    "docs": "run_docs.sh",
    # ruff check, ruff format --check, mypy and shellcheck over the repository.
    "lint": "run_lint.sh",
}
# Runners that test one backend's build of the native CPU kernels: pytest loads the library.
_NEED_KERNELS = ("pytest", "newest")
# The native CPU kernel library; the pytest run loads the one Bazel built
# ($JAXCORE_CPU_KERNELS_LIB).
NATIVE_KERNELS_TARGET = "//jaxcore_cpu:libjaxcore_cpu_kernels.so"
NATIVE_KERNELS_PATH = "jaxcore_cpu/libjaxcore_cpu_kernels.so"


# Runners that test the CPU backend only.
CPU_ONLY_RUNNERS = ("aarch64", "newest")


def default_runners(backend):
    """The runners `test` runs without --runners: the CPU-only ones on CPU only."""
    return [r for r in RUNNER_SCRIPTS if backend == "cpu" or r not in CPU_ONLY_RUNNERS]


def parse_runners(value, backend):
    """Turns --runners (None: the default list) into the runner names, checked.

    Raises:
      UsageError: an unknown or empty runner list, or `newest` for an accelerator backend.
    """
    if value is None:
        return default_runners(backend)
    runners = [r.strip() for r in value.split(",") if r.strip()]
    unknown = [r for r in runners if r not in RUNNER_SCRIPTS]
    if unknown or not runners:
        raise UsageError(
            f"--runners must list {', '.join(RUNNER_SCRIPTS)} (any of them), got {value!r}"
        )
    for runner in CPU_ONLY_RUNNERS:
        if runner in runners and backend != "cpu":
            raise UsageError(
                f"the {runner} runner tests the CPU backend only, not --backend={backend}"
            )
    return runners


def build_native_kernels(bazel, args):
    """Builds the native CPU kernel library; returns its absolute path (None in a dry run)."""
    build = bazel_command(bazel, args, "build", NATIVE_KERNELS_TARGET)
    if args.dry_run:
        print(fmt(build))
        return None
    log(f"building {NATIVE_KERNELS_TARGET}")
    run(build, verbose=args.verbose)
    info = bazel_command(bazel, args, "info", "bazel-bin")
    lib = Path(run(info, verbose=args.verbose, capture=True).stdout.strip()) / NATIVE_KERNELS_PATH
    if not lib.is_absolute() or not lib.is_file():
        raise BuildError(f"Bazel reported success but {lib} is missing")
    return lib


def run_runners(runners, *, python, bazel, args):
    """Runs each runner's ci/ script in order; raises BuildError naming those that failed.

    Args:
      runners: the runner names (parse_runners).
      python: the interpreter the jobs test with (JAXCORE_PYTHON).
      bazel: the Bazel binary (JAXCORE_BAZEL).
      args: the parsed options (backend, bazel options, dry_run, verbose).
    """
    env = dict(
        os.environ,
        JAXCORE_SKIP_SETUP="1",
        JAXCORE_PYTHON=str(python),
        JAXCORE_BAZEL=str(bazel),
        JAXCORE_BAZEL_OPTIONS=fmt(args.bazel_options),
        JAXCORE_BAZEL_STARTUP_OPTIONS=fmt(args.bazel_startup_options),
    )
    if any(r in _NEED_KERNELS for r in runners):
        # pytest loads the library Bazel builds (the ci jobs keep a path given here).
        lib = build_native_kernels(bazel, args)
        if lib is not None:
            env["JAXCORE_CPU_KERNELS_LIB"] = str(lib)
    scripts = [REPO_ROOT / "ci" / RUNNER_SCRIPTS[r].format(backend=args.backend) for r in runners]
    missing = [str(s.relative_to(REPO_ROOT)) for s in scripts if not s.exists()]
    if missing and not args.dry_run:
        raise BuildError(f"{', '.join(missing)} missing; no runner was started")
    failed = []
    for script in scripts:
        cmd = ["bash", str(script)]
        if args.dry_run:
            print(fmt(cmd))
            continue
        log(f"running {script.relative_to(REPO_ROOT)}")
        if run(cmd, verbose=args.verbose, env=env, check=False).returncode != 0:
            failed.append(script.name)
    if failed:
        raise BuildError(f"test run failed: {', '.join(failed)}")

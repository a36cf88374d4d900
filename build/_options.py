"""Checks every command-line option before build.py installs or writes anything.

A bad option is a UsageError (exit status 2) whose one-line message names the flag; the
checked values are stored on the parsed arguments for the commands to use.
"""

import os
import re
from pathlib import Path

from _common import REPO_ROOT, UsageError
from _locks import check_python, parse_python_version
from _runners import parse_runners
from _toolchain import check_bazel_path
from _wheels import parse_wheels


def check_output_path(value):
    """Checks that --output_path is, or can be made, a writable directory; returns it absolute.

    Relative paths are relative to the repository root. Nothing is created here.
    """
    if not value.strip():
        raise UsageError("--output_path is empty; give the directory the wheels go into")
    output = Path(value)
    if not output.is_absolute():
        output = REPO_ROOT / output
    if output.is_symlink() and not output.exists():
        raise UsageError(f"--output_path={value} is a symbolic link to nothing")
    if output.exists() and not output.is_dir():
        raise UsageError(f"--output_path={value} exists and is not a directory")
    existing = output
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"--output_path={value} cannot be created: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"--output_path={value} is not writable: {existing} does not allow it")
    return output


def check_bazel_options(flag, values):
    """Checks that each --bazel_options / --bazel_startup_options value is one Bazel option."""
    for value in values:
        if not value.startswith("-") or re.search(r"\s", value.split("=", 1)[0]):
            raise UsageError(
                f"{flag}={value!r} is not a Bazel option (one option, starting with -, per {flag})"
            )


def check_versions(args, *, cuda_versions, rocm_example):
    """Checks --cuda_major_version against `cuda_versions` and --rocm_version is a ROCm 6.x."""
    if args.cuda_major_version not in cuda_versions:
        raise UsageError(
            f"--cuda_major_version={args.cuda_major_version} is not supported; "
            f"choose from {', '.join(map(str, cuda_versions))}"
        )
    if not re.fullmatch(r"6\.\d+(\.\d+)?", args.rocm_version):
        raise UsageError(
            f"--rocm_version={args.rocm_version!r} is not supported; the jaxcore-rocm6 wheel "
            "needs a ROCm 6.x version such as " + rocm_example
        )


def validate(args, *, cuda_versions, rocm_example):
    """Checks every option of `args.command`, cheapest first; stores the checked values.

    Sets args.wanted_python_version ((3, 13) or None), args.python (the checked
    --python_bin_path or None) and, for `build`, args.wheel_list and args.output_dir, and for
    `test`, args.runner_list.

    Raises:
      UsageError: the first bad option, named in a one-line message.
    """
    check_versions(args, cuda_versions=cuda_versions, rocm_example=rocm_example)
    check_bazel_options("--bazel_options", args.bazel_options)
    check_bazel_options("--bazel_startup_options", args.bazel_startup_options)
    if args.python_version and args.python_bin_path:
        raise UsageError("give --python_bin_path or --python_version, not both")
    args.wanted_python_version = (
        parse_python_version(args.python_version) if args.python_version else None
    )
    if args.command == "build":
        args.wheel_list = parse_wheels(args.wheels, args.cuda_major_version)
        args.output_dir = check_output_path(args.output_path)
    if args.command == "test":
        args.runner_list = parse_runners(args.runners, args.backend)
    if args.bazel_path:
        check_bazel_path(args.bazel_path)
    # Last: this runs the interpreter (bounded by a timeout).
    args.python = check_python(args.python_bin_path) if args.python_bin_path else None

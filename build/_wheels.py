"""The wheels: their names, Bazel targets, platform tags and version, and copying them out.

The version, the tested JAX range and the native platform tags are read from the .bzl files
the Bazel wheel rules load, so build.py and Bazel can never disagree about them.
"""

import ast
import os
import platform
import re
import shutil
import tempfile
import zipfile
from pathlib import Path

from _common import REPO_ROOT, BuildError, UsageError

VERSION_BZL = REPO_ROOT / "jaxcore" / "version.bzl"
PLATFORM_TAGS_BZL = REPO_ROOT / "jaxcore" / "tools" / "platform_tags.bzl"
# Wheels with native code: their platform tag comes from PLATFORM_TAGS_BZL, by CPU.
NATIVE_WHEELS = ("jaxcore-cpu",)


def _bzl_assignment(path, pattern, what):
    """Returns the match of `pattern` (one per line, MULTILINE) in the .bzl file `path`.

    Args:
      path: the .bzl file.
      pattern: a regular expression for the assignment, with groups for the values.
      what: the assignment as the error names it ("NATIVE_PLATFORM_TAGS").

    Raises:
      BuildError: the file cannot be read or has no such assignment.
    """
    try:
        text = path.read_text()
    except OSError as e:
        raise BuildError(f"cannot read {path}: {e.strerror}") from None
    found = re.search(pattern, text, re.MULTILINE)
    if not found:
        raise BuildError(f"{path} defines no {what}")
    return found


def jaxcore_version():
    """Reads the version the Bazel wheel rules use (jaxcore/version.bzl)."""
    return _bzl_assignment(VERSION_BZL, r'JAXCORE_VERSION\s*=\s*"([^"]+)"', "JAXCORE_VERSION")[1]


def jax_range():
    """The tested JAX range as ("0.10.2", "0.12.1"): inclusive low, exclusive high.

    Read from the wheels' JAX_REQUIREMENT in jaxcore/version.bzl (which
    tests/jax_version_test.py keeps equal to jaxcore/_jax_internals.py's range).
    """
    found = _bzl_assignment(
        VERSION_BZL,
        r'^JAX_REQUIREMENT\s*=\s*"jax>=([\d.]+),<([\d.]+)"',
        'JAX_REQUIREMENT = "jax>=LOW,<HIGH"',
    )
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
    found = _bzl_assignment(
        PLATFORM_TAGS_BZL, r"^NATIVE_PLATFORM_TAGS\s*=\s*(\{[^}]*\})", "NATIVE_PLATFORM_TAGS"
    )
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
    """The file name Bazel gives the wheel of `dist_name` (PEP 427 escaping)."""
    return f"{re.sub(r'[-_.]+', '_', dist_name)}-{version}-py3-none-{platform_tag}.whl"


def parse_wheels(value, cuda_major):
    """Turns `--wheels=a,b` (or `all`) into the ordered list of dist names."""
    specs = wheel_specs(cuda_major)
    names = [w.strip() for w in value.split(",") if w.strip()]
    if not names:
        raise UsageError("--wheels is empty; give a comma-separated list or 'all'")
    if names == ["all"]:
        return list(specs)
    unknown = [n for n in names if n not in specs]
    if unknown:
        raise UsageError(
            f"unknown wheel {', '.join(repr(u) for u in unknown)} in --wheels; "
            f"choose from {', '.join(specs)} or 'all'"
        )
    return list(dict.fromkeys(names))


def check_wheel(path):
    """Checks that Bazel's output `path` exists and is a sound zip file."""
    if not path.is_file():
        raise BuildError(f"Bazel reported success but {path} is missing")
    try:
        with zipfile.ZipFile(path) as zf:
            bad = zf.testzip()
    except (OSError, zipfile.BadZipFile):
        bad = path.name
    if bad is not None:
        raise BuildError(f"{path} is a corrupt zip file")


def install_outputs(paths, output):
    """Copies every wheel into `output`, all or none: nothing partial is ever left there.

    The wheels are copied into a staging directory inside `output` first, then renamed into
    place; a wheel of the same name already there is set aside and put back if any step fails.

    Raises:
      BuildError: `output` cannot be written; it is left as it was.
    """
    try:
        output.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".jaxcore-wheels-", dir=output))
    except OSError as e:
        raise BuildError(f"cannot write the wheels into {output}: {e.strerror}") from None
    moved = []  # (the wheel's place in output, where an older file of its name was set aside)
    try:
        for path in paths:
            shutil.copyfile(path, staging / path.name)
        (staging / "old").mkdir()
        for path in paths:
            target, old = output / path.name, staging / "old" / path.name
            if os.path.lexists(target):
                os.replace(target, old)
            moved.append((target, old))
            os.replace(staging / path.name, target)
    except OSError as e:
        for target, old in reversed(moved):
            if os.path.lexists(old):
                os.replace(old, target)
            elif os.path.lexists(target):
                os.unlink(target)
        raise BuildError(f"cannot write the wheels into {output}: {e.strerror}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)

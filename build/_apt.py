"""Installing Debian packages, where that is possible without asking anybody (root on Debian)."""

import os
import re
import shutil
from pathlib import Path

from _common import BuildError, log, run

_BAZEL_HINT = "install Bazel 4.2.3 (https://bazel.build) and pass --bazel_path"


def is_debian_root():
    """Whether this process may run apt-get: root on Debian or Ubuntu, with apt-get on PATH."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("apt-get"):
        return False
    try:
        release = Path("/etc/os-release").read_text()
    except OSError:
        return False
    ids = re.findall(r"^(?:ID|ID_LIKE)=\"?([^\"\n]+)", release, re.MULTILINE)
    return any(word in ("debian", "ubuntu") for line in ids for word in line.split())


def apt_install(packages, *, reason, verbose, hint=_BAZEL_HINT):
    """Installs Debian packages; elsewhere says what to install instead.

    Args:
      packages: the Debian package names.
      reason: what is missing, for the log and the error ("Bazel").
      verbose: whether to log each command.
      hint: what to do on a system without apt-get.

    Raises:
      BuildError: this is not root on Debian/Ubuntu, or apt-get failed.
    """
    if not is_debian_root():
        raise BuildError(
            f"{reason} is missing. Install the Debian/Ubuntu packages "
            f"{' '.join(packages)} (apt-get install {' '.join(packages)}), or on other systems "
            f"{hint}."
        )
    log(f"installing {' '.join(packages)} with apt-get ({reason})")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-qq"], verbose=verbose, env=env)
    run(["apt-get", "install", "-y", "-qq", *packages], verbose=verbose, env=env)

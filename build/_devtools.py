"""The docs and CI-check tools (mkdocs, actionlint, linters) in the managed venv.

They are locked in build/requirements_dev_lock.txt, layered on the main lock: its pins of
packages the main lock also has equal the main lock's, so installing it never changes a test
requirement. ci/run_docs.sh and ci/run_lint.sh use them.
"""

import hashlib

from _common import REPO_ROOT, fmt, log, pip_install_command, run

DEV_LOCK_FILE = REPO_ROOT / "build" / "requirements_dev_lock.txt"


def ensure_dev_tools(python, *, verbose, dry_run):
    """Installs DEV_LOCK_FILE into the venv of `python`, unless its stamp says it is there.

    Skipped when the lock file is absent.
    """
    if not DEV_LOCK_FILE.exists():
        return
    stamp = python.parent.parent / ".jaxcore_dev_tools_stamp"
    want = f"{hashlib.sha256(DEV_LOCK_FILE.read_bytes()).hexdigest()} {python}"
    if stamp.exists() and stamp.read_text() == want:
        return
    install = pip_install_command(python, DEV_LOCK_FILE)
    if dry_run:
        print(fmt(install))
        return
    log(f"installing {DEV_LOCK_FILE.relative_to(REPO_ROOT)} into {python.parent.parent}")
    run(install, verbose=verbose)
    stamp.write_text(want)

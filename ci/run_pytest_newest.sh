#!/usr/bin/env bash
# CI job: the whole pytest suite at the newest end of the tested JAX range -- the newest Python
# found (3.13, else 3.12; see JAXCORE_NEWEST_PYTHONS) in its own venv with
# build/requirements_lock_3_13.txt (jax/jaxlib 0.12.0.1) -- in the CPU pytest job's phases.
# The other pytest and Bazel jobs test the oldest end (Python 3.11, jax 0.10.2). Without a
# Python 3.12+ it prints SKIPPED and exits 0 (JAXCORE_NEWEST_REQUIRED=1: fails instead).
# Runnable by hand from any directory; see ci/envs/default.env for the settings.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source ci/envs/default.env
source ci/_common.sh
ci_pytest_newest_job

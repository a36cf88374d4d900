#!/usr/bin/env bash
# CI job: pytest on TPU chips, each xdist worker pinned to one chip by the root
# conftest.py, then multiaccelerator tests serially.
# Runnable by hand from any directory; see ci/envs/default.env for the settings.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# A TPU chip is owned by one process at a time.
export JAXCORE_TESTS_PER_ACCELERATOR="${JAXCORE_TESTS_PER_ACCELERATOR:-1}"
source ci/envs/default.env
source ci/_common.sh
ci_pytest_accelerator_job tpu tpu

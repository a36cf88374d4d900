#!/usr/bin/env bash
# CI job: Bazel tests on TPU chips, one test per chip under
# build/parallel_accelerator_execute.sh, then multiaccelerator tests one at a time.
# Runnable by hand from any directory; see ci/envs/default.env for the settings.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# A TPU chip is owned by one process at a time.
export JAXCORE_TESTS_PER_ACCELERATOR="${JAXCORE_TESTS_PER_ACCELERATOR:-1}"
source ci/envs/default.env
source ci/_common.sh
ci_bazel_accelerator_job tpu tpu

#!/usr/bin/env bash
# CI job: Bazel tests on AMD GPUs, every test under
# build/parallel_accelerator_execute.sh, then multiaccelerator tests one at a time.
# Runnable by hand from any directory; see ci/envs/default.env for the settings.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source ci/envs/default.env
source ci/_common.sh
ci_bazel_accelerator_job rocm gpu

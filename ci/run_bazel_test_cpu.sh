#!/usr/bin/env bash
# CI job: Bazel tests on CPU (single-device tests in parallel, then multiaccelerator
# tests one at a time).
# Runnable by hand from any directory; see ci/envs/default.env for the settings.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source ci/envs/default.env
source ci/_common.sh
ci_bazel_cpu_job

#!/usr/bin/env bash
# CI job: pytest on CPU (pytest-xdist for single-device tests, then multiaccelerator
# tests serially).
# Runnable by hand from any directory; see ci/envs/default.env for the settings.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source ci/envs/default.env
source ci/_common.sh
ci_pytest_cpu_job

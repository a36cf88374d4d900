#!/usr/bin/env bash
# CI job: pytest on NVIDIA GPUs, each xdist worker pinned to one GPU by the root
# conftest.py, then multiaccelerator tests serially.
# Runnable by hand from any directory; see ci/envs/default.env for the settings.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source ci/envs/default.env
source ci/_common.sh
ci_pytest_accelerator_job cuda gpu

#!/usr/bin/env bash
# CI job: the native CPU kernel tests (//jaxcore_cpu:qmm_native_test) built and run under
# AddressSanitizer and UndefinedBehaviorSanitizer (bazel test --config=asan).
# Runnable by hand from any directory; see ci/envs/default.env for the settings.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source ci/envs/default.env
source ci/_common.sh
ci_bazel_asan_job

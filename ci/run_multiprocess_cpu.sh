#!/usr/bin/env bash
# CI job: only the multi-process tests (`multiprocess` tag/marker): programs run as several
# local JAX processes under `python -m jaxcore.launch`, first as Bazel targets, then with
# pytest-xdist. Each launch takes its coordinator port from the OS, so tests run in parallel.
# The full CPU jobs (run_bazel_test_cpu.sh, run_pytest_cpu.sh) run these tests too.
# Runnable by hand from any directory; see ci/envs/default.env for the settings.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source ci/envs/default.env
source ci/_common.sh

ci_multiprocess_cpu_job() {
  JOB_STATUS=0
  ci_setup cpu
  local jobs code=0
  jobs="$(ci_min "$(ci_cpu_cores)" "$(ci_ram_jobs)")"
  ci_log "phase 1: bazel, multiprocess tests, --local_test_jobs=$jobs"
  # The cpu suite holds only CPU targets; the tag picks the multiprocess ones.
  ci_bazel_test --config=cpu --local_test_jobs="$jobs" \
    --test_tag_filters=multiprocess -- //tests:cpu_tests || code=$?
  # No matching target is a failure here: this job exists to run them.
  ci_phase_done "phase 1 (bazel, cpu, multiprocess)" "$code"
  ci_log "phase 2: pytest -n $JAXCORE_PYTEST_WORKERS, multiprocess tests"
  code=0
  ci_run env JAX_PLATFORMS=cpu "$JAXCORE_PYTHON" -m pytest -n "$JAXCORE_PYTEST_WORKERS" \
    -m multiprocess "$JAXCORE_TEST_DIR" || code=$?
  ci_phase_done "phase 2 (pytest, cpu, multiprocess)" "$code"
  ci_finish
}

ci_multiprocess_cpu_job

# shellcheck shell=bash
# Shared by the ci/run_*.sh jobs; sourced (after ci/envs/default.env) with the working
# directory at the repository root. Each job is one call to one of the *_job functions below.
#
# Bazel jobs run two phases: single-accelerator tests in parallel, then `multiaccelerator`
# tests one at a time with every device visible. pytest jobs do the same with pytest-xdist.
# Both phases always run; the job fails with the first failing phase's exit code.

# Absolute path of the scheduler the accelerator jobs run every test under.
readonly CI_SCHEDULER="$PWD/build/parallel_accelerator_execute.sh"
# The native CPU kernels: the library the pytest jobs load, and the tests of its C++ API.
readonly CI_NATIVE_KERNELS_TARGET="//jaxcore_cpu:libjaxcore_cpu_kernels.so"
readonly CI_NATIVE_TESTS=("//jaxcore_cpu:qmm_native_test")
# Under the sanitizers, the FFI handlers too: the FFI-level test files in a JAX process.
readonly CI_ASAN_TESTS=("${CI_NATIVE_TESTS[@]}" "//tests:cpu_kernels_asan_test_cpu")
# Exit codes meaning "no tests matched": Bazel's and pytest's.
readonly BAZEL_NO_TESTS=4
readonly PYTEST_NO_TESTS=5

ci_log() {
  printf '[ci] %s\n' "$*" >&2
}

ci_die() {
  printf '[ci] error: %s\n' "$*" >&2
  exit 1
}

# Prints a command, shell-quoted, then runs it (only prints it when JAXCORE_DRY_RUN=1).
ci_run() {
  local quoted
  printf -v quoted ' %q' "$@"
  printf '+%s\n' "$quoted"
  [[ "$JAXCORE_DRY_RUN" == 1 ]] && return 0
  "$@"
}

# Runs `build/build.py setup` for backend $1 unless JAXCORE_SKIP_SETUP=1.
ci_setup() {
  if [[ "$JAXCORE_SKIP_SETUP" != 1 ]]; then
    ci_run python3 build/build.py setup --backend="$1"
  fi
}

ci_min() {
  local m="$1" v
  for v in "$@"; do
    ((v < m)) && m="$v"
  done
  printf '%d\n' "$m"
}

ci_cpu_cores() {
  nproc
}

# How many test processes fit in RAM at JAXCORE_RAM_PER_TEST_GIB each (at least 1).
ci_ram_jobs() {
  local kib
  kib="$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)"
  local jobs=$((kib / (JAXCORE_RAM_PER_TEST_GIB * 1024 * 1024)))
  ((jobs >= 1)) || jobs=1
  printf '%d\n' "$jobs"
}

# Sets ACCELERATOR_COUNT for platform $1 (cuda, rocm, tpu): JAXCORE_ACCELERATOR_COUNT, or what
# the scheduler detects. Finding none is an error, except in a dry run (which assumes 1).
ci_detect_accelerators() {
  local platform="$1" detected count source
  detected="$(JAXCORE_ACCELERATOR_PLATFORM="$platform" "$CI_SCHEDULER" --detect)" ||
    ci_die "accelerator detection failed (JAXCORE_ACCELERATOR_COUNT='${JAXCORE_ACCELERATOR_COUNT:-}')"
  read -r _ count source <<<"$detected"
  if [[ "$source" == default ]]; then
    [[ "$JAXCORE_DRY_RUN" == 1 ]] ||
      ci_die "no $platform accelerator found on this machine; set JAXCORE_ACCELERATOR_COUNT to override detection"
    ci_log "dry run: no $platform accelerator found, assuming 1"
  fi
  ACCELERATOR_COUNT="$count"
}

# Parallel test processes for an accelerator job: accelerators x per-accelerator, capped by
# CPU cores and by RAM.
ci_accelerator_jobs() {
  ci_min "$((ACCELERATOR_COUNT * JAXCORE_TESTS_PER_ACCELERATOR))" "$(ci_cpu_cores)" "$(ci_ram_jobs)"
}

# Records one phase's exit code; code $2 counts as success when $3 (an allowed "no tests"
# code) matches it. Sets JOB_STATUS to the first failure.
ci_phase_done() {
  local phase="$1" code="$2" allowed="${3:-}"
  if [[ "$code" == 0 || (-n "$allowed" && "$code" == "$allowed") ]]; then
    [[ "$code" == 0 ]] || ci_log "$phase: no tests to run there"
    ci_log "$phase: passed"
    return 0
  fi
  ci_log "$phase: FAILED (exit code $code)"
  ((JOB_STATUS != 0)) || JOB_STATUS="$code"
}

ci_finish() {
  if ((JOB_STATUS == 0)); then
    ci_log "job passed"
  else
    ci_log "job failed"
  fi
  exit "$JOB_STATUS"
}

# One `bazel $1` (test, build) with the CI config and the caller's extra options (which come
# last, so they win); targets after `--`.
ci_bazel() {
  local command="$1"
  shift
  local -a startup options
  # The options are shell words (build.py writes them with shlex.quote).
  eval "startup=($JAXCORE_BAZEL_STARTUP_OPTIONS)"
  eval "options=($JAXCORE_BAZEL_OPTIONS)"
  local -a args=("$@") targets=()
  local i
  for i in "${!args[@]}"; do
    if [[ "${args[$i]}" == -- ]]; then
      targets=("${args[@]:i}")
      args=("${args[@]:0:i}")
      break
    fi
  done
  ci_run "$JAXCORE_BAZEL" "${startup[@]}" "$command" --config=ci "${args[@]}" "${options[@]}" \
    "${targets[@]}"
}

ci_bazel_test() {
  ci_bazel test "$@"
}

# Builds the native CPU kernel library with Bazel and exports its absolute path as
# JAXCORE_CPU_KERNELS_LIB, which the pytest run loads (so pytest tests the library Bazel
# built). Keeps a path the caller already set (build.py's test command builds it first).
ci_native_kernels() {
  if [[ -n "${JAXCORE_CPU_KERNELS_LIB:-}" ]]; then
    ci_log "native CPU kernels: $JAXCORE_CPU_KERNELS_LIB (JAXCORE_CPU_KERNELS_LIB)"
    return 0
  fi
  local -a startup options
  eval "startup=($JAXCORE_BAZEL_STARTUP_OPTIONS)"
  eval "options=($JAXCORE_BAZEL_OPTIONS)"
  ci_run "$JAXCORE_BAZEL" "${startup[@]}" build --config=ci "${options[@]}" -- \
    "$CI_NATIVE_KERNELS_TARGET" || return
  local lib="jaxcore_cpu/libjaxcore_cpu_kernels.so" bin
  if [[ "$JAXCORE_DRY_RUN" == 1 ]]; then
    export JAXCORE_CPU_KERNELS_LIB="$PWD/bazel-bin/$lib"
    return 0
  fi
  bin="$("$JAXCORE_BAZEL" "${startup[@]}" info --config=ci "${options[@]}" bazel-bin)" || return
  if [[ "$bin" != /* || ! -f "$bin/$lib" ]]; then
    ci_log "Bazel built $CI_NATIVE_KERNELS_TARGET but '$bin/$lib' is not a file"
    return 1
  fi
  export JAXCORE_CPU_KERNELS_LIB="$bin/$lib"
  ci_log "native CPU kernels: $JAXCORE_CPU_KERNELS_LIB"
}

# Bazel job on CPU: no scheduler needed. The native kernel tests run beside the Python ones.
ci_bazel_cpu_job() {
  JOB_STATUS=0
  ci_setup cpu
  local jobs code
  jobs="$(ci_min "$(ci_cpu_cores)" "$(ci_ram_jobs)")"
  ci_log "phase 1: single-device tests, --local_test_jobs=$jobs"
  code=0
  ci_bazel_test --config=cpu --local_test_jobs="$jobs" \
    --test_tag_filters=jaxcore_test_cpu,-multiaccelerator -- //tests:cpu_tests \
    "${CI_NATIVE_TESTS[@]}" || code=$?
  ci_phase_done "phase 1 (bazel, cpu)" "$code"
  ci_log "phase 2: multiaccelerator tests, one at a time"
  code=0
  ci_bazel_test --config=cpu --local_test_jobs=1 \
    --test_tag_filters=multiaccelerator -- //tests:cpu_tests || code=$?
  ci_phase_done "phase 2 (bazel, cpu, multiaccelerator)" "$code" "$BAZEL_NO_TESTS"
  ci_finish
}

# Bazel job for the native kernels under AddressSanitizer + UBSan (.bazelrc's asan config);
# any report fails the test (halt_on_error).
ci_bazel_asan_job() {
  JOB_STATUS=0
  ci_setup cpu
  local code=0
  ci_log "native tests and FFI handlers under AddressSanitizer and UndefinedBehaviorSanitizer"
  ci_bazel_test --config=asan -- "${CI_ASAN_TESTS[@]}" || code=$?
  ci_phase_done "asan (bazel, native tests, FFI handlers)" "$code"
  ci_finish
}

# The native kernels for linux-aarch64 (.bazelrc's aarch64 config): their native test under
# qemu-aarch64, emulating a CPU with the dot-product extension (qemu's "max": the sdot kernel
# and the portable ones) and one without (a Cortex-A53: the run-time check must fall back to
# the portable kernels, none of which may need more than Armv8.0), then the aarch64
# jaxcore-cpu wheel.
ci_native_aarch64_job() {
  JOB_STATUS=0
  ci_setup cpu
  local tool
  for tool in aarch64-linux-gnu-g++ qemu-aarch64; do
    if [[ "$JAXCORE_DRY_RUN" != 1 ]] && ! command -v "$tool" >/dev/null; then
      ci_die "$tool is missing: run 'python3 build/build.py test --runners=aarch64', which installs it (Debian/Ubuntu: apt-get install g++-aarch64-linux-gnu qemu-user)"
    fi
  done
  local code=0
  local cpu isa
  for cpu in max:dotprod cortex-a53:portable; do
    isa="${cpu#*:}"
    cpu="${cpu%%:*}"
    code=0
    ci_log "native tests built for aarch64, run under qemu-aarch64 -cpu $cpu (expecting $isa)"
    ci_bazel_test --config=aarch64 --test_env=QEMU_CPU="$cpu" --test_env=JAXCORE_EXPECT_ISA="$isa" \
      -- "${CI_NATIVE_TESTS[@]}" || code=$?
    ci_phase_done "aarch64 (bazel, native tests under qemu -cpu $cpu)" "$code"
  done
  code=0
  ci_bazel build --config=aarch64 -- //jaxcore/tools:jaxcore_cpu_wheel || code=$?
  ci_phase_done "aarch64 (bazel, the jaxcore-cpu wheel)" "$code"
  ci_finish
}

# Bazel job on accelerators: platform $1 (cuda, rocm, tpu), test suite $2 (gpu, tpu).
ci_bazel_accelerator_job() {
  local platform="$1" suite="$2"
  JOB_STATUS=0
  ci_setup "$platform"
  ci_detect_accelerators "$platform"
  local jobs code
  jobs="$(ci_accelerator_jobs)"
  local -a scheduler_env=(
    --run_under="$CI_SCHEDULER"
    --test_env=JAXCORE_ACCELERATOR_PLATFORM="$platform"
    --test_env=JAXCORE_ACCELERATOR_COUNT="$ACCELERATOR_COUNT"
    --test_env=JAXCORE_TESTS_PER_ACCELERATOR="$JAXCORE_TESTS_PER_ACCELERATOR"
    --test_env=JAXCORE_ACCELERATOR_WAIT_S="$JAXCORE_ACCELERATOR_WAIT_S"
    --test_env=JAXCORE_LOCK_DIR="$JAXCORE_LOCK_DIR"
    # The locks live outside the sandbox, shared by every test.
    --sandbox_writable_path="$JAXCORE_LOCK_DIR"
  )
  if [[ -n "${JAXCORE_ACCELERATOR_LOG:-}" ]]; then
    scheduler_env+=(--test_env=JAXCORE_ACCELERATOR_LOG="$JAXCORE_ACCELERATOR_LOG"
      --sandbox_writable_path="$(dirname -- "$JAXCORE_ACCELERATOR_LOG")")
  fi
  # The scheduler refuses a lock dir others can write. -m applies to the lock dir only;
  # missing parents get the usual mode, as they should.
  # shellcheck disable=SC2174  # -m meant for the deepest directory only
  [[ "$JAXCORE_DRY_RUN" == 1 ]] || mkdir -p -m 700 -- "$JAXCORE_LOCK_DIR"
  ci_log "phase 1: single-accelerator tests on $ACCELERATOR_COUNT $platform devices x" \
    "$JAXCORE_TESTS_PER_ACCELERATOR, --local_test_jobs=$jobs"
  code=0
  ci_bazel_test --config="$platform" "${scheduler_env[@]}" --local_test_jobs="$jobs" \
    --test_tag_filters="jaxcore_test_$suite,-multiaccelerator" -- "//tests:${suite}_tests" ||
    code=$?
  ci_phase_done "phase 1 (bazel, $platform)" "$code"
  ci_log "phase 2: multiaccelerator tests, one at a time, every device visible"
  code=0
  ci_bazel_test --config="$platform" --local_test_jobs=1 \
    --test_tag_filters=multiaccelerator -- "//tests:${suite}_tests" ||
    code=$?
  ci_phase_done "phase 2 (bazel, $platform, multiaccelerator)" "$code" "$BAZEL_NO_TESTS"
  ci_finish
}

# True when some test source is marked multiaccelerator, so its phase must collect tests.
ci_has_multiaccelerator_tests() {
  grep -qsE 'mark\.multiaccelerator' -- "$JAXCORE_TEST_DIR"/*_test.py
}

# Records the serial multiaccelerator pytest phase; "no tests" only passes when no test
# source is marked multiaccelerator.
ci_pytest_phase2_done() {
  local phase="$1" code="$2"
  if [[ "$code" == "$PYTEST_NO_TESTS" ]] && ci_has_multiaccelerator_tests; then
    ci_log "$phase: collected no tests although $JAXCORE_TEST_DIR has multiaccelerator tests"
    ci_phase_done "$phase" "$code"
    return
  fi
  ci_phase_done "$phase" "$code" "$PYTEST_NO_TESTS"
}

# pytest job on CPU, with the native kernel library Bazel builds.
ci_pytest_cpu_job() {
  JOB_STATUS=0
  ci_setup cpu
  local code=0
  ci_log "phase 0: the native CPU kernel library"
  ci_native_kernels || code=$?
  ci_phase_done "phase 0 (bazel build, native CPU kernels)" "$code"
  code=0
  ci_log "phase 1: pytest -n $JAXCORE_PYTEST_WORKERS, single-device tests"
  ci_run env JAX_PLATFORMS=cpu "$JAXCORE_PYTHON" -m pytest -n "$JAXCORE_PYTEST_WORKERS" \
    -m "not multiaccelerator" "$JAXCORE_TEST_DIR" || code=$?
  ci_phase_done "phase 1 (pytest, cpu)" "$code"
  ci_log "phase 2: multiaccelerator tests, serially"
  code=0
  ci_run env JAX_PLATFORMS=cpu "$JAXCORE_PYTHON" -m pytest -p no:xdist -m multiaccelerator \
    "$JAXCORE_TEST_DIR" || code=$?
  ci_pytest_phase2_done "phase 2 (pytest, cpu, multiaccelerator)" "$code"
  ci_finish
}

# pytest job on accelerators: platform $1 (cuda, rocm, tpu), JAXCORE_TEST_BACKEND $2 (gpu, tpu).
# The root conftest.py pins each xdist worker to one device.
ci_pytest_accelerator_job() {
  local platform="$1" backend="$2"
  JOB_STATUS=0
  ci_setup "$platform"
  ci_detect_accelerators "$platform"
  local workers code=0
  workers="$(ci_accelerator_jobs)"
  ci_log "phase 1: pytest -n $workers on $ACCELERATOR_COUNT $platform devices"
  ci_run env JAX_PLATFORMS="$platform" JAXCORE_TEST_BACKEND="$backend" \
    JAXCORE_ENABLE_XDIST_PINNING=1 JAXCORE_ACCELERATOR_PLATFORM="$platform" \
    JAXCORE_ACCELERATOR_COUNT="$ACCELERATOR_COUNT" \
    "$JAXCORE_PYTHON" -m pytest -n "$workers" -m "not multiaccelerator" "$JAXCORE_TEST_DIR" ||
    code=$?
  ci_phase_done "phase 1 (pytest, $platform)" "$code"
  ci_log "phase 2: multiaccelerator tests, serially, every device visible"
  code=0
  ci_run env JAX_PLATFORMS="$platform" JAXCORE_TEST_BACKEND="$backend" \
    "$JAXCORE_PYTHON" -m pytest -p no:xdist -m multiaccelerator "$JAXCORE_TEST_DIR" || code=$?
  ci_pytest_phase2_done "phase 2 (pytest, $platform, multiaccelerator)" "$code"
  ci_finish
}

# Prints the interpreter of Python $1 (MAJOR.MINOR): `pythonX.Y` on PATH when it runs that
# version (a pyenv shim for a version pyenv has but does not select does not), else one under
# $PYENV_ROOT/versions (default ~/.pyenv), as build/build.py's --python_version finds it.
# Returns 1 when there is none.
ci_find_python() {
  local version="$1" candidate found
  local -a candidates=()
  if found="$(command -v "python$version")"; then
    candidates+=("$found")
  fi
  for candidate in "${PYENV_ROOT:-$HOME/.pyenv}/versions/$version".*/bin/"python$version"; do
    [[ -x "$candidate" ]] && candidates+=("$candidate")
  done
  for candidate in "${candidates[@]}"; do
    found="$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" ||
      continue
    if [[ "$found" == "$version" ]]; then
      printf '%s\n' "$candidate"
      return 0
    fi
  done
  return 1
}

# pytest job at the newest end of the tested JAX range: the CPU pytest job (the whole suite,
# same phases, same native library) run by a venv of the newest Python found among
# JAXCORE_NEWEST_PYTHONS, with build/requirements_lock_3_13.txt (jax/jaxlib 0.12.0.1). Without
# such a Python the job says so and is skipped (exit 0), or fails when
# JAXCORE_NEWEST_REQUIRED=1.
ci_pytest_newest_job() {
  JOB_STATUS=0
  ci_setup cpu
  local version base="" venv
  for version in $JAXCORE_NEWEST_PYTHONS; do
    if base="$(ci_find_python "$version")"; then
      break
    fi
    base=""
  done
  if [[ -z "$base" ]]; then
    local looked="python${JAXCORE_NEWEST_PYTHONS// /, python}"
    if [[ "$JAXCORE_NEWEST_REQUIRED" == 1 ]]; then
      ci_die "no Python for the newest JAX (looked for $looked on PATH and under pyenv), and JAXCORE_NEWEST_REQUIRED=1"
    fi
    ci_log "SKIPPED: no Python for the newest JAX (looked for $looked on PATH and under" \
      "pyenv): the newest end of the JAX range was NOT tested"
    ci_log "job skipped"
    exit 0
  fi
  venv="${JAXCORE_NEWEST_VENV:-$PWD/.venv-$version}"
  ci_log "newest end: Python $version ($base), venv $venv"
  ci_run env JAXCORE_VENV="$venv" python3 build/build.py venv --python_version="$version" ||
    ci_die "could not make the Python $version venv $venv (see above)"
  # The JAX it runs, and that jaxcore imports there and calls it tested.
  ci_run env JAX_PLATFORMS=cpu "$venv/bin/python" -m jaxcore ||
    ci_die "python -m jaxcore failed under Python $version"
  JAXCORE_PYTHON="$venv/bin/python"
  JAXCORE_SKIP_SETUP=1
  ci_pytest_cpu_job
}

#!/usr/bin/env bash
# CI job: the five wheels (`build/build.py build --wheels=all`) into $JAXCORE_WHEELS_DIR
# (default dist/), then the same build again from a copy of the sources in another directory
# (so a fresh Bazel output base: nothing cached), which must give byte-identical wheels.
# Prints each wheel's sha256; fails when a rebuilt wheel differs.
# Runnable by hand from any directory; see ci/envs/default.env for the settings.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source ci/envs/default.env
source ci/_common.sh

JOB_STATUS=0
ci_setup cpu
out="${JAXCORE_WHEELS_DIR:-dist}"
export JAXCORE_VENV="${JAXCORE_VENV:-$PWD/.venv}"

code=0
ci_log "phase 1: build --wheels=all into $out"
ci_run python3 build/build.py build --wheels=all --output_path="$out" || code=$?
ci_phase_done "phase 1 (wheels)" "$code"

code=0
ci_log "phase 2: a second clean build in another directory must give the same bytes"
copy="$(mktemp -d "${TMPDIR:-/tmp}/jaxcore-rebuild.XXXXXX")"
trap 'rm -rf -- "$copy"' EXIT
ci_run tar --exclude=./.git --exclude='./bazel-*' --exclude=./dist --exclude=./.venv \
  --exclude=./.jaxcore_configure.bazelrc --exclude=./.cache -cf "$copy/src.tar" . || code=$?
if ((code == 0)); then
  mkdir -p "$copy/src" && ci_run tar -xf "$copy/src.tar" -C "$copy/src" || code=$?
fi
if ((code == 0)); then
  (cd "$copy/src" && ci_run python3 build/build.py build --wheels=all \
    --output_path="$copy/dist") || code=$?
  (cd "$copy/src" && ci_run "$JAXCORE_BAZEL" shutdown) || true
fi
if ((code == 0)) && [[ "$JAXCORE_DRY_RUN" != 1 ]]; then
  for wheel in "$out"/*.whl; do
    first="$(sha256sum -- "$wheel" | cut -d' ' -f1)"
    second="$(sha256sum -- "$copy/dist/$(basename -- "$wheel")" 2>/dev/null | cut -d' ' -f1)" || true
    if [[ "$first" == "$second" ]]; then
      ci_log "reproducible: $(basename -- "$wheel") sha256=$first"
    else
      ci_log "NOT reproducible: $(basename -- "$wheel") sha256=$first, rebuilt: ${second:-missing}"
      code=1
    fi
  done
fi
ci_phase_done "phase 2 (reproducible wheels)" "$code"
ci_finish

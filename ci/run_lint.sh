#!/usr/bin/env bash
# CI job: code health, four checks over the whole repository, each a phase:
#   1. `ruff check .`          lint (ruff.toml);
#   2. `ruff format --check .` formatting (ruff.toml);
#   3. `mypy`                  types of jaxcore, jaxcore_cpu, jaxcore_gpu, jaxcore_tpu
#                              (mypy.ini), run by the venv's Python so jax's types resolve;
#   4. `shellcheck`            every shell script in ci/, build/, docker/, .ci/ and tests/, and
#                              every RUN of docker/Dockerfile.* (as scripts written by
#                              ci/dockerfile_run_scripts.py; the workflows' `run:` blocks:
#                              actionlint in ci/run_docs.sh).
# It prints each check's count of findings and fails on any finding. The tools come from
# build/requirements_dev_lock.txt, which `build/build.py setup` installs into the venv.
# Runnable by hand from any directory; see ci/envs/default.env for the settings.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source ci/envs/default.env
source ci/_common.sh

# Prints, one a line, the shell scripts under the given directories: *.sh files, files whose
# first line is a sh/bash shebang, and files with a `# shellcheck shell=` directive.
lint_shell_scripts() {
  local file first
  while IFS= read -r -d '' file; do
    first=""
    IFS= read -r first <"$file" || true
    if [[ "$file" == *.sh || "$first" =~ ^#!.*[/\ ](ba)?sh([[:space:]]|$) ]] ||
      grep -qE '^# shellcheck shell=' -- "$file"; then
      printf '%s\n' "$file"
    fi
  done < <(find "$@" -name __pycache__ -prune -o -type f -print0 | sort -z)
}

# Runs one check (its command after $1, the phase name, and $2, an extended regular expression
# matching one finding a line), shows its output and records the count of findings.
lint_phase() {
  local phase="$1" pattern="$2" out code=0 count
  shift 2
  out="$(mktemp "${TMPDIR:-/tmp}/jaxcore-lint.XXXXXX")"
  ci_log "$phase"
  ci_run "$@" >"$out" 2>&1 || code=$?
  cat -- "$out"
  count="$(grep -cE -- "$pattern" "$out" || true)"
  rm -f -- "$out"
  COUNTS+=("$phase: $count")
  ((count == 0 || code != 0)) || code=1
  ci_phase_done "$phase" "$code"
}

JOB_STATUS=0
COUNTS=()
ci_setup cpu
tools="$(dirname -- "$JAXCORE_PYTHON")"
for tool in ruff mypy shellcheck; do
  if [[ "$JAXCORE_DRY_RUN" != 1 && ! -x "$tools/$tool" ]]; then
    ci_die "$tools/$tool is missing: run 'python3 build/build.py setup', which installs build/requirements_dev_lock.txt"
  fi
done

lint_phase "ruff check" '^[^ :]+:[0-9]+:[0-9]+: ' \
  "$tools/ruff" check --output-format=concise .
lint_phase "ruff format" '^[^ :]+:[0-9]+:[0-9]+: unformatted: ' \
  "$tools/ruff" format --check --output-format=concise .
lint_phase "mypy" '^[^ :]+:[0-9]+: error: ' \
  "$JAXCORE_PYTHON" -m mypy --config-file mypy.ini --no-error-summary
mapfile -t scripts < <(lint_shell_scripts ci build docker .ci tests)
run_dir="$(mktemp -d "${TMPDIR:-/tmp}/jaxcore-dockerfile-runs.XXXXXX")"
trap 'rm -rf -- "$run_dir"' EXIT
mapfile -t run_scripts < <(python3 ci/dockerfile_run_scripts.py "$run_dir")
((${#run_scripts[@]})) || ci_die "ci/dockerfile_run_scripts.py found no RUN in docker/Dockerfile.*"
scripts+=("${run_scripts[@]}")
# -x follows `source` (paths relative to the repository root, where the scripts cd to).
ci_log "${#scripts[@]} shell scripts (${#run_scripts[@]} of them Dockerfile RUNs)"
lint_phase "shellcheck" '^[^ :]+:[0-9]+:[0-9]+: ' \
  "$tools/shellcheck" --external-sources --format=gcc -- "${scripts[@]}"

printf -v summary '%s, ' "${COUNTS[@]}"
ci_log "findings: ${summary%, }"
ci_finish

#!/bin/bash
# Runs one test on one accelerator slot, so many tests can share a machine's GPUs/TPUs.
#
# Usage:
#   bazel test --run_under="$PWD/build/parallel_accelerator_execute.sh" --local_test_jobs=N ...
#   build/parallel_accelerator_execute.sh <test executable> [args...]
#   build/parallel_accelerator_execute.sh --detect   # prints "<platform> <count> <source>",
#                                    # source = env | detected | default (nothing found)
#
# The test executable is found like Bazel's own wrappers find it: as given (absolute, relative
# to the working directory, or on PATH), else through the runfiles tree (RUNFILES_DIR,
# TEST_SRCDIR, with or without TEST_WORKSPACE) or the runfiles manifest.
#
# Settings (environment):
#   JAXCORE_ACCELERATOR_COUNT      accelerators to spread tests over. Default: detected from
#                                  `nvidia-smi -L`, `rocm-smi` or AMD /dev/dri render nodes,
#                                  /dev/accel* or /dev/vfio/<n> (TPU); else 1.
#   JAXCORE_ACCELERATOR_PLATFORM   cuda | rocm | tpu | generic. Default: detected (generic when
#                                  nothing is found). Decides which device variables are set.
#   JAXCORE_TESTS_PER_ACCELERATOR  tests sharing one accelerator at once (default 4).
#   JAXCORE_LOCK_DIR               lock directory (default /tmp/jaxcore_accelerator_locks_$USER).
#   JAXCORE_ACCELERATOR_WAIT_S     seconds to wait for a free slot before giving up (default
#                                  3600; decimals allowed; 0 = do not wait).
#   JAXCORE_ACCELERATOR_LOG        optional file; one line per test is appended to it.
#   JAXCORE_ACCELERATOR_DEV_DIR, JAXCORE_ACCELERATOR_SYSFS_DIR
#                                  where detection looks for device nodes and sysfs (default
#                                  /dev and /sys); for containers with remapped paths and tests.
#
# How a slot is chosen (fair, balanced, fast hand-over):
#   * Waiters queue in arrival order: a CLH queue made of flock'ed files. Each caller takes a
#     ticket under a short mutex, locks its own queue node and blocks (flock, no polling) on
#     its predecessor's node. Only the queue head picks a slot, so slots are handed out in
#     arrival order. A waiter that dies or times out leaves its node unmarked; its successor
#     then waits on the dead waiter's predecessor, so the queue never breaks. A caller that
#     finds nobody queued and a slot free claims it while holding the mutex, with no node.
#   * The head reads the slots' owner records, claims the free slot on the accelerator with
#     the fewest running tests (one test on every accelerator before a second on any), and
#     passes the turn on at once; only then does it take that (accelerator, slot) lock with
#     flock, so the next head is already choosing while this one starts its test. When every
#     slot is taken the head blocks reading a FIFO on which finishing wrappers announce each
#     release, so a slot is reused within milliseconds. Once a second it also re-probes the
#     locks, which frees slots whose owner was SIGKILLed before clearing its record.
#   * The slot lock, not the queue, is what bounds the tests per accelerator: whatever happens
#     to the queue, no more than JAXCORE_TESTS_PER_ACCELERATOR tests share a device.
#   * Each slot's lock is held on a file descriptor of this wrapper for the test's lifetime.
#     The descriptor is deliberately NOT inherited by the test: the slot is free exactly
#     when the test has ended and the wrapper has gone, and a daemon the test leaks cannot
#     keep a slot locked. The kernel drops the lock when the wrapper dies in any way, so no
#     stale lock survives a crash. SIGTERM/SIGINT/SIGHUP to the wrapper alone wait for the
#     test to end before the slot is released.
#   * Files in the lock directory: accelerator_<d>_slot_<s>.lock (+ .owner, the claim record),
#     queue.mutex, queue.tail (last ticket handed out), queue.node.<ticket>, released.fifo.
#
# Exit status: the test's own status; 2 for a bad setting or missing command; 73 when the lock
# directory cannot be made; 75 when no slot became free within JAXCORE_ACCELERATOR_WAIT_S;
# 126/127 when the test cannot be executed / found.

set -u -o pipefail

readonly PROG="parallel_accelerator_execute.sh"
readonly EXIT_USAGE=2
readonly EXIT_LOCK_DIR=73
readonly EXIT_WAIT_TIMEOUT=75
readonly EXIT_NOT_EXECUTABLE=126
readonly EXIT_NOT_FOUND=127
# While waiting for a slot, how often locks are re-probed to catch owners killed by SIGKILL.
readonly STALE_RECHECK_US=1000000
# A claimed slot whose lock is free is only treated as stale after this long.
readonly CLAIM_GRACE_US=2000000
# Old queue nodes are deleted by every caller whose ticket is a multiple of this.
readonly QUEUE_CLEANUP_EVERY=32

die() {
  local code="$1"
  shift
  printf '%s: error: %s\n' "$PROG" "$*" >&2
  exit "$code"
}

# Microseconds since the epoch (bash >= 5 builtin; `date` otherwise).
now_us() {
  if [[ -n "${EPOCHREALTIME:-}" ]]; then
    local t="${EPOCHREALTIME//[!0-9]/}"
    printf -v "$1" '%d' "$((10#$t))"
  else
    printf -v "$1" '%d' "$(($(date +%s%N) / 1000))"
  fi
}

# Formats microseconds as seconds with a '.' decimal point (for flock -w and read -t).
us_to_s() {
  printf -v "$1" '%d.%06d' "$(($2 / 1000000))" "$(($2 % 1000000))"
}

# Parses a non-negative decimal number of seconds into microseconds; returns 1 if malformed.
seconds_to_us() {
  local value="$2" whole frac
  [[ "$value" =~ ^([0-9]+)(\.([0-9]*))?$ ]] || return 1
  whole="${BASH_REMATCH[1]}"
  frac="${BASH_REMATCH[3]}000000"
  frac="${frac:0:6}"
  printf -v "$1" '%d' "$((10#$whole * 1000000 + 10#$frac))"
}

is_positive_int() {
  [[ "$1" =~ ^[0-9]+$ ]] && ((10#$1 > 0))
}

# --- Accelerator detection -------------------------------------------------------------------

readonly DEV_DIR="${JAXCORE_ACCELERATOR_DEV_DIR:-/dev}"
readonly SYSFS_DIR="${JAXCORE_ACCELERATOR_SYSFS_DIR:-/sys}"

# Number of NVIDIA GPUs listed by `nvidia-smi -L` (0 if it is missing or fails).
count_cuda() {
  local n=0 line
  command -v nvidia-smi >/dev/null 2>&1 || { echo 0; return; }
  while IFS= read -r line; do
    [[ "$line" == GPU\ [0-9]* ]] && n=$((n + 1))
  done < <(nvidia-smi -L 2>/dev/null)
  echo "$n"
}

# Number of AMD GPUs: distinct GPU[i] in `rocm-smi --showid`, else AMD render nodes.
count_rocm() {
  local line vendor node
  local -A seen=()
  if command -v rocm-smi >/dev/null 2>&1; then
    while IFS= read -r line; do
      [[ "$line" =~ ^GPU\[([0-9]+)\] ]] && seen["${BASH_REMATCH[1]}"]=1
    done < <(rocm-smi --showid 2>/dev/null)
    if ((${#seen[@]} > 0)); then
      echo "${#seen[@]}"
      return
    fi
  fi
  # ROCm's kernel driver exposes /dev/kfd; count render nodes whose PCI vendor is AMD
  # (0x1002), so an integrated GPU of another vendor is not counted.
  local n=0
  if [[ -e "$DEV_DIR/kfd" ]]; then
    for node in "$DEV_DIR"/dri/renderD*; do
      [[ -e "$node" ]] || continue
      vendor=""
      read -r vendor 2>/dev/null <"$SYSFS_DIR/class/drm/${node##*/}/device/vendor"
      if [[ -z "$vendor" || "$vendor" == "0x1002" ]]; then
        n=$((n + 1))
      fi
    done
  fi
  echo "$n"
}

# Number of TPU chips: /dev/accel<N> (TPU v2-v4), else /dev/vfio/<N> IOMMU groups (v5e+).
count_tpu() {
  local n=0 node
  for node in "$DEV_DIR"/accel*; do
    [[ "${node##*/}" =~ ^accel[0-9]+$ ]] && n=$((n + 1))
  done
  if ((n == 0)); then
    for node in "$DEV_DIR"/vfio/*; do
      [[ "${node##*/}" =~ ^[0-9]+$ ]] && n=$((n + 1))
    done
  fi
  echo "$n"
}

# Sets PLATFORM and COUNT from the settings, detecting what is not set.
detect_accelerators() {
  PLATFORM="${JAXCORE_ACCELERATOR_PLATFORM:-}"
  COUNT="${JAXCORE_ACCELERATOR_COUNT:-}"
  case "$PLATFORM" in
    "" | cuda | rocm | tpu | generic) ;;
    *) die "$EXIT_USAGE" "JAXCORE_ACCELERATOR_PLATFORM='$PLATFORM' is not one of cuda, rocm, tpu, generic" ;;
  esac
  if [[ -n "$COUNT" ]] && ! is_positive_int "$COUNT"; then
    die "$EXIT_USAGE" "JAXCORE_ACCELERATOR_COUNT='$COUNT' is not a positive integer"
  fi
  local n
  if [[ -z "$PLATFORM" || -z "$COUNT" ]]; then
    local -a order=(cuda rocm tpu)
    [[ -n "$PLATFORM" && "$PLATFORM" != generic ]] && order=("$PLATFORM")
    local p
    for p in "${order[@]}"; do
      if [[ -n "$COUNT" ]]; then
        # Only the platform is unknown: decide it without running any tool.
        case "$p" in
          cuda) command -v nvidia-smi >/dev/null 2>&1 || [[ -e "$DEV_DIR/nvidiactl" ]] && { PLATFORM=cuda; break; } ;;
          rocm) command -v rocm-smi >/dev/null 2>&1 || [[ -e "$DEV_DIR/kfd" ]] && { PLATFORM=rocm; break; } ;;
          tpu) (($(count_tpu) > 0)) && { PLATFORM=tpu; break; } ;;
        esac
        continue
      fi
      case "$p" in
        cuda) n="$(count_cuda)" ;;
        rocm) n="$(count_rocm)" ;;
        tpu) n="$(count_tpu)" ;;
      esac
      if ((n > 0)); then
        [[ -z "$PLATFORM" ]] && PLATFORM="$p"
        COUNT="$n"
        break
      fi
    done
  fi
  [[ -n "$PLATFORM" ]] || PLATFORM=generic
  COUNT_SOURCE=found
  [[ -n "$COUNT" ]] || { COUNT=1; COUNT_SOURCE=default; }
  COUNT=$((10#$COUNT))
}

# --- Finding the test executable -------------------------------------------------------------

# Sets EXE to the executable for "$1", looking where Bazel's test wrappers look.
resolve_executable() {
  local cmd="${1#./}" candidate key path
  local -a candidates=()
  if [[ "$1" != */* ]]; then
    candidate="$(type -P -- "$1" 2>/dev/null)" && [[ -n "$candidate" ]] && { EXE="$candidate"; return; }
  else
    candidates+=("$1")
  fi
  local ws="${TEST_WORKSPACE:-}"
  local base
  for base in "${RUNFILES_DIR:-}" "${TEST_SRCDIR:-}"; do
    [[ -n "$base" ]] || continue
    [[ -n "$ws" ]] && candidates+=("$base/$ws/$cmd")
    candidates+=("$base/$cmd")
  done
  for candidate in "${candidates[@]}"; do
    if [[ -f "$candidate" ]]; then
      [[ -x "$candidate" ]] || die "$EXIT_NOT_EXECUTABLE" "test '$1' was found at '$candidate' but is not executable"
      EXE="$candidate"
      return
    fi
  done
  if [[ -n "${RUNFILES_MANIFEST_FILE:-}" && -f "$RUNFILES_MANIFEST_FILE" ]]; then
    while read -r key path; do
      if [[ "$key" == "$cmd" || (-n "$ws" && "$key" == "$ws/$cmd") ]] && [[ -x "$path" ]]; then
        EXE="$path"
        return
      fi
    done <"$RUNFILES_MANIFEST_FILE"
  fi
  die "$EXIT_NOT_FOUND" "test '$1' not found (looked at the path itself, on PATH and in the runfiles: RUNFILES_DIR='${RUNFILES_DIR:-}', TEST_SRCDIR='${TEST_SRCDIR:-}', RUNFILES_MANIFEST_FILE='${RUNFILES_MANIFEST_FILE:-}')"
}

# --- Locks -------------------------------------------------------------------------------------

# flock(1) with a '.' decimal point whatever the caller's locale.
run_flock() {
  LC_ALL=C flock "$@"
}

# Remaining wait budget in microseconds (may be <= 0).
remaining_us() {
  local now
  now_us now
  printf -v "$1" '%d' "$((DEADLINE_US - now))"
}

# Joins the queue of callers (see the header). Returns 0 when this caller is at the head,
# 1 when the wait budget ran out first. With nobody queued and a slot free, it claims that
# slot at once and sets TICKET=0 (no turn to end).
queue_enter() {
  local mutex_fd left left_s tail=0 pred_fd="" line
  exec {mutex_fd}>>"$LOCK_DIR/queue.mutex"
  remaining_us left
  ((left > 0)) || left=0
  us_to_s left_s "$left"
  if ! run_flock -w "$left_s" "$mutex_fd"; then
    exec {mutex_fd}>&-
    return 1
  fi
  [[ -f "$LOCK_DIR/queue.tail" ]] && read -r tail <"$LOCK_DIR/queue.tail"
  [[ "$tail" =~ ^[0-9]+$ ]] || tail=0
  # Nobody queued (the last ticket has had its turn): holding the mutex makes this caller
  # the head, and when a slot is free its turn is over before the mutex is released, so it
  # needs no queue node (one process less per test on an uncontended machine).
  local state="done"
  ((tail > 0)) && node_state state "$tail"
  if [[ "$state" == "done" ]]; then
    TICKET=0
    if claim_free_slot; then
      exec {mutex_fd}>&-
      return 0
    fi
  fi
  TICKET=$((10#$tail + 1))
  while true; do
    exec {NODE_FD}>>"$LOCK_DIR/queue.node.$TICKET"
    run_flock -n "$NODE_FD" {mutex_fd}>&- && break
    # Only possible when the queue files were reset under a live waiter: skip that ticket.
    exec {NODE_FD}>&-
    TICKET=$((TICKET + 1))
  done
  printf 'pred=%d\n' "$tail" >"$LOCK_DIR/queue.node.$TICKET"
  if ((tail > 0)); then
    exec {pred_fd}>>"$LOCK_DIR/queue.node.$tail"
  fi
  printf '%d\n' "$TICKET" >"$LOCK_DIR/queue.tail"
  exec {mutex_fd}>&-

  local cur="$tail"
  while ((cur > 0)); do
    # A predecessor that already finished needs no lock call (one process less per test).
    node_state state "$cur"
    if [[ "$state" != "done" ]]; then
      remaining_us left
      ((left > 0)) || left=0
      us_to_s left_s "$left"
      if ! run_flock -w "$left_s" "$pred_fd" {NODE_FD}>&-; then
        exec {pred_fd}>&-
        return 1
      fi
      node_state state "$cur"
    fi
    exec {pred_fd}>&-
    [[ "$state" == "done" ]] && break
    # Its owner died or gave up before its turn: wait for the one before it instead.
    cur="$state"
    ((cur > 0)) && exec {pred_fd}>>"$LOCK_DIR/queue.node.$cur"
  done
  return 0
}

# Sets $1 to "done" if queue node $2 finished its turn (or was already cleaned up), else to
# the ticket of the node it was waiting for.
node_state() {
  local line pred="" finished=0
  while IFS= read -r line; do
    case "$line" in
      done) finished=1 ;;
      pred=*) pred="${line#pred=}" ;;
    esac
  done 2>/dev/null <"$LOCK_DIR/queue.node.$2"
  if ((finished)) || [[ ! "$pred" =~ ^[0-9]+$ ]]; then
    printf -v "$1" "done"
  else
    printf -v "$1" '%d' "$((10#$pred))"
  fi
}

# Ends this caller's turn at the head, letting the next caller pick a slot.
queue_leave() {
  printf 'done\n' >>"$LOCK_DIR/queue.node.$TICKET"
  exec {NODE_FD}>&-
}

# Deletes old queue nodes, once every QUEUE_CLEANUP_EVERY tickets (one `rm` for many tests).
# Safe: this caller has had its turn, so every ticket below its own has finished or given
# up, and a node that is gone reads as finished to anyone who still looks at it.
queue_cleanup() {
  ((TICKET > 0 && TICKET % QUEUE_CLEANUP_EVERY == 0)) || return 0
  local node n
  local -a old=()
  for node in "$LOCK_DIR"/queue.node.*; do
    n="${node##*.}"
    [[ "$n" =~ ^[0-9]+$ ]] && ((10#$n < TICKET - QUEUE_CLEANUP_EVERY)) && old+=("$node")
  done
  ((${#old[@]} == 0)) || rm -f -- "${old[@]}"
}

slot_file() { printf -v "$1" '%s/accelerator_%d_slot_%d.lock' "$LOCK_DIR" "$2" "$3"; }

# Claims (device $1, slot $2) for this caller by writing its owner record, which is what
# queue heads read to see which slots are taken. Claims are only made at the queue head, so
# no two callers claim one slot; the slot's lock is taken afterwards, outside the queue.
claim_slot() {
  local file now
  slot_file file "$1" "$2"
  now_us now
  printf 'pid=%d ticket=%d claimed_us=%d test=%s\n' "$$" "$TICKET" "$now" "$TEST_NAME" \
    >"$file.owner"
}

# Re-probes slots that look taken; clears the owner record of any whose lock is free although
# it was claimed more than CLAIM_GRACE_US ago (its owner was killed before it could clear it).
recheck_stale_slots() {
  local d s owner probe_fd file now claimed
  now_us now
  for ((d = 0; d < COUNT; d++)); do
    for ((s = 0; s < PER_ACCELERATOR; s++)); do
      slot_file file "$d" "$s"
      owner=""
      [[ -f "$file.owner" ]] && read -r owner <"$file.owner"
      [[ -n "$owner" ]] || continue
      claimed=0
      [[ "$owner" =~ claimed_us=([0-9]+) ]] && claimed="${BASH_REMATCH[1]}"
      ((now - 10#$claimed >= CLAIM_GRACE_US)) || continue
      exec {probe_fd}>>"$file"
      if run_flock -n "$probe_fd"; then
        : >"$file.owner"
      fi
      exec {probe_fd}>&-
    done
  done
}

# Claims the free slot on the accelerator with the fewest running tests, if there is one
# (sets DEVICE and SLOT). Only the queue head calls it, so two callers never claim one slot.
claim_free_slot() {
  local d s file owner busy free_s best_d=-1 best_s=-1 best_busy=$((PER_ACCELERATOR + 1))
  for ((d = 0; d < COUNT; d++)); do
    busy=0
    free_s=-1
    for ((s = 0; s < PER_ACCELERATOR; s++)); do
      slot_file file "$d" "$s"
      owner=""
      [[ -f "$file.owner" ]] && read -r owner <"$file.owner"
      if [[ -n "$owner" ]]; then
        busy=$((busy + 1))
      elif ((free_s < 0)); then
        free_s=$s
      fi
    done
    if ((free_s >= 0 && busy < best_busy)); then
      best_d=$d
      best_s=$free_s
      best_busy=$busy
    fi
  done
  ((best_d >= 0)) || return 1
  claim_slot "$best_d" "$best_s"
  DEVICE=$best_d
  SLOT=$best_s
}

# At the queue head: claims the free slot on the least-loaded accelerator, waiting for one to
# be released when all are taken. Sets DEVICE and SLOT; returns 1 when the wait budget runs out.
acquire_slot() {
  local note_fd left left_s tick now
  # Open the release channel before looking, so no release after the look is missed.
  exec {note_fd}<>"$LOCK_DIR/released.fifo"
  local last_recheck
  now_us last_recheck
  while true; do
    if claim_free_slot; then
      exec {note_fd}>&-
      return 0
    fi
    remaining_us left
    if ((left <= 0)); then
      exec {note_fd}>&-
      return 1
    fi
    tick=$STALE_RECHECK_US
    ((left < tick)) && tick=$left
    us_to_s left_s "$tick"
    if read -r -t "$left_s" -u "$note_fd" _; then
      # Drain every announcement already queued, then look again.
      while read -r -t 0 -u "$note_fd" && read -r -u "$note_fd" _; do :; done
    else
      now_us now
      if ((now - last_recheck >= STALE_RECHECK_US)); then
        recheck_stale_slots
        last_recheck=$now
      fi
    fi
  done
}

# Takes the claimed slot's lock, held on SLOT_FD until the test ends. It is normally free at
# once; it can be busy for a moment while the previous owner finishes releasing it, or longer
# if a process outside this scheme holds it. Returns 1 when the wait budget runs out.
lock_slot() {
  local file left left_s
  slot_file file "$DEVICE" "$SLOT"
  exec {SLOT_FD}>>"$file"
  remaining_us left
  ((left > 0)) || left=0
  us_to_s left_s "$left"
  run_flock -w "$left_s" "$SLOT_FD" && return 0
  exec {SLOT_FD}>&-
  : >"$file.owner"
  return 1
}

# Frees the slot and tells a waiting queue head about it.
release_slot() {
  local file fd
  slot_file file "$DEVICE" "$SLOT"
  : >"$file.owner"
  exec {SLOT_FD}>&-
  if exec {fd}<>"$LOCK_DIR/released.fifo"; then
    printf '%d.%d\n' "$DEVICE" "$SLOT" >&"$fd"
    exec {fd}>&-
  fi 2>/dev/null
}

# Appends one line about this test to JAXCORE_ACCELERATOR_LOG, if set.
log_line() {
  [[ -n "${JAXCORE_ACCELERATOR_LOG:-}" ]] || return 0
  local device="$1" slot="$2" wait_ms=$(($3 / 1000)) run_ms=$(($4 / 1000)) code="$5" when
  printf -v when '%(%Y-%m-%dT%H:%M:%S%z)T' -1
  # Seconds with millisecond precision, formatted with integers (no locale decimal point).
  printf '%s\ttest=%s\tdevice=%s\tslot=%s\twait_s=%d.%03d\trun_s=%d.%03d\texit=%s\n' \
    "$when" "$TEST_NAME" "$device" "$slot" "$((wait_ms / 1000))" "$((wait_ms % 1000))" \
    "$((run_ms / 1000))" "$((run_ms % 1000))" "$code" \
    >>"$JAXCORE_ACCELERATOR_LOG" ||
    printf '%s: warning: cannot append to JAXCORE_ACCELERATOR_LOG=%s\n' "$PROG" "$JAXCORE_ACCELERATOR_LOG" >&2
}

# --- Per-test environment ----------------------------------------------------------------------

# Restricts the test to accelerator $1 and makes PER_ACCELERATOR tests fit on one device.
export_device_env() {
  local device="$1"
  case "$PLATFORM" in
    cuda)
      export CUDA_VISIBLE_DEVICES="$device"
      ;;
    rocm)
      # ROCR filters at the lowest layer; HIP (and its CUDA_VISIBLE_DEVICES alias) then index
      # the devices ROCR left visible, where the chosen one is number 0.
      export ROCR_VISIBLE_DEVICES="$device"
      export HIP_VISIBLE_DEVICES=0
      export CUDA_VISIBLE_DEVICES=0
      ;;
    tpu)
      export TPU_VISIBLE_CHIPS="$device"
      export TPU_CHIPS_PER_PROCESS_BOUNDS=1,1,1
      export TPU_PROCESS_BOUNDS=1,1,1
      export ALLOW_MULTIPLE_LIBTPU_LOAD=true
      ;;
    generic)
      # Unknown vendor: the variables each runtime reads, all indexing the full device list.
      export CUDA_VISIBLE_DEVICES="$device"
      export HIP_VISIBLE_DEVICES="$device"
      export TPU_VISIBLE_CHIPS="$device"
      export TPU_CHIPS_PER_PROCESS_BOUNDS=1,1,1
      export TPU_PROCESS_BOUNDS=1,1,1
      export ALLOW_MULTIPLE_LIBTPU_LOAD=true
      ;;
  esac
  export JAXCORE_ACCELERATOR_INDEX="$device"
  export JAXCORE_ACCELERATOR_SLOT="$SLOT"
  if [[ -z "${XLA_PYTHON_CLIENT_PREALLOCATE+set}" ]]; then
    export XLA_PYTHON_CLIENT_PREALLOCATE=false
  fi
  if [[ -z "${XLA_PYTHON_CLIENT_MEM_FRACTION+set}" ]]; then
    # 0.9 of the device split evenly, in thousandths (bash has integer arithmetic only).
    local thousandths=$((900 / PER_ACCELERATOR))
    printf -v XLA_PYTHON_CLIENT_MEM_FRACTION '%d.%03d' "$((thousandths / 1000))" "$((thousandths % 1000))"
    export XLA_PYTHON_CLIENT_MEM_FRACTION
  fi
}

# --- Main --------------------------------------------------------------------------------------

main() {
  if (($# == 0)); then
    die "$EXIT_USAGE" "no test given; usage: $PROG <test executable> [args...]"
  fi

  PER_ACCELERATOR="${JAXCORE_TESTS_PER_ACCELERATOR:-4}"
  is_positive_int "$PER_ACCELERATOR" ||
    die "$EXIT_USAGE" "JAXCORE_TESTS_PER_ACCELERATOR='$PER_ACCELERATOR' is not a positive integer"
  PER_ACCELERATOR=$((10#$PER_ACCELERATOR))
  local wait_setting="${JAXCORE_ACCELERATOR_WAIT_S:-3600}" wait_us
  seconds_to_us wait_us "$wait_setting" ||
    die "$EXIT_USAGE" "JAXCORE_ACCELERATOR_WAIT_S='$wait_setting' is not a non-negative number of seconds"
  if [[ "$1" == --detect ]]; then
    # For the ci/ scripts: report what detection finds, without running anything.
    local origin="detected"
    [[ -n "${JAXCORE_ACCELERATOR_COUNT:-}" ]] && origin="env"
    detect_accelerators
    [[ "$origin" == "detected" && "$COUNT_SOURCE" == "default" ]] && origin="default"
    printf '%s %d %s\n' "$PLATFORM" "$COUNT" "$origin"
    exit 0
  fi
  detect_accelerators
  resolve_executable "$1"
  shift
  TEST_NAME="${TEST_TARGET:-$EXE}"

  LOCK_DIR="${JAXCORE_LOCK_DIR:-/tmp/jaxcore_accelerator_locks_${USER:-$(id -un 2>/dev/null || echo "uid$UID")}}"
  if [[ ! -d "$LOCK_DIR" ]]; then
    mkdir -p -- "$LOCK_DIR" 2>/dev/null || [[ -d "$LOCK_DIR" ]] ||
      die "$EXIT_LOCK_DIR" "cannot create the lock directory JAXCORE_LOCK_DIR='$LOCK_DIR'"
  fi
  [[ -w "$LOCK_DIR" ]] || die "$EXIT_LOCK_DIR" "the lock directory JAXCORE_LOCK_DIR='$LOCK_DIR' is not writable"
  if [[ ! -p "$LOCK_DIR/released.fifo" ]]; then
    mkfifo -- "$LOCK_DIR/released.fifo" 2>/dev/null || [[ -p "$LOCK_DIR/released.fifo" ]] ||
      die "$EXIT_LOCK_DIR" "cannot create the FIFO '$LOCK_DIR/released.fifo'"
  fi

  local start_us got_us end_us
  now_us start_us
  DEADLINE_US=$((start_us + wait_us))
  DEVICE=-1
  SLOT=-1
  SLOT_FD=""
  if ! queue_enter; then
    now_us end_us
    log_line - - "$((end_us - start_us))" 0 "$EXIT_WAIT_TIMEOUT"
    die "$EXIT_WAIT_TIMEOUT" "no free accelerator slot for '$TEST_NAME' within JAXCORE_ACCELERATOR_WAIT_S=${wait_setting}s (queued behind earlier callers; ${COUNT} accelerators x ${PER_ACCELERATOR} slots, locks in '$LOCK_DIR'); raise JAXCORE_ACCELERATOR_WAIT_S or lower --local_test_jobs / pytest -n"
  fi
  if ((TICKET > 0)) && ! acquire_slot; then
    queue_leave
    now_us end_us
    log_line - - "$((end_us - start_us))" 0 "$EXIT_WAIT_TIMEOUT"
    die "$EXIT_WAIT_TIMEOUT" "no free accelerator slot for '$TEST_NAME' within JAXCORE_ACCELERATOR_WAIT_S=${wait_setting}s (all ${COUNT} accelerators x ${PER_ACCELERATOR} slots stayed busy, locks in '$LOCK_DIR'); raise JAXCORE_ACCELERATOR_WAIT_S or lower --local_test_jobs / pytest -n"
  fi
  ((TICKET == 0)) || queue_leave
  if ! lock_slot; then
    now_us end_us
    log_line - - "$((end_us - start_us))" 0 "$EXIT_WAIT_TIMEOUT"
    die "$EXIT_WAIT_TIMEOUT" "no free accelerator slot for '$TEST_NAME' within JAXCORE_ACCELERATOR_WAIT_S=${wait_setting}s (slot $SLOT of accelerator $DEVICE stayed locked by a process outside this queue, locks in '$LOCK_DIR')"
  fi

  export_device_env "$DEVICE"
  now_us got_us
  # Signals aimed at the wrapper alone wait for the test (bash runs traps after a foreground
  # child ends), so the slot stays taken while the device may still be in use.
  local caught=""
  trap 'caught=TERM' TERM
  trap 'caught=INT' INT
  trap 'caught=HUP' HUP
  local code=0
  "$EXE" "$@" {SLOT_FD}>&- || code=$?
  trap - TERM INT HUP
  now_us end_us
  release_slot
  log_line "$DEVICE" "$SLOT" "$((got_us - start_us))" "$((end_us - got_us))" "$code"
  queue_cleanup
  if [[ -n "$caught" && "$code" == 0 ]]; then
    case "$caught" in
      TERM) code=143 ;;
      INT) code=130 ;;
      HUP) code=129 ;;
    esac
  fi
  exit "$code"
}

main "$@"

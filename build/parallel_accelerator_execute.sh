#!/bin/bash
# Runs one test on one accelerator slot, so many tests can share a machine's GPUs/TPUs.
#
# Usage:
#   bazel test --run_under="$PWD/build/parallel_accelerator_execute.sh" --local_test_jobs=N ...
#   build/parallel_accelerator_execute.sh <test executable> [args...]
#   build/parallel_accelerator_execute.sh --detect   # prints "<platform> <count> <source>",
#                                    # source = env | detected | default (nothing found)
#
# The test is found as given (path, or on PATH), else in the runfiles tree (RUNFILES_DIR,
# TEST_SRCDIR, with or without TEST_WORKSPACE) or the runfiles manifest, as Bazel does.
#
# Settings (environment):
#   JAXCORE_ACCELERATOR_COUNT      accelerators, 1..1024. Default: detected from `nvidia-smi -L`,
#                                  `rocm-smi` or AMD /dev/dri render nodes, /dev/accel* or
#                                  /dev/vfio/<n> (TPU); else 1.
#   JAXCORE_ACCELERATOR_PLATFORM   cuda | rocm | tpu | generic (default: detected). Decides the
#                                  device variables the test gets.
#   JAXCORE_TESTS_PER_ACCELERATOR  tests sharing one accelerator at once, 1..256 (default 4).
#   JAXCORE_ACCELERATOR_WAIT_S     seconds to wait for a slot (default 3600; decimals allowed;
#                                  0 = do not wait; at most 999999999).
#   JAXCORE_LOCK_DIR               lock directory. Default: $XDG_RUNTIME_DIR/jaxcore_accelerator_locks,
#                                  else /tmp/jaxcore_accelerator_locks_<uid>. Created 0700; refused
#                                  unless it is a real directory (not a symlink) owned by the
#                                  caller with rwx for the owner and no write bit for group/others.
#   JAXCORE_ACCELERATOR_LOG        optional file; one line per test is appended to it.
#   JAXCORE_ACCELERATOR_DEV_DIR, JAXCORE_ACCELERATOR_SYSFS_DIR
#                                  where detection looks (default /dev, /sys).
#
# Scheduling (balanced, first come first served per slot, fast hand-over, no global lock):
#   * A caller reads every slot's owner record and queue and joins the least-loaded slot: a
#     free slot on the accelerator running the fewest tests, else the busy slot whose test
#     started first. Its place in that slot's queue is a node file made with O_EXCL
#     (noclobber), so two callers never share a place; one that loses the race looks again.
#   * A waiting caller locks its own node and blocks (flock) on the node of the caller just
#     ahead of it, then on the slot's lock, so the kernel hands a slot over the moment it is
#     released. A waiter that dies or gives up leaves its node unmarked and the one behind it
#     waits on the one before it instead. Only the slot lock bounds the tests per accelerator.
#   * The slot lock lives as long as any process of the job: the test inherits the locked
#     descriptor (the wrapper holds it too), so a SIGKILLed wrapper does not free the slot while
#     its test runs, and a daemon the test leaves behind holding it keeps the slot. The kernel
#     drops the lock when the last holder exits, so no stale lock survives a crash (an owner
#     record left busy by a SIGKILLed wrapper is checked against the lock itself).
#     SIGTERM/SIGINT/SIGHUP to the wrapper alone wait for the test to end.
#   * Files in the lock directory: accelerator_<d>_slot_<s>.lock (the slot's lock),
#     accelerator_<d>_slot_<s>.owner (fixed-length record "<busy> <place> <since_us> <pid>
#     <test>"), accelerator_<d>_slot_<s>.node.<place> ("pid=<pid>", then "queued" while it
#     waits, "done" once it has the slot; old ones are deleted every NODE_CLEANUP_EVERY places),
#     detected (detection reused for DETECT_CACHE_S seconds by runs with the same settings).
#     No file is ever truncated, and none is opened through a symbolic link.
#
# Exit status: the test's own; 2 for a bad setting or a missing command; 73 for an unusable
# lock directory or lock file; 75 when no slot became free within JAXCORE_ACCELERATOR_WAIT_S;
# 126/127 when the test cannot be executed / found.

set -euo pipefail

readonly PROG="parallel_accelerator_execute.sh"
readonly EXIT_USAGE=2 EXIT_LOCK_DIR=73 EXIT_WAIT_TIMEOUT=75
readonly EXIT_NOT_EXECUTABLE=126 EXIT_NOT_FOUND=127
readonly NODE_CLEANUP_EVERY=64 # old queue nodes go when a place is a multiple of this
readonly OWNER_RECORD_BYTES=256
readonly DETECT_CACHE_S=300

die() {
  local code="$1"
  shift
  printf '%s: error: %s\n' "$PROG" "$*" >&2
  exit "$code"
}

[[ -n "${EPOCHREALTIME:-}" ]] || die "$EXIT_USAGE" "bash >= 5.0 is required (EPOCHREALTIME)"

# Microseconds since the epoch into variable $1.
now_us() {
  local t="${EPOCHREALTIME//[!0-9]/}"
  printf -v "$1" '%d' "$((10#$t))"
}

# Microseconds $2 as seconds with a '.' decimal point (for flock -w) into variable $1.
us_to_s() {
  printf -v "$1" '%d.%06d' "$(($2 / 1000000))" "$(($2 % 1000000))"
}

# Validates setting $1 (value $2) as an integer from 1 to $3 and stores it in variable $4.
# At most 9 significant digits are read, so no value can overflow bash's arithmetic.
int_setting() {
  if [[ "$2" =~ ^0*([0-9]{1,9})$ ]] && ((10#${BASH_REMATCH[1]} >= 1 && 10#${BASH_REMATCH[1]} <= $3)); then
    printf -v "$4" '%d' "$((10#${BASH_REMATCH[1]}))"
  else
    die "$EXIT_USAGE" "$1='$2' is not a positive integer (at most $3)"
  fi
}

# --- Accelerator detection -------------------------------------------------------------------

readonly DEV_DIR="${JAXCORE_ACCELERATOR_DEV_DIR:-/dev}"
readonly SYSFS_DIR="${JAXCORE_ACCELERATOR_SYSFS_DIR:-/sys}"

# Number of NVIDIA GPUs listed by `nvidia-smi -L` (0 if it is missing or fails).
count_cuda() {
  local n=0 line
  if command -v nvidia-smi >/dev/null 2>&1; then
    while IFS= read -r line; do
      [[ "$line" == GPU\ [0-9]* ]] && n=$((n + 1))
    done < <(nvidia-smi -L 2>/dev/null || true)
  fi
  echo "$n"
}

# Number of AMD GPUs: distinct GPU[i] in `rocm-smi --showid`, else AMD render nodes (PCI
# vendor 0x1002, so another vendor's integrated GPU is not counted) when /dev/kfd exists.
count_rocm() {
  local line vendor node n=0
  local -A seen=()
  if command -v rocm-smi >/dev/null 2>&1; then
    while IFS= read -r line; do
      [[ "$line" =~ ^GPU\[([0-9]+)\] ]] && seen["${BASH_REMATCH[1]}"]=1
    done < <(rocm-smi --showid 2>/dev/null || true)
  fi
  if ((${#seen[@]} > 0)); then
    echo "${#seen[@]}"
    return
  fi
  if [[ -e "$DEV_DIR/kfd" ]]; then
    for node in "$DEV_DIR"/dri/renderD*; do
      [[ -e "$node" ]] || continue
      vendor=""
      read -r vendor 2>/dev/null <"$SYSFS_DIR/class/drm/${node##*/}/device/vendor" || true
      [[ -z "$vendor" || "$vendor" == "0x1002" ]] && n=$((n + 1))
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

check_platform_setting() {
  case "${JAXCORE_ACCELERATOR_PLATFORM:-}" in
    "" | cuda | rocm | tpu | generic) ;;
    *) die "$EXIT_USAGE" "JAXCORE_ACCELERATOR_PLATFORM='$JAXCORE_ACCELERATOR_PLATFORM' is not one of cuda, rocm, tpu, generic" ;;
  esac
}

# Sets PLATFORM, COUNT and COUNT_SOURCE (found | default) from the settings and detection.
detect_accelerators() {
  check_platform_setting
  PLATFORM="${JAXCORE_ACCELERATOR_PLATFORM:-}"
  COUNT=""
  if [[ -n "${JAXCORE_ACCELERATOR_COUNT:-}" ]]; then
    int_setting JAXCORE_ACCELERATOR_COUNT "$JAXCORE_ACCELERATOR_COUNT" 1024 COUNT
  fi
  local p n
  local -a order=(cuda rocm tpu)
  [[ -n "$PLATFORM" && "$PLATFORM" != generic ]] && order=("$PLATFORM")
  if [[ -z "$PLATFORM" || -z "$COUNT" ]]; then
    for p in "${order[@]}"; do
      if [[ -n "$COUNT" ]]; then
        # Only the platform is unknown: decide it without running any tool.
        case "$p" in
          cuda) command -v nvidia-smi >/dev/null 2>&1 || [[ -e "$DEV_DIR/nvidiactl" ]] || continue ;;
          rocm) command -v rocm-smi >/dev/null 2>&1 || [[ -e "$DEV_DIR/kfd" ]] || continue ;;
          tpu) (($(count_tpu) > 0)) || continue ;;
        esac
        PLATFORM="$p"
        break
      fi
      case "$p" in
        cuda) n="$(count_cuda)" ;;
        rocm) n="$(count_rocm)" ;;
        tpu) n="$(count_tpu)" ;;
      esac
      if ((n > 0)); then
        [[ -n "$PLATFORM" ]] || PLATFORM="$p"
        COUNT="$n"
        break
      fi
    done
  fi
  [[ -n "$PLATFORM" ]] || PLATFORM=generic
  COUNT_SOURCE=found
  [[ -n "$COUNT" ]] || { COUNT=1; COUNT_SOURCE=default; }
}

# detect_accelerators, reusing for DETECT_CACHE_S seconds what an earlier run with the same
# settings found, so a suite does not run `nvidia-smi` per test.
cached_detect_accelerators() {
  local file="$LOCK_DIR/detected" key now_s platform count source when cached_key
  check_platform_setting
  printf -v key '%s|%s|%s|%s' "${JAXCORE_ACCELERATOR_PLATFORM:-}" "$DEV_DIR" "$SYSFS_DIR" "$PATH"
  now_s="${EPOCHREALTIME%%[!0-9]*}"
  if [[ ! -L "$file" ]] && read -r platform count source when cached_key 2>/dev/null <"$file" &&
    [[ "$cached_key" == "$key" && "$count" =~ ^[1-9][0-9]{0,3}$ && "$when" =~ ^[0-9]{1,12}$ ]] &&
    ((now_s - when >= 0 && now_s - when < DETECT_CACHE_S)); then
    PLATFORM="$platform" COUNT="$count" COUNT_SOURCE="$source"
    return 0
  fi
  detect_accelerators
  printf -v platform '%s %d %s %d %s' "$PLATFORM" "$COUNT" "$COUNT_SOURCE" "$now_s" "$key"
  rewrite_in_place "$file" 1024 "$platform" 2>/dev/null || true
}

# --- Finding the test executable -------------------------------------------------------------

# Sets EXE to the executable for "$1", looking where Bazel's test wrappers look.
resolve_executable() {
  local cmd="${1#./}" candidate key path base ws="${TEST_WORKSPACE:-}"
  local -a candidates=()
  if [[ "$1" != */* ]]; then
    candidate="$(type -P -- "$1" 2>/dev/null || true)"
    [[ -n "$candidate" ]] && { EXE="$candidate"; return; }
  else
    candidates+=("$1")
  fi
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

# --- The lock directory and its files ----------------------------------------------------------

# Sets LOCK_DIR, creating it 0700, and exits unless nobody but the caller can tamper with it:
# a real directory (not a symlink), owned by the caller, rwx for the owner, not writable by
# group or others. One lstat reads type, owner and mode together; a directory that passes
# cannot be replaced by another user (in /tmp the sticky bit keeps others from renaming it).
prepare_lock_dir() {
  if [[ -n "${JAXCORE_LOCK_DIR:-}" ]]; then
    LOCK_DIR="$JAXCORE_LOCK_DIR"
  elif [[ -n "${XDG_RUNTIME_DIR:-}" && -d "$XDG_RUNTIME_DIR" && -O "$XDG_RUNTIME_DIR" ]]; then
    LOCK_DIR="$XDG_RUNTIME_DIR/jaxcore_accelerator_locks"
  else
    LOCK_DIR="/tmp/jaxcore_accelerator_locks_$EUID"
  fi
  local fix="choose another directory with JAXCORE_LOCK_DIR" info type owner mode
  if [[ ! -e "$LOCK_DIR" && ! -L "$LOCK_DIR" ]]; then
    # shellcheck disable=SC2174 # parents get the umask's mode; only the lock dir needs 0700
    mkdir -p -m 700 -- "$LOCK_DIR" 2>/dev/null || [[ -d "$LOCK_DIR" ]] ||
      die "$EXIT_LOCK_DIR" "cannot create the lock directory '$LOCK_DIR' (JAXCORE_LOCK_DIR); $fix"
  fi
  info="$(LC_ALL=C stat -c '%F|%u|%a' -- "$LOCK_DIR" 2>&1)" ||
    die "$EXIT_LOCK_DIR" "cannot inspect the lock directory '$LOCK_DIR' (JAXCORE_LOCK_DIR): $info"
  IFS='|' read -r type owner mode <<<"$info"
  [[ "$type" != "symbolic link" ]] ||
    die "$EXIT_LOCK_DIR" "the lock directory '$LOCK_DIR' (JAXCORE_LOCK_DIR) is a symbolic link; refusing to follow it (someone else may have planted it): remove it or $fix"
  [[ "$type" == directory ]] ||
    die "$EXIT_LOCK_DIR" "the lock directory '$LOCK_DIR' (JAXCORE_LOCK_DIR) is a $type, not a directory; $fix"
  ((owner == EUID)) ||
    die "$EXIT_LOCK_DIR" "the lock directory '$LOCK_DIR' (JAXCORE_LOCK_DIR) belongs to uid $owner, not to you (uid $EUID); refusing to use it: $fix"
  ((!(8#$mode & 8#022))) ||
    die "$EXIT_LOCK_DIR" "the lock directory '$LOCK_DIR' (JAXCORE_LOCK_DIR) is writable by group or others (mode $mode); refusing to use it: run chmod 700 '$LOCK_DIR' or $fix"
  (((8#$mode & 8#700) == 8#700)) ||
    die "$EXIT_LOCK_DIR" "the lock directory '$LOCK_DIR' (JAXCORE_LOCK_DIR) is not readable, writable and searchable by its owner (mode $mode): run chmod 700 '$LOCK_DIR' or $fix"
}

# Exits if lock-directory file $1 is a symbolic link. Only the caller can create entries in the
# checked directory, so nothing can be swapped in between this check and the open that follows.
refuse_symlink() {
  [[ ! -L "$1" ]] || die "$EXIT_LOCK_DIR" "'$1' in the lock directory is a symbolic link; refusing to follow it: remove it"
}

# Opens lock-directory file $2 for appending (created if missing, never truncated) on a new
# descriptor whose number goes to variable $1; exits naming the file and the reason on failure.
open_lock_file() {
  local fd err
  refuse_symlink "$2"
  if ! { exec {fd}>>"$2"; } 2>/dev/null; then
    err="$({ : >>"$2"; } 2>&1 || true)"
    die "$EXIT_LOCK_DIR" "cannot open the lock file '$2': ${err##*: }"
  fi
  printf -v "$1" '%d' "$fd"
}

# Overwrites file $1 in place with $3 padded to $2 bytes (`<>`: no O_TRUNC, which would make
# ext4 flush the file on close, costing milliseconds).
rewrite_in_place() {
  refuse_symlink "$1"
  printf '%-*.*s\n' "$(($2 - 1))" "$(($2 - 1))" "$3" 1<>"$1"
}

# flock(1) with a '.' decimal point whatever the caller's locale.
run_flock() {
  LC_ALL=C flock "$@"
}

# Locks descriptor $1, waiting at most for the rest of the wait budget. The caller's own queue
# node stays locked in the wrapper only (flock's process does not keep a copy).
flock_wait() {
  local now left_s
  now_us now
  us_to_s left_s "$((DEADLINE_US > now ? DEADLINE_US - now : 0))"
  if [[ -n "$NODE_FD" ]]; then
    run_flock -w "$left_s" "$1" {NODE_FD}>&-
  else
    run_flock -w "$left_s" "$1"
  fi
}

# Writes slot owner record $1: "<busy $2> <place SEQ> <since_us $3> <pid $4> <test $5>".
write_owner() {
  local record
  printf -v record '%d %d %d %d %s' "$2" "$SEQ" "$3" "$4" "$5"
  rewrite_in_place "$1" "$OWNER_RECORD_BYTES" "$record"
}

# Reads slot ($1, $2)'s owner record into O_BUSY, O_SEQ, O_SINCE, O_PID (0 when there is none).
# A busy record whose wrapper is gone is busy only while its test still holds the lock.
read_owner() {
  local slot="$LOCK_DIR/accelerator_$1_slot_$2" rest
  for _ in 1 2; do
    O_BUSY="" O_SEQ="" O_SINCE="" O_PID=""
    [[ -e "$slot.owner" ]] || break
    read -r O_BUSY O_SEQ O_SINCE O_PID rest 2>/dev/null <"$slot.owner" || true
    [[ -n "$O_BUSY" ]] && break # empty: read while being rewritten; look once more
  done
  if [[ "$O_BUSY$O_SEQ$O_SINCE$O_PID" =~ ^[0-9]{4,60}$ && "$O_SEQ" =~ ^[0-9]{1,15}$ && "$O_PID" =~ ^[0-9]{1,10}$ ]]; then
    O_BUSY=$((O_BUSY != 0)) O_SEQ=$((10#$O_SEQ))
    if ((O_BUSY)) && ! kill -0 "$O_PID" 2>/dev/null; then
      # The wrapper was killed; its test may still run and hold the slot's lock.
      [[ -e "$slot.lock" && ! -L "$slot.lock" ]] && ! run_flock -n "$slot.lock" true 2>/dev/null || O_BUSY=0
    fi
    return 0
  fi
  O_BUSY=0 O_SEQ=0 O_SINCE=0 O_PID=0
}

# Sets NODE_STATE for queue node file $1: done (had its turn, or is gone), queued (its caller
# holds the node's lock while it waits, or has given up) or new (its caller is about to take
# the slot or to lock the node); NODE_PID to its caller's pid.
read_node() {
  local line
  NODE_STATE="done" NODE_PID=0
  [[ -e "$1" ]] || return 0
  NODE_STATE=new
  while IFS= read -r line; do
    case "$line" in
      done) NODE_STATE="done" ;;
      queued) [[ "$NODE_STATE" == new ]] && NODE_STATE=queued ;;
      pid=*) NODE_PID="${line#pid=}" ;;
    esac
  done 2>/dev/null <"$1" || true
  [[ "$NODE_PID" =~ ^[0-9]{1,10}$ ]] || NODE_PID=0
}

# Picks the slot to queue on and takes the next place in its queue. Sets DEVICE, SLOT, SEQ
# (this caller's place), NODE, PRED_DONE (the place of the slot's last owner: every place up
# to it had its turn) and MUST_WAIT (1 when the slot is busy or has callers queued ahead).
choose_slot() {
  local d s i n load key best_i best_load best_key node made
  local -a busy=() seq=() queued=() since=() acc=()
  while true; do
    for ((d = 0; d < COUNT; d++)); do
      acc[d]=0
      for ((s = 0; s < PER_ACCELERATOR; s++)); do
        i=$((d * PER_ACCELERATOR + s))
        read_owner "$d" "$s"
        for ((n = O_SEQ + 1; ; n++)); do # callers queued: the places after the owner's
          [[ -e "$LOCK_DIR/accelerator_${d}_slot_${s}.node.$n" ]] || break
        done
        busy[i]=$O_BUSY seq[i]=$O_SEQ queued[i]=$((n - 1 - O_SEQ))
        since[i]=$((O_BUSY ? O_SINCE : 0))
        acc[d]=$((acc[d] + O_BUSY + queued[i]))
      done
    done
    best_i=-1 best_load=0 best_key=0
    for ((d = 0; d < COUNT; d++)); do
      for ((s = 0; s < PER_ACCELERATOR; s++)); do
        i=$((d * PER_ACCELERATOR + s))
        load=$((busy[i] + queued[i]))
        # Free: the accelerator running the fewest tests. Busy: the test that started first.
        key=$((load == 0 ? acc[d] : since[i]))
        if ((best_i < 0 || load < best_load || (load == best_load && key < best_key))); then
          best_i=$i best_load=$load best_key=$key DEVICE=$d SLOT=$s
        fi
      done
    done
    SEQ=$((seq[best_i] + queued[best_i] + 1))
    node="$LOCK_DIR/accelerator_${DEVICE}_slot_${SLOT}.node.$SEQ"
    made=0
    set -C
    { printf 'pid=%d\n' "$$" >"$node"; } 2>/dev/null || made=$?
    set +C
    if ((made == 0)); then
      NODE="$node" PRED_DONE=${seq[best_i]} MUST_WAIT=$((best_load > 0))
      return 0
    fi
    [[ -e "$node" || -L "$node" ]] || die "$EXIT_LOCK_DIR" "cannot create '$node' in the lock directory"
    # Another caller took that place a moment ago: look again.
  done
}

# Joins a slot's queue and waits for its lock (held on SLOT_FD until the test ends). Returns 1
# when the wait budget runs out first.
acquire_slot() {
  local cur node pred_fd slot_file now
  NODE_FD=""
  choose_slot
  export_device_env "$DEVICE" # the test's variables are set before the slot is ours
  if ((MUST_WAIT)); then
    # Callers queued behind this one wait for this node's lock, so they cannot overtake it.
    open_lock_file NODE_FD "$NODE"
    if run_flock -n "$NODE_FD"; then
      printf 'queued\n' >&"$NODE_FD"
    else
      exec {NODE_FD}>&-
      NODE_FD=""
    fi
  fi
  # Wait until every caller queued ahead on this slot has taken it (or given up / died).
  for ((cur = SEQ - 1; cur > PRED_DONE; cur--)); do
    node="$LOCK_DIR/accelerator_${DEVICE}_slot_${SLOT}.node.$cur"
    read_node "$node"
    [[ "$NODE_STATE" == "done" ]] && break
    if [[ "$NODE_STATE" == queued ]]; then
      open_lock_file pred_fd "$node"
      if ! flock_wait "$pred_fd"; then
        exec {pred_fd}>&-
        return 1
      fi
      exec {pred_fd}>&-
      read_node "$node"
      [[ "$NODE_STATE" == "done" ]] && break
    elif kill -0 "$NODE_PID" 2>/dev/null; then
      break # made a moment ago by a live caller: both now contend for the slot lock
    fi
    # Its caller died or gave up before its turn: wait for the one before it instead.
  done
  slot_file="$LOCK_DIR/accelerator_${DEVICE}_slot_${SLOT}"
  open_lock_file SLOT_FD "$slot_file.lock"
  if ! flock_wait "$SLOT_FD"; then
    exec {SLOT_FD}>&-
    return 1
  fi
  now_us now
  write_owner "$slot_file.owner" 1 "$now" "$$" "$TEST_NAME"
  if [[ -n "$NODE_FD" ]]; then
    printf 'done\n' >&"$NODE_FD"
    exec {NODE_FD}>&-
  else
    printf 'done\n' >>"$NODE"
  fi
}

# Frees the slot: its record says free (keeping its last place), then the lock goes.
release_slot() {
  local now
  now_us now
  write_owner "$LOCK_DIR/accelerator_${DEVICE}_slot_${SLOT}.owner" 0 "$now" 0 -
  exec {SLOT_FD}>&-
}

# Deletes this slot's old queue nodes once every NODE_CLEANUP_EVERY places. Every place before
# this caller's has had its turn, so nobody reads those any more.
queue_cleanup() {
  ((SEQ % NODE_CLEANUP_EVERY == 0)) || return 0
  local node n
  local -a old=()
  for node in "$LOCK_DIR/accelerator_${DEVICE}_slot_${SLOT}.node."*; do
    n="${node##*.}"
    [[ "$n" =~ ^[0-9]{1,15}$ ]] && ((10#$n <= SEQ - NODE_CLEANUP_EVERY)) && old+=("$node")
  done
  ((${#old[@]} == 0)) || rm -f -- "${old[@]}" || true
}

# Appends one line about this test to JAXCORE_ACCELERATOR_LOG, if set.
log_line() {
  [[ -n "${JAXCORE_ACCELERATOR_LOG:-}" ]] || return 0
  local wait_ms=$(($3 / 1000)) run_ms=$(($4 / 1000)) when
  printf -v when '%(%Y-%m-%dT%H:%M:%S%z)T' -1
  printf '%s\ttest=%s\tdevice=%s\tslot=%s\twait_s=%d.%03d\trun_s=%d.%03d\texit=%s\n' \
    "$when" "$TEST_NAME" "$1" "$2" "$((wait_ms / 1000))" "$((wait_ms % 1000))" \
    "$((run_ms / 1000))" "$((run_ms % 1000))" "$5" 2>/dev/null >>"$JAXCORE_ACCELERATOR_LOG" ||
    printf '%s: warning: cannot append to JAXCORE_ACCELERATOR_LOG=%s\n' "$PROG" "$JAXCORE_ACCELERATOR_LOG" >&2
}

# --- Per-test environment ----------------------------------------------------------------------

# Restricts the test to accelerator $1 and makes PER_ACCELERATOR tests fit on one device.
export_device_env() {
  case "$PLATFORM" in
    cuda) export CUDA_VISIBLE_DEVICES="$1" ;;
    rocm)
      # ROCR filters at the lowest layer; HIP (and its CUDA alias) then number the devices
      # ROCR left visible, where the chosen one is 0.
      export ROCR_VISIBLE_DEVICES="$1" HIP_VISIBLE_DEVICES=0 CUDA_VISIBLE_DEVICES=0
      ;;
    generic) # unknown vendor: every runtime's variable, all indexing the full device list
      export CUDA_VISIBLE_DEVICES="$1" HIP_VISIBLE_DEVICES="$1"
      ;&
    tpu)
      export TPU_VISIBLE_CHIPS="$1" TPU_CHIPS_PER_PROCESS_BOUNDS=1,1,1 TPU_PROCESS_BOUNDS=1,1,1
      export ALLOW_MULTIPLE_LIBTPU_LOAD=true
      ;;
  esac
  export JAXCORE_ACCELERATOR_INDEX="$1" JAXCORE_ACCELERATOR_SLOT="$SLOT"
  [[ -n "${XLA_PYTHON_CLIENT_PREALLOCATE+set}" ]] || export XLA_PYTHON_CLIENT_PREALLOCATE=false
  if [[ -z "${XLA_PYTHON_CLIENT_MEM_FRACTION+set}" ]]; then
    # 0.9 of the device split evenly, in thousandths (bash has integer arithmetic only).
    local thousandths=$((900 / PER_ACCELERATOR))
    printf -v XLA_PYTHON_CLIENT_MEM_FRACTION '%d.%03d' "$((thousandths / 1000))" "$((thousandths % 1000))"
    export XLA_PYTHON_CLIENT_MEM_FRACTION
  fi
}

# --- Main --------------------------------------------------------------------------------------

main() {
  (($# > 0)) || die "$EXIT_USAGE" "no test given; usage: $PROG <test executable> [args...]"
  int_setting JAXCORE_TESTS_PER_ACCELERATOR "${JAXCORE_TESTS_PER_ACCELERATOR:-4}" 256 PER_ACCELERATOR
  local wait_setting="${JAXCORE_ACCELERATOR_WAIT_S:-3600}" wait_us frac
  [[ "$wait_setting" =~ ^0*([0-9]{1,9})(\.([0-9]*))?$ ]] ||
    die "$EXIT_USAGE" "JAXCORE_ACCELERATOR_WAIT_S='$wait_setting' is not a number of seconds from 0 to 999999999"
  frac="${BASH_REMATCH[3]}000000"
  wait_us=$((10#${BASH_REMATCH[1]} * 1000000 + 10#${frac:0:6}))
  if [[ "$1" == --detect ]]; then
    # For the ci/ scripts: report what detection finds, without running anything.
    detect_accelerators
    local origin=detected
    [[ -n "${JAXCORE_ACCELERATOR_COUNT:-}" ]] && origin="env"
    [[ "$origin" == detected && "$COUNT_SOURCE" == default ]] && origin=default
    printf '%s %d %s\n' "$PLATFORM" "$COUNT" "$origin"
    exit 0
  fi
  prepare_lock_dir
  if [[ -z "${JAXCORE_ACCELERATOR_COUNT:-}" ]]; then
    cached_detect_accelerators
  else
    detect_accelerators
  fi
  resolve_executable "$1"
  shift
  TEST_NAME="${TEST_TARGET:-$EXE}"
  local start_us got_us end_us
  now_us start_us
  DEADLINE_US=$((start_us + wait_us)) DEVICE=-1 SLOT=-1 SLOT_FD=""
  if ! acquire_slot; then
    now_us end_us
    log_line - - "$((end_us - start_us))" 0 "$EXIT_WAIT_TIMEOUT"
    die "$EXIT_WAIT_TIMEOUT" "no free accelerator slot for '$TEST_NAME' within JAXCORE_ACCELERATOR_WAIT_S=${wait_setting}s (${COUNT} accelerators x ${PER_ACCELERATOR} slots stayed busy, locks in '$LOCK_DIR'); raise JAXCORE_ACCELERATOR_WAIT_S or lower --local_test_jobs / pytest -n"
  fi
  now_us got_us
  # Signals aimed at the wrapper alone wait for the test (bash runs traps after a foreground
  # child ends), so the record says busy while the device may still be in use. The test
  # inherits SLOT_FD: the slot stays locked as long as it (or anything it left) runs.
  local caught="" code=0
  trap 'caught=143' TERM
  trap 'caught=130' INT
  trap 'caught=129' HUP
  "$EXE" "$@" || code=$?
  trap - TERM INT HUP
  now_us end_us
  release_slot
  log_line "$DEVICE" "$SLOT" "$((got_us - start_us))" "$((end_us - got_us))" "$code"
  queue_cleanup
  [[ -n "$caught" && "$code" == 0 ]] && code="$caught"
  exit "$code"
}

main "$@"

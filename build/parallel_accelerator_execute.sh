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
# How a slot is chosen (balanced, fair per slot, fast hand-over):
#   * Every slot has its own queue. A caller reads the slots' owner records and queue nodes
#     (plain reads, no global lock) and joins the slot with the least load (running + queued):
#     a free slot on the accelerator running the fewest tests (one test on every accelerator
#     before a second on any), else the busy slot whose test started first. Its place in that
#     slot's queue is a node file made with O_EXCL (bash's noclobber), so two callers never
#     get one place; a caller that loses such a race looks again.
#   * A caller that has to wait locks its node and blocks (flock, no polling) on the node of
#     the caller queued just ahead of it on the same slot, which is released when that one has
#     taken the slot; then it blocks on the slot's lock itself. So while a test runs, the next
#     caller for its slot is already blocked on that slot's lock and the kernel hands the slot
#     over the moment the test's wrapper lets go: no global queue, mutex or scheduler process
#     sits between one test and the next. A waiter that dies or times out leaves its node
#     unmarked; the caller behind it then waits on the one before it, so no queue breaks.
#   * Fairness: strictly first come, first served among the callers queued on one slot (with
#     a single slot, strict arrival order). Across slots a later caller may start first when
#     its slot frees first; an earlier caller waits at most for the tests queued ahead of it on
#     its own slot, and since callers join the least-loaded slot those queues stay within one
#     of each other. (Two callers that arrive within the same few milliseconds may swap.)
#   * The slot lock, not the queues, is what bounds the tests per accelerator: whatever happens
#     to the queues, no more than JAXCORE_TESTS_PER_ACCELERATOR tests share a device.
#   * Each slot's lock is held on a file descriptor of this wrapper for the test's lifetime.
#     The descriptor is deliberately NOT inherited by the test: the slot is free exactly
#     when the test has ended and the wrapper has gone, and a daemon the test leaks cannot
#     keep a slot locked. The kernel drops the lock when the wrapper dies in any way, so no
#     stale lock survives a crash (an owner record left "busy" by a SIGKILLed wrapper is
#     recognised by its dead pid). SIGTERM/SIGINT/SIGHUP to the wrapper alone wait for the
#     test to end before the slot is released.
#   * Per test the wrapper starts one `flock` for the slot (plus one for its own node when it
#     has to queue) and the test itself; records are rewritten in place, never truncated.
#   * Files in the lock directory: accelerator_<d>_slot_<s>.lock (the slot's lock),
#     accelerator_<d>_slot_<s>.owner (fixed-length record "<busy> <place> <since_us> <pid>
#     <test>"), accelerator_<d>_slot_<s>.node.<place> (a queued caller: "pid=<pid>", then
#     "queued" once it holds its node's lock, "done" once it holds the slot; old ones are
#     deleted every NODE_CLEANUP_EVERY places), detected (cached detection, DETECT_CACHE_S).
#   * Accelerator detection runs only when JAXCORE_ACCELERATOR_COUNT is unset, and its result
#     is reused from the lock directory for DETECT_CACHE_S seconds by runs with the same
#     settings (`--detect` always detects afresh).
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
# Old queue nodes of a slot are deleted by every caller whose place is a multiple of this.
readonly NODE_CLEANUP_EVERY=64
# Fixed length of a slot's owner record (see write_owner).
readonly OWNER_RECORD_BYTES=256
# How long accelerator detection done by one run is reused by later runs (seconds).
readonly DETECT_CACHE_S=300

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
  [[ -n "$1" && "$1" != *[!0-9]* ]] && ((10#$1 > 0))
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

# Exits unless JAXCORE_ACCELERATOR_PLATFORM is unset or one of the known platforms.
check_platform_setting() {
  case "${JAXCORE_ACCELERATOR_PLATFORM:-}" in
    "" | cuda | rocm | tpu | generic) ;;
    *) die "$EXIT_USAGE" "JAXCORE_ACCELERATOR_PLATFORM='$JAXCORE_ACCELERATOR_PLATFORM' is not one of cuda, rocm, tpu, generic" ;;
  esac
}

# Sets PLATFORM and COUNT from the settings, detecting what is not set.
detect_accelerators() {
  check_platform_setting
  PLATFORM="${JAXCORE_ACCELERATOR_PLATFORM:-}"
  COUNT="${JAXCORE_ACCELERATOR_COUNT:-}"
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

# detect_accelerators, reusing for DETECT_CACHE_S seconds what an earlier run with the same
# settings found (kept in the lock directory), so a suite does not run `nvidia-smi` per test.
cached_detect_accelerators() {
  local file="$LOCK_DIR/detected" key now_s platform count source when cached_key
  check_platform_setting
  printf -v key '%s|%s|%s|%s' "${JAXCORE_ACCELERATOR_PLATFORM:-}" "$DEV_DIR" "$SYSFS_DIR" "$PATH"
  now_s="${EPOCHREALTIME%%[!0-9]*}"
  if read -r platform count source when cached_key 2>/dev/null <"$file" &&
    [[ "$cached_key" == "$key" && "$count$when" != *[!0-9]* && -n "$count" && -n "$when" ]] &&
    ((now_s - when >= 0 && now_s - when < DETECT_CACHE_S)); then
    PLATFORM="$platform" COUNT="$count" COUNT_SOURCE="$source"
    return 0
  fi
  detect_accelerators
  # Rewritten in place at a fixed length (see write_owner for why there is no truncation).
  printf -v platform '%s %d %s %d %s' "$PLATFORM" "$COUNT" "$COUNT_SOURCE" "$now_s" "$key"
  printf '%-*.*s\n' 1023 1023 "$platform" 2>/dev/null 1<>"$file" || true
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

# Locks descriptor $1, waiting at most for the rest of the wait budget. This caller's own queue
# node stays locked in the wrapper only (flock's process does not keep a copy).
flock_wait() {
  local now left left_s
  now_us now
  left=$((DEADLINE_US - now))
  ((left > 0)) || left=0
  us_to_s left_s "$left"
  if [[ -n "$NODE_FD" ]]; then
    run_flock -w "$left_s" "$1" {NODE_FD}>&-
  else
    run_flock -w "$left_s" "$1"
  fi
}

# Writes owner record $1: "<busy $2> <place SEQ> <since_us $3> <pid $4> <test $5>". Always
# OWNER_RECORD_BYTES bytes, overwritten in place (`<>`, no O_TRUNC): truncating and rewriting a
# file makes ext4 flush it to disk on close (auto_da_alloc), which costs milliseconds.
write_owner() {
  local record
  printf -v record '%d %d %d %d %s' "$2" "$SEQ" "$3" "$4" "$5"
  printf '%-*.*s\n' "$((OWNER_RECORD_BYTES - 1))" "$((OWNER_RECORD_BYTES - 1))" "$record" 1<>"$1"
}

# Reads slot ($1, $2)'s owner record "<busy> <place> <since_us> <pid> <test>" into O_BUSY,
# O_SEQ, O_SINCE, O_PID (all 0 when there is none).
read_owner() {
  local file="$LOCK_DIR/accelerator_$1_slot_$2.owner" rest
  for _ in 1 2; do
    O_BUSY="" O_SEQ="" O_SINCE="" O_PID=""
    [[ -e "$file" ]] || break
    read -r O_BUSY O_SEQ O_SINCE O_PID rest 2>/dev/null <"$file"
    # Empty: read while its writer was rewriting it; look once more.
    [[ -n "$O_BUSY" ]] && break
  done
  if [[ -n "$O_PID" && "$O_BUSY$O_SEQ$O_SINCE$O_PID" != *[!0-9]* ]]; then
    O_SEQ=$((10#$O_SEQ))
    return
  fi
  O_BUSY=0 O_SEQ=0 O_SINCE=0 O_PID=0
}

# Sets NODE_STATE for queue node file $1: done (had its turn, or is gone), queued (its caller
# holds the node's lock while it waits, or has given up), or new (just made; its caller is
# taking the slot right away or has not locked the node yet); NODE_PID to its caller's pid.
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
  done 2>/dev/null <"$1"
  [[ -n "$NODE_PID" && "$NODE_PID" != *[!0-9]* ]] || NODE_PID=0
}

# Picks the slot this caller queues on and takes the next place in that slot's queue, without
# any global lock: a place is a node file made with O_EXCL (noclobber), so two callers never
# get one place; one that loses a race looks again. Sets DEVICE, SLOT, SEQ (this caller's
# place), PRED_DONE (the place of the slot's last owner: every place up to it had its turn)
# and MUST_WAIT (1 when the slot is busy or has callers queued ahead).
choose_slot() {
  local d s i n load key best_i best_load best_key node made
  local -a busy=() seq=() queued=() since=() acc=()
  while true; do
    for ((d = 0; d < COUNT; d++)); do
      acc[d]=0
      for ((s = 0; s < PER_ACCELERATOR; s++)); do
        i=$((d * PER_ACCELERATOR + s))
        read_owner "$d" "$s"
        # A busy record whose wrapper is gone (killed by SIGKILL) is stale: its lock is free.
        if ((O_BUSY)) && ! kill -0 "$O_PID" 2>/dev/null; then
          O_BUSY=0
        fi
        # Callers queued on the slot: the places after its owner's that exist.
        for ((n = O_SEQ + 1; ; n++)); do
          [[ -e "$LOCK_DIR/accelerator_${d}_slot_${s}.node.$n" ]] || break
        done
        busy[i]=$O_BUSY
        seq[i]=$O_SEQ
        queued[i]=$((n - 1 - O_SEQ))
        since[i]=$O_SINCE
        ((O_BUSY)) || since[i]=0
        acc[d]=$((acc[d] + O_BUSY + queued[i]))
      done
    done
    best_i=-1 best_load=0 best_key=0
    for ((d = 0; d < COUNT; d++)); do
      for ((s = 0; s < PER_ACCELERATOR; s++)); do
        i=$((d * PER_ACCELERATOR + s))
        load=$((busy[i] + queued[i]))
        # Free slots: on the accelerator running the fewest tests. Busy ones: the one whose
        # test started first (most likely to end first).
        if ((load == 0)); then key=${acc[d]}; else key=${since[i]}; fi
        if ((best_i < 0 || load < best_load || (load == best_load && key < best_key))); then
          best_i=$i best_load=$load best_key=$key DEVICE=$d SLOT=$s
        fi
      done
    done
    SEQ=$((seq[best_i] + queued[best_i] + 1))
    node="$LOCK_DIR/accelerator_${DEVICE}_slot_${SLOT}.node.$SEQ"
    set -C
    { printf 'pid=%d\n' "$$" >"$node"; } 2>/dev/null
    made=$?
    set +C
    if ((made == 0)); then
      NODE="$node"
      PRED_DONE=${seq[best_i]}
      MUST_WAIT=$((best_load > 0))
      return 0
    fi
    [[ -e "$node" ]] || die "$EXIT_LOCK_DIR" "cannot create '$node' in the lock directory"
    # Another caller took that place a moment ago: look again.
  done
}

# Joins a slot's queue and waits for its lock (held on SLOT_FD until the test ends). Returns 1
# when the wait budget runs out first.
acquire_slot() {
  local cur node pred_fd slot_file now
  NODE_FD=""
  choose_slot
  # The test's variables are set now, so nothing but the fork is left once the slot is ours.
  export_device_env "$DEVICE"
  if ((MUST_WAIT)); then
    # Callers queued behind this one on the same slot wait for this node's lock, so they
    # cannot overtake it.
    exec {NODE_FD}>>"$NODE"
    if run_flock -n "$NODE_FD"; then
      printf 'queued\n' >&"$NODE_FD"
    else
      exec {NODE_FD}>&-
      NODE_FD=""
    fi
  fi

  # Wait until every caller queued ahead on this slot has taken it (or given up / died).
  for ((cur = SEQ - 1; cur > PRED_DONE; )); do
    node="$LOCK_DIR/accelerator_${DEVICE}_slot_${SLOT}.node.$cur"
    read_node "$node"
    [[ "$NODE_STATE" == "done" ]] && break
    if [[ "$NODE_STATE" == queued ]]; then
      exec {pred_fd}>>"$node"
      if ! flock_wait "$pred_fd"; then
        exec {pred_fd}>&-
        return 1
      fi
      exec {pred_fd}>&-
      read_node "$node"
      [[ "$NODE_STATE" == "done" ]] && break
    elif kill -0 "$NODE_PID" 2>/dev/null; then
      # Made a moment ago and still alive: it is about to take the slot (or to lock its node);
      # both now contend for the slot lock.
      break
    fi
    # Its caller died or gave up before its turn: wait for the one before it instead.
    cur=$((cur - 1))
  done

  slot_file="$LOCK_DIR/accelerator_${DEVICE}_slot_${SLOT}"
  exec {SLOT_FD}>>"$slot_file.lock"
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
  return 0
}

# Frees the slot: its record says free (keeping its last place), then the lock goes.
release_slot() {
  local now
  now_us now
  write_owner "$LOCK_DIR/accelerator_${DEVICE}_slot_${SLOT}.owner" 0 "$now" 0 -
  exec {SLOT_FD}>&-
}

# Deletes this slot's old queue nodes, once every NODE_CLEANUP_EVERY places (one `rm` for many
# tests). Every place before this caller's has had its turn, so nobody reads those any more.
queue_cleanup() {
  ((SEQ % NODE_CLEANUP_EVERY == 0)) || return 0
  local node n
  local -a old=()
  for node in "$LOCK_DIR/accelerator_${DEVICE}_slot_${SLOT}.node."*; do
    n="${node##*.}"
    [[ "$n" =~ ^[0-9]+$ ]] && ((10#$n <= SEQ - NODE_CLEANUP_EVERY)) && old+=("$node")
  done
  ((${#old[@]} == 0)) || rm -f -- "${old[@]}"
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
    generic)
      # Unknown vendor: the variables each runtime reads, all indexing the full device list.
      export CUDA_VISIBLE_DEVICES="$device"
      export HIP_VISIBLE_DEVICES="$device"
      ;&
    tpu)
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
  LOCK_DIR="${JAXCORE_LOCK_DIR:-/tmp/jaxcore_accelerator_locks_${USER:-$(id -un 2>/dev/null || echo "uid$UID")}}"
  if [[ ! -d "$LOCK_DIR" ]]; then
    mkdir -p -- "$LOCK_DIR" 2>/dev/null || [[ -d "$LOCK_DIR" ]] ||
      die "$EXIT_LOCK_DIR" "cannot create the lock directory JAXCORE_LOCK_DIR='$LOCK_DIR'"
  fi
  [[ -w "$LOCK_DIR" ]] || die "$EXIT_LOCK_DIR" "the lock directory JAXCORE_LOCK_DIR='$LOCK_DIR' is not writable"
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
  DEADLINE_US=$((start_us + wait_us))
  DEVICE=-1
  SLOT=-1
  SLOT_FD=""
  if ! acquire_slot; then
    now_us end_us
    log_line - - "$((end_us - start_us))" 0 "$EXIT_WAIT_TIMEOUT"
    die "$EXIT_WAIT_TIMEOUT" "no free accelerator slot for '$TEST_NAME' within JAXCORE_ACCELERATOR_WAIT_S=${wait_setting}s (${COUNT} accelerators x ${PER_ACCELERATOR} slots stayed busy, locks in '$LOCK_DIR'); raise JAXCORE_ACCELERATOR_WAIT_S or lower --local_test_jobs / pytest -n"
  fi

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

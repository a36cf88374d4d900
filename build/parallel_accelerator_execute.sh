#!/bin/bash
# Runs one test on one accelerator slot, so many tests can share a machine's GPUs/TPUs.
#
# Usage:
#   bazel test --run_under="$PWD/build/parallel_accelerator_execute.sh" --local_test_jobs=N ...
#   build/parallel_accelerator_execute.sh <test executable> [args...]
#   build/parallel_accelerator_execute.sh --detect   # prints "<platform> <count> <source>",
#                                    # source = env | detected | default (nothing found)
#
# The work is done by accelerator_slots.py beside this script (stdlib only, Python >= 3.9),
# run by the first of /usr/bin/python3, /usr/local/bin/python3, python3 on PATH. It becomes
# the wrapper process: it takes a slot, runs the test with only that device visible, and
# frees the slot when the test ends. How it schedules is in its docstring.
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
# The test gets CUDA_VISIBLE_DEVICES (cuda), ROCR_VISIBLE_DEVICES + HIP/CUDA_VISIBLE_DEVICES=0
# (rocm), the TPU_* variables (tpu) or all of them (generic); JAXCORE_ACCELERATOR_INDEX and
# JAXCORE_ACCELERATOR_SLOT; XLA_PYTHON_CLIENT_PREALLOCATE=false and 0.9 / tests-per-accelerator
# as XLA_PYTHON_CLIENT_MEM_FRACTION unless the caller set them.
#
# The slot lock lives as long as any process of the job: the test inherits the locked
# descriptor (and no other lock-directory file), so a SIGKILLed wrapper does not free the slot
# while its test runs; the kernel drops the lock when the last holder exits, so no stale lock
# survives a crash. SIGTERM/SIGINT/SIGHUP to the wrapper alone wait for the test to end.
#
# Files in the lock directory: accelerator_<d>_slot_<s>.lock (the slot's lock),
# accelerator_<d>_slot_<s>.owner (fixed-length record "<busy> <place> <since_us> <pid> <test>"),
# accelerator_<d>_slot_<s>.node.<place> (a place in the slot's queue: "pid=<pid>", then "queued"
# while it waits, "done" once it has the slot), detected (detection, reused for 5 minutes).
# No file is ever truncated, and none is opened through a symbolic link.
#
# Exit status: the test's own (128 + N when signal N killed it); 2 for a bad setting or a
# missing command; 73 for an unusable lock directory or lock file; 75 when no slot became free
# within JAXCORE_ACCELERATOR_WAIT_S; 126/127 when the test cannot be executed / found; 69 when
# no Python 3 is found.

set -euo pipefail

here=.
[[ "${BASH_SOURCE[0]}" != */* ]] || here="${BASH_SOURCE[0]%/*}"
# -I -S: stdlib only; no PYTHON* variable, user site or site-packages of the caller. The
# module is imported, not run as a file, so its bytecode is cached; its directory comes last
# on sys.path, so no file there can stand in for a standard module.
run='import sys; sys.path.append(sys.argv.pop(1)); import accelerator_slots; accelerator_slots.cli(sys.argv[1:])'
# The system's Python first: it starts fastest (a pyenv shim on PATH is a script that costs
# more than the whole wrapper).
for candidate in /usr/bin/python3 /usr/local/bin/python3; do
  [[ -x "$candidate" ]] && exec "$candidate" -I -S -c "$run" "$here" "$@"
done
candidate="$(command -v python3)" && exec "$candidate" -I -S -c "$run" "$here" "$@"
echo "parallel_accelerator_execute.sh: error: no python3 in /usr/bin, /usr/local/bin or on PATH" >&2
exit 69

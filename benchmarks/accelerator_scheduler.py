"""How close build/parallel_accelerator_execute.sh gets to a perfect scheduler.

A synthetic suite of 128 sleep-tests of mixed short lengths (0.05-0.4 s) runs on 4 fake
accelerators x 2 slots, fed by N concurrent callers that each take the next test in order
(like `bazel test --local_test_jobs=N --run_under=...`). For each run it prints

    makespan / ideal

where ideal is the makespan of a zero-overhead greedy list scheduler fed the same tests in the
same order onto the same 8 slots. Side by side, in the same run, it measures
  * a poll-and-sleep wrapper (try every slot with `flock -n`, sleep when none is free), the
    simple scheme the real script replaces, and
  * no wrapper at all: 8 callers starting the tests directly. This is the floor the machine
    itself imposes (process start-up, scheduling under load); on a busy machine it is well
    above 1.0, and the wrapper's own cost is its makespan over this one.
Failures (non-zero exits) are counted; the goal is zero. It also prints the wrapper's cost
per test on the critical path: (makespan - no-wrapper makespan) x slots / tests, in ms.

Usage: python3 benchmarks/accelerator_scheduler.py [--repeats 3] [--tests 128]
           [--compare OTHER_SCRIPT]   # adds rows for another version of the script
"""

import argparse
import heapq
import os
import pathlib
import random
import shutil
import statistics
import subprocess
import tempfile
import threading
import time

import plot_tables  # benchmarks/, the script's directory

REPO = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = REPO / "build" / "parallel_accelerator_execute.sh"

ACCELERATORS = 4
SLOTS_PER_ACCELERATOR = 2

# The scheme JAX-style scripts use, made to wait instead of failing: poll every slot with a
# non-blocking flock, sleep a little when all are taken.
_POLLING_WRAPPER = r"""#!/usr/bin/env bash
while true; do
  for j in $(seq 0 $((JAXCORE_TESTS_PER_ACCELERATOR - 1))); do
    for i in $(seq 0 $((JAXCORE_ACCELERATOR_COUNT - 1))); do
      exec {fd}>"$JAXCORE_LOCK_DIR/poll_${i}_${j}"
      if flock -n "$fd"; then
        CUDA_VISIBLE_DEVICES=$i "$@" {fd}>&-
        exit $?
      fi
      exec {fd}>&-
    done
  done
  sleep 0.1
done
"""


def ideal_makespan(durations, slots):
    """Makespan of greedy list scheduling: each test, in order, on the earliest-free slot."""
    free_at = [0.0] * slots
    heapq.heapify(free_at)
    for d in durations:
        heapq.heappush(free_at, heapq.heappop(free_at) + d)
    return max(free_at)


def run_suite(wrapper, durations, callers, lock_dir):
    """Runs every test through `wrapper` (None: directly) from `callers` threads.

    Returns:
      (makespan in seconds, number of tests that exited non-zero).
    """
    env = dict(
        os.environ,
        JAXCORE_ACCELERATOR_COUNT=str(ACCELERATORS),
        JAXCORE_TESTS_PER_ACCELERATOR=str(SLOTS_PER_ACCELERATOR),
        JAXCORE_ACCELERATOR_PLATFORM="cuda",
        JAXCORE_LOCK_DIR=str(lock_dir),
    )
    env.pop("JAXCORE_ACCELERATOR_LOG", None)
    lock_dir.mkdir(parents=True, exist_ok=True)
    sleep = shutil.which("sleep")
    next_test = iter(range(len(durations)))
    take = threading.Lock()
    failures = []

    def caller():
        while True:
            with take:
                index = next(next_test, None)
            if index is None:
                return
            command = [sleep, f"{durations[index]:.3f}"]
            if wrapper is not None:
                command.insert(0, str(wrapper))
            code = subprocess.call(command, env=env, stdout=subprocess.DEVNULL)
            if code != 0:
                failures.append((index, code))

    threads = [threading.Thread(target=caller) for _ in range(callers)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start, len(failures)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3, help="runs per row; the median is shown")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--compare",
        type=pathlib.Path,
        default=None,
        help="another version of the script, measured in the same run",
    )
    plot_tables.add_plot_option(parser)
    args = parser.parse_args()
    plot_tables.check_plot_option(parser, args)

    rng = random.Random(args.seed)
    durations = [round(rng.uniform(0.05, 0.4), 3) for _ in range(args.tests)]
    slots = ACCELERATORS * SLOTS_PER_ACCELERATOR
    ideal = ideal_makespan(durations, slots)
    print(
        f"{args.tests} sleep-tests of 0.05-0.4 s (total {sum(durations):.2f} s) on "
        f"{ACCELERATORS} fake accelerators x {SLOTS_PER_ACCELERATOR} slots; "
        f"ideal makespan {ideal:.3f} s; median of {args.repeats} runs"
    )
    with tempfile.TemporaryDirectory() as tmp:
        polling = pathlib.Path(tmp) / "polling_wrapper.sh"
        polling.write_text(_POLLING_WRAPPER)
        polling.chmod(0o755)
        rows = [
            ("parallel_accelerator_execute.sh", SCRIPT, 16),
            ("parallel_accelerator_execute.sh", SCRIPT, 8),
            ("poll-and-sleep baseline", polling, 16),
            ("no wrapper (machine floor)", None, slots),
        ]
        if args.compare is not None:
            rows[2:2] = [
                (f"compare: {args.compare.name}", args.compare.resolve(), 16),
                (f"compare: {args.compare.name}", args.compare.resolve(), 8),
            ]
        results = {}
        for repeat in range(args.repeats):
            for row, (name, wrapper, callers) in enumerate(rows):
                lock_dir = pathlib.Path(tmp) / f"locks_{repeat}_{row}"
                results.setdefault((name, callers), []).append(
                    run_suite(wrapper, durations, callers, lock_dir)
                )
        print(
            f"{'wrapper':34s} {'callers':>7s} {'makespan_s':>10s} {'/ideal':>7s} {'failures':>8s}"
        )
        medians = {}
        plotted: list[tuple[str, list[float | None]]] = []
        for (name, callers), runs in results.items():
            makespan = statistics.median(m for m, _ in runs)
            failures = sum(f for _, f in runs)
            medians[(name, callers)] = makespan
            print(f"{name:34s} {callers:7d} {makespan:10.3f} {makespan / ideal:7.3f} {failures:8d}")
            plotted.append((f"{name}, {callers} callers", [makespan / ideal]))
        ours = medians[("parallel_accelerator_execute.sh", 16)]
        base = medians[("poll-and-sleep baseline", 16)]
        floor = medians[("no wrapper (machine floor)", slots)]
        print(f"poll-and-sleep / ours at 16 callers: {base / ours:.3f}x")
        print(f"ours / no wrapper at 16 callers:     {ours / floor:.3f}x")
        for (name, callers), makespan in medians.items():
            if name.startswith(("parallel", "compare")):
                per_test_ms = (makespan - floor) * slots / args.tests * 1000
                print(f"per-test overhead, {name} at {callers} callers: {per_test_ms:.1f} ms")
    if args.plot is not None:
        plot_tables.plot_ratios(
            args.plot,
            f"accelerator scheduler: {args.tests} sleep-tests, makespan / ideal",
            "wrapper",
            ["makespan / ideal"],
            plotted,
        )


if __name__ == "__main__":
    main()

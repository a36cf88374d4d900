#!/usr/bin/env python3
"""Times the wheel build: clean, no-op, and after editing one .py file.

Runs `python3 build/build.py build --wheels=all` (the README's build command) so the numbers
include everything a user waits for. Goals (2-core machine): no-op <= 2 s, one-file <= 10 s.
Each rebuild is measured several times and the median printed, with its ratio to the goal.

Usage: python3 benchmarks/build_times.py [--repeats N] [--skip_clean]
"""

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import plot_tables  # benchmarks/, the script's directory

REPO = Path(__file__).resolve().parents[1]
BUILD = [
    sys.executable,
    str(REPO / "build" / "build.py"),
    "build",
    "--wheels=all",
    "--output_path",
    "/tmp/jaxcore_build_times_dist",
]
EDITED = REPO / "jaxcore" / "tree" / "__init__.py"
GOALS = {"no-op rebuild": 2.0, "one-file rebuild": 10.0}


def _timed(cmd):
    start = time.perf_counter()
    subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip_clean", action="store_true", help="skip the clean build")
    plot_tables.add_plot_option(parser)
    args = parser.parse_args()
    plot_tables.check_plot_option(parser, args)

    results = {}
    if not args.skip_clean:
        _timed(["bazel", "clean", "--expunge"])
        results["clean build (server start included)"] = [_timed(BUILD)]
    _timed(BUILD)  # warm

    results["no-op rebuild"] = [_timed(BUILD) for _ in range(args.repeats)]

    original = EDITED.read_bytes()
    one_file = []
    try:
        for i in range(args.repeats):
            EDITED.write_bytes(original + f"\n# build_times edit {i}\n".encode())
            one_file.append(_timed(BUILD))
    finally:
        EDITED.write_bytes(original)
    results["one-file rebuild"] = one_file
    _timed(BUILD)  # leave bazel-bin matching the sources

    print(f"{'case':40s} {'median s':>9s} {'min s':>7s} {'goal s':>7s} {'median/goal':>12s}")
    plotted: list[tuple[str, list[float | None]]] = []
    for case, times in results.items():
        goal = GOALS.get(case)
        med = statistics.median(times)
        ratio = f"{med / goal:12.2f}" if goal else f"{'-':>12s}"
        print(f"{case:40s} {med:9.2f} {min(times):7.2f} {goal or float('nan'):7.1f} {ratio}")
        plotted.append((case, [med / goal if goal else None]))
    if args.plot is not None:
        plot_tables.plot_ratios(
            args.plot, "Bazel build times, median / goal", "case", ["median / goal"], plotted
        )


if __name__ == "__main__":
    main()

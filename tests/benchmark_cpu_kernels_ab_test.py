"""benchmarks/cpu_kernels_ab.py: two builds of the native library timed in one process.

Run end to end at tiny sizes with the library Bazel built as both builds (B a copy under
another name, so it loads as a second library), and on its error paths: a missing file, a
library without the FFI handler, and arguments that break the layout.
"""

import ctypes.util
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import kernel_test_util
import pytest

import jaxcore_cpu

kernel_test_util.require_native_cpu_kernels()

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "cpu_kernels_ab.py"
TINY = ("--k", "128", "--n", "96", "--reps", "2", "--chain", "2")


def _run(*args):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
    )


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    jaxcore_cpu.isa()  # loads the library
    a = jaxcore_cpu.library_path()
    b = tmp_path_factory.mktemp("ab") / "libjaxcore_cpu_kernels_b.so"
    shutil.copy(a, b)
    return a, str(b)


@pytest.mark.parametrize("precision", ["int8", "float32"])
def test_times_both_builds_for_every_format_and_m(libraries, precision):
    a, b = libraries
    result = _run(
        "--a",
        a,
        "--b",
        b,
        *TINY,
        "--formats",
        "int8",
        "int4",
        "nf4",
        "--m",
        "1",
        "3",
        "--precision",
        precision,
        "--isa",
        "portable",
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"A: {a}" in out and f"B: {b}" in out
    assert f"{precision} activations" in out and "ISA portable" in out
    rows = re.findall(
        r"^  (\w+)\s+M=(\d+)\s+A\s+([\d.]+) /\s+([\d.]+) ms\s+B\s+([\d.]+) /\s+([\d.]+) ms\s+"
        r"B/A ([\d.]+)  \(B faster in (\d+)/(\d+)\)$",
        out,
        re.M,
    )
    assert [(r[0], r[1]) for r in rows] == [
        (f, m) for f in ("int8", "int4", "nf4") for m in ("1", "3")
    ]
    for row in rows:
        a_min, a_med, b_min, b_med, ratio = map(float, row[2:7])
        assert 0 < a_min <= a_med and 0 < b_min <= b_med and ratio > 0, row
        assert int(row[8]) == 2 and 0 <= int(row[7]) <= 2, row
    # The closing table repeats each format's ratio per M.
    table = out[out.index("B / A, median") :]
    assert "| M | int8 | int4 | nf4 |" in table
    for m in ("1", "3"):
        cells = re.search(rf"^  \| {m} \| (.*) \|$", table, re.M).group(1).split(" | ")
        assert cells == [r[6] for r in rows if r[1] == m], (m, cells)


@pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None, reason="matplotlib is not installed"
)
def test_plot_draws_the_ratio_table(libraries, tmp_path):
    png = tmp_path / "ab.png"
    result = _run("--a", libraries[0], "--b", libraries[1], *TINY, "--m", "1", "--plot", str(png))
    assert result.returncode == 0, result.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_missing_library_is_named(libraries):
    result = _run("--a", libraries[0], "--b", "/nonexistent/lib.so", *TINY)
    assert result.returncode != 0
    assert "no library at '/nonexistent/lib.so'" in result.stderr


def test_a_library_without_the_handler_is_named(libraries):
    libm = ctypes.util.find_library("m")
    if libm is None or not os.path.isabs(libm):
        libm = next(
            (
                p
                for p in ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib64/libm.so.6")
                if os.path.exists(p)
            ),
            None,
        )
    if libm is None:
        pytest.skip("no libm path to load")
    result = _run("--a", libraries[0], "--b", libm, *TINY)
    assert result.returncode != 0
    assert "does not export JaxcoreCpuQuantizedMatmul" in result.stderr


def test_bad_sizes_are_named(libraries):
    result = _run("--a", libraries[0], "--b", libraries[1], "--k", "100", "--block-size", "64")
    assert result.returncode == 2
    assert "--block-size (64) must be even and divide --k (100)" in result.stderr

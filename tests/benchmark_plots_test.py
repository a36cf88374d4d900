"""Each benchmark's ``--plot PATH``: the PNG of the ratio table it prints.

The drawing helper is checked on tables chosen here (bar heights read back from the figure),
two cheap benchmarks run end to end with ``--plot``, and every table-printing script is
checked to offer the option.
"""

import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
# The scripts that print a ratio table (the others are helpers).
TABLE_SCRIPTS = [
    "accelerator_scheduler.py",
    "build_times.py",
    "cpu_kernels_ab.py",
    "implicit_overheads.py",
    "named_linear.py",
    "named_overheads.py",
    "quantized_matmul.py",
    "quantized_matmul_transposed.py",
    "quantized_mlp.py",
    "scale_dtypes.py",
    "sharded_mlp.py",
    "stacked_layers.py",
    "tree_overheads.py",
]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
needs_matplotlib = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None,
    reason="matplotlib is not installed (build/requirements_dev_lock.txt)",
)


def _plot_tables():
    spec = importlib.util.spec_from_file_location("plot_tables", BENCHMARKS / "plot_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_table_script_offers_plot():
    assert sorted(p.name for p in BENCHMARKS.glob("*.py") if p.name[0] != "_") == sorted(
        TABLE_SCRIPTS + ["plot_tables.py"]
    )
    for name in TABLE_SCRIPTS:
        text = (BENCHMARKS / name).read_text()
        assert "plot_tables.add_plot_option(parser)" in text, name
        assert "plot_tables.check_plot_option(parser, args)" in text, name
        assert "plot_tables.plot_ratios(" in text, name


@needs_matplotlib
def test_plot_ratios_draws_one_bar_per_value(tmp_path, monkeypatch):
    plot_tables = _plot_tables()
    import matplotlib.pyplot as plt

    drawn = {}
    close = plt.close

    def keep_heights(fig):
        ax = fig.axes[0]
        drawn["bars"] = sorted(round(p.get_height(), 6) for p in ax.patches)
        drawn["ticks"] = [t.get_text() for t in ax.get_xticklabels()]
        close(fig)

    monkeypatch.setattr(plt, "close", keep_heights)
    path = tmp_path / "sub" / "table.png"
    plot_tables.plot_ratios(
        path, "t", "M", ["a", "b"], [("1", [0.5, None]), ("16", [1.25, 2.0]), ("256", [3.0, 0.1])]
    )
    assert path.read_bytes()[:8] == PNG_MAGIC
    # None draws no bar: five bars, each the ratio given.
    assert drawn["bars"] == [0.1, 0.5, 1.25, 2.0, 3.0]
    assert drawn["ticks"] == ["M = 1", "M = 16", "M = 256"]


def test_plot_ratios_rejects_a_ragged_row(tmp_path):
    with pytest.raises(ValueError, match="row '16' has 1 ratios for 2 columns"):
        _plot_tables().plot_ratios(tmp_path / "x.png", "t", "M", ["a", "b"], [("16", [1.0])])


def test_plot_option_without_matplotlib_is_a_usage_error(monkeypatch, capsys):
    plot_tables = _plot_tables()
    parser = argparse.ArgumentParser(prog="bench")
    plot_tables.add_plot_option(parser)
    args = parser.parse_args(["--plot", "out.png"])
    assert args.plot == Path("out.png")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SystemExit) as exit_info:
        plot_tables.check_plot_option(parser, args)
    assert exit_info.value.code == 2
    assert "--plot needs matplotlib" in capsys.readouterr().err
    # Without --plot, matplotlib is not needed.
    plot_tables.check_plot_option(parser, parser.parse_args([]))


@needs_matplotlib
@pytest.mark.parametrize(
    ("script", "args"),
    [
        ("accelerator_scheduler.py", ["--tests", "4", "--repeats", "1"]),
        ("tree_overheads.py", ["--rounds", "1", "--leaves", "2"]),
    ],
)
def test_benchmark_writes_its_plot(tmp_path, script, args):
    path = tmp_path / "plot.png"
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args, "--plot", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
    )
    assert result.returncode == 0, result.stderr
    assert f"plot: {path}" in result.stdout
    assert path.read_bytes()[:8] == PNG_MAGIC
    assert len(path.read_bytes()) > 5000, "an empty chart"


def test_quantized_mlp_runs_the_block_in_every_precision():
    # Tiny sizes: the script end to end, whichever kernel serves jaxcore.kernels here (the
    # native plugin in both precisions, or the reference kernel alone).
    result = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "quantized_mlp.py"),
            *("--d", "64", "--hidden", "128", "--m", "1", "3", "--reps", "1", "--rotate-mb", "1"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "M = 1: float32 block" in out and "M = 3: float32 block" in out
    rows = [
        line.split()
        for line in out.splitlines()
        if line.startswith("  ") and line.split()[0] in ("int8", "int4", "nf4")
    ]
    assert {r[0] for r in rows} == {"int8", "int4", "nf4"}
    for row in rows:
        ms, ratio, err = (float(v) for v in row[-3:])
        assert ms > 0 and ratio > 0
        exact = len(row) == 4 or row[1] == "float32"
        # The exact precision matches the block on the dequantized weights to float32 rounding;
        # int8 activations to their quantization error.
        assert err < (1e-5 if exact else 5e-2), row
    table = out[out.index("ratio to the float32 block:") :]
    assert table.count("| 1 |") == 1 and table.count("| 3 |") == 1

#!/usr/bin/env python3
"""Draws the ratio tables of a Markdown page (docs/benchmarks.md) as PNG bar charts.

Every benchmark here prints ratios measured side by side in one run; their results are
recorded as Markdown tables in docs/benchmarks.md. Each table preceded by a line
``<!-- plot: NAME.png -->`` is drawn to ``--out/NAME.png``: one group of bars per row (its
first cell is the label), one bar per numeric column, with a dashed line at 1.0x. Cells like
``0.48x`` or ``0.61x (0.16x)`` use their first number; cells without a number are skipped.

Each benchmark script also takes ``--plot PATH`` and draws the table it prints the same way
(:func:`add_plot_option`, :func:`check_plot_option`, :func:`plot_ratios`).

matplotlib is pinned in the dev-tools lock (build/requirements_dev_lock.txt, which
``build/build.py setup`` installs) and optional elsewhere.

Usage: python3 benchmarks/plot_tables.py docs/benchmarks.md --out docs/benchmarks
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
import textwrap
from pathlib import Path

_MARKER = re.compile(r"<!--\s*plot:\s*([\w.-]+\.png)\s*-->")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def parse_tables(text: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """Returns (png name, header, rows) for each marked Markdown table in ``text``."""
    lines = text.splitlines()
    tables = []
    for i, line in enumerate(lines):
        match = _MARKER.search(line)
        if not match:
            continue
        j = i + 1
        while j < len(lines) and not lines[j].startswith("|"):
            j += 1
        block = []
        while j < len(lines) and lines[j].startswith("|"):
            block.append([c.strip() for c in lines[j].strip().strip("|").split("|")])
            j += 1
        if len(block) < 3:
            raise ValueError(f"no Markdown table after {line.strip()!r}")
        tables.append((match.group(1), block[0], block[2:]))
    return tables


def cell_value(cell: str) -> float | None:
    """The first number in a cell (``0.48x`` -> 0.48), or None."""
    match = _NUMBER.search(cell.replace("`", ""))
    return float(match.group()) if match else None


def write_png(path: Path, title: str, header: list[str], rows: list[list[str]]) -> None:
    """Draws one table as grouped bars (rows = groups, numeric columns = bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = [
        c
        for c in range(1, len(header))
        if any(cell_value(r[c]) is not None for r in rows if c < len(r))
    ]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(rows) * max(1, len(columns)) / 2.5), 3.6))
    width = 0.8 / max(1, len(columns))
    for k, c in enumerate(columns):
        xs, ys = [], []
        for i, row in enumerate(rows):
            value = cell_value(row[c]) if c < len(row) else None
            if value is not None:
                xs.append(i + (k - (len(columns) - 1) / 2) * width)
                ys.append(value)
        ax.bar(xs, ys, width=width, label=header[c])
    ax.axhline(1.0, color="black", linestyle="--", linewidth=0.8)
    labels = [f"{header[0]} = {r[0]}" if len(r[0]) < 6 else r[0] for r in rows]
    ax.set_xticks(range(len(rows)), labels)
    if max(map(len, labels), default=0) > 14:
        # Long row labels (a benchmark's case names) would overlap: wrap them.
        ax.set_xticks(range(len(rows)), ["\n".join(textwrap.wrap(x, 16)) for x in labels])
        ax.tick_params(axis="x", labelsize=7)
    ax.set_ylabel("ratio (lower is faster)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=min(5, len(columns)), loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Fixed metadata, so the same table always gives the same bytes.
    fig.savefig(path, dpi=90, metadata={"Software": None})
    plt.close(fig)


def add_plot_option(parser: argparse.ArgumentParser) -> None:
    """Adds a benchmark's ``--plot PATH`` option (the PNG of the ratio table it prints)."""
    parser.add_argument(
        "--plot",
        type=Path,
        default=None,
        metavar="PATH",
        help="also draw the ratio table as a PNG at PATH (needs matplotlib)",
    )


def check_plot_option(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Stops with a usage error before any timing when ``--plot`` is given without matplotlib."""
    if args.plot is not None and importlib.util.find_spec("matplotlib") is None:
        parser.error(
            "--plot needs matplotlib: pip install --require-hashes -r build/requirements_dev_lock.txt"
        )


def print_ratios(title: str, label: str, columns: list[str], rows: list[tuple[str, list[float]]]):
    """Prints a benchmark's ratio table as Markdown under ``title`` (what :func:`main` reads).

    Args:
        title: the line above the table.
        label: the first header cell (what the row labels are, e.g. ``"M"``).
        columns: one name per ratio column.
        rows: ``(row label, ratios)`` with one ratio per column.
    """
    print(f"\n{title}")
    print(f"  | {label} | " + " | ".join(columns) + " |")
    print("  |---|" + "---|" * len(columns))
    for name, ratios in rows:
        print(f"  | {name} | " + " | ".join(f"{r:.2f}x" for r in ratios) + " |")


def plot_ratios(
    path: Path,
    title: str,
    label: str,
    columns: list[str],
    rows: list[tuple[str, list[float | None]]],
) -> None:
    """Draws a benchmark's ratio table as a PNG at ``path`` (as :func:`write_png` does).

    Args:
        path: the PNG to write (its directory is created).
        title: the chart's title.
        label: what the row labels are (the first header cell, e.g. ``"M"``).
        columns: one name per ratio column (one bar per row each).
        rows: ``(row label, ratios)`` with one ratio per column; ``None`` draws no bar.

    Raises:
        ValueError: if a row has a different number of ratios than there are columns.
    """
    for name, values in rows:
        if len(values) != len(columns):
            raise ValueError(
                f"plot_ratios: row {name!r} has {len(values)} ratios for {len(columns)} columns"
            )
    header = [label, *columns]
    cells = [
        [str(name), *("-" if v is None else f"{v:.4g}x" for v in values)] for name, values in rows
    ]
    write_png(path, title, header, cells)
    print(f"plot: {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        import matplotlib  # noqa: F401 - availability probe
    except ImportError:
        print(
            "plot_tables.py: matplotlib is not installed (pip install matplotlib)", file=sys.stderr
        )
        return 2
    for name, header, rows in parse_tables(args.page.read_text()):
        write_png(args.out / name, name[:-4].replace("_", " "), header, rows)
        print(args.out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Draws the ratio tables of a Markdown page (docs/benchmarks.md) as PNG bar charts.

Every benchmark here prints ratios measured side by side in one run; their results are
recorded as Markdown tables in docs/benchmarks.md. Each table preceded by a line
``<!-- plot: NAME.png -->`` is drawn to ``--out/NAME.png``: one group of bars per row (its
first cell is the label), one bar per numeric column, with a dashed line at 1.0x. Cells like
``0.48x`` or ``0.61x (0.16x)`` use their first number; cells without a number are skipped.

matplotlib is optional (not in the locked requirements): ``pip install matplotlib``.

Usage: python3 benchmarks/plot_tables.py docs/benchmarks.md --out docs/benchmarks
"""

from __future__ import annotations

import argparse
import re
import sys
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
    ax.set_xticks(
        range(len(rows)), [f"{header[0]} = {r[0]}" if len(r[0]) < 6 else r[0] for r in rows]
    )
    ax.set_ylabel("ratio (lower is faster)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=min(5, len(columns)), loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Fixed metadata, so the same table always gives the same bytes.
    fig.savefig(path, dpi=90, metadata={"Software": None})
    plt.close(fig)


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

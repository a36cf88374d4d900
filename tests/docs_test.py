"""The docs site's shape: the pages the nav must have, and the benchmark plots they show.

`mkdocs build --strict` itself (broken links, missing pages, unresolved API references) runs
in ci/run_docs.sh; the pages' examples run in tests/doctest_test.py.
"""

import importlib.util
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
REQUIRED = {
    "getting-started.md",
    "guide/tree.md",
    "guide/lens.md",
    "guide/utils.md",
    "guide/implicit.md",
    "guide/quant.md",
    "guide/kernels.md",
    "guide/named.md",
    "reproduce-ci.md",
    "sharded-tests.md",
    "writing-a-plugin.md",
    "benchmarks.md",
}


def _nav_pages(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, list):
        for item in node:
            yield from _nav_pages(item)
    elif isinstance(node, dict):
        for value in node.values():
            yield from _nav_pages(value)


@pytest.fixture(scope="module")
def config():
    return yaml.safe_load((REPO / "mkdocs.yml").read_text())


def test_nav_has_every_required_page_and_each_exists(config):
    pages = set(_nav_pages(config["nav"]))
    assert pages >= REQUIRED, f"missing from the nav: {sorted(REQUIRED - pages)}"
    for page in pages:
        assert (DOCS / page).is_file(), f"nav names docs/{page}, which is missing"


def test_api_reference_covers_every_public_module(config):
    api = {p for p in _nav_pages(config["nav"]) if p.startswith("api/")}
    for module in ("tree", "lens", "utils", "implicit", "quant", "kernels", "named"):
        assert f"api/{module}.md" in api
        assert f"::: jaxcore.{module}" in (DOCS / "api" / f"{module}.md").read_text()
    assert config.get("strict") is True


def _plot_tables():
    spec = importlib.util.spec_from_file_location(
        "plot_tables", REPO / "benchmarks" / "plot_tables.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_benchmark_table_has_its_plot_on_the_page():
    plot_tables = _plot_tables()
    text = (DOCS / "benchmarks.md").read_text()
    tables = plot_tables.parse_tables(text)
    assert tables
    for name, header, rows in tables:
        assert (DOCS / "benchmarks" / name).is_file(), f"run benchmarks/plot_tables.py: {name}"
        assert f"(benchmarks/{name})" in text, f"docs/benchmarks.md does not show {name}"
        assert rows and all(len(r) == len(header) for r in rows)


def test_plot_tables_reads_ratio_cells(tmp_path):
    plot_tables = _plot_tables()
    assert plot_tables.cell_value("0.61x (0.16x)") == 0.61
    assert plot_tables.cell_value("n/a") is None
    page = "<!-- plot: t.png -->\n| M | a | b |\n|---|---|---|\n| 1 | 0.5x | 2x |\n"
    ((name, header, rows),) = plot_tables.parse_tables(page)
    assert (name, header, rows) == ("t.png", ["M", "a", "b"], [["1", "0.5x", "2x"]])
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("matplotlib is optional and not installed")
    plot_tables.write_png(tmp_path / name, "t", header, rows)
    assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

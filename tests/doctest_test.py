"""Runs every `>>>` example: in the public docstrings of jaxcore and in the docs pages.

Docstrings: every module of the `jaxcore` package is searched (the public objects live in
private modules), each object's examples run in a fresh namespace holding the module's
globals. Docs pages: the examples of each `docs/**/*.md` page run top to bottom in one
namespace, as a reader would type them; fence lines (```pycon) end an example's output.
"""

import doctest
import importlib
import pkgutil
import re
import warnings
from pathlib import Path

import pytest

import jaxcore

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
# Modules that are programs, not libraries (importing them runs them).
SKIP_MODULES = {"jaxcore.__main__", "jaxcore.launch.__main__"}
# Examples known to be broken in files other work is editing right now: they run, and their
# failure is expected until fixed there (ste()'s example uses `w` and `x` it never defines).
KNOWN_BROKEN: dict[str, str] = {}
FENCE = re.compile(r"^\s*```.*$", re.MULTILINE)


def _modules():
    names = ["jaxcore"]
    for info in pkgutil.walk_packages(jaxcore.__path__, "jaxcore."):
        if info.name not in SKIP_MODULES:
            names.append(info.name)
    return sorted(names)


def _module_tests(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    # Objects re-exported from another module are tested where they are defined.
    return [t for t in finder.find(module, name) if t.examples]


def _pages():
    return sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))


def _run(tests):
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for test in tests:
            runner.run(test, out=_collect)
    return runner


_REPORT = []


def _collect(text):
    _REPORT.append(text)


def _check(runner, what):
    report = "".join(_REPORT)
    _REPORT.clear()
    assert runner.failures == 0, f"{runner.failures} failing example(s) in {what}:\n{report}"
    return runner.tries


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(reason=KNOWN_BROKEN[n], strict=False))
        if n in KNOWN_BROKEN
        else n
        for n in _modules()
    ],
)
def test_docstring_examples(name):
    tests = _module_tests(name)
    if not tests:
        pytest.skip("no examples")
    tries = _check(_run(tests), name)
    print(f"{name}: {tries} examples")


@pytest.mark.parametrize("page", _pages())
def test_docs_page_examples(page):
    text = FENCE.sub("", (DOCS / page).read_text())
    parser = doctest.DocTestParser()
    test = parser.get_doctest(text, {"__name__": "__main__"}, page, str(DOCS / page), 0)
    if not test.examples:
        pytest.skip("no examples")
    tries = _check(_run([test]), page)
    print(f"{page}: {tries} examples")


def test_examples_exist():
    """The docs and docstrings keep a floor of runnable examples (none silently dropped)."""
    docstring_examples = sum(len(t.examples) for name in _modules() for t in _module_tests(name))
    page_examples = sum(
        len(doctest.DocTestParser().get_examples(FENCE.sub("", (DOCS / p).read_text())))
        for p in _pages()
    )
    print(f"{docstring_examples} docstring examples, {page_examples} docs-page examples")
    assert docstring_examples >= 3
    assert page_examples >= 60

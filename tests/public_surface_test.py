"""The public surfaces of jaxcore's packages and plugins: explicit, complete ``__all__`` lists.

Checks, for every public package (and public module) of the library and its plugins, that it
declares ``__all__``, that every listed name resolves, and that no name it defines publicly
is left out; and that no module imports a private (``_name``) object from another module.
"""

import ast
import importlib
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# The public packages and modules checked here. (jaxcore.named and jaxcore.implicit have their
# own surface tests.)
PUBLIC = [
    "jaxcore.io",
    "jaxcore.kernels",
    "jaxcore.kernels.plugin_api",
    "jaxcore.launch",
    "jaxcore.lens",
    "jaxcore.plugins",
    "jaxcore.quant",
    "jaxcore.tree",
    "jaxcore.utils",
    "jaxcore_cpu",
    "jaxcore_gpu",
    "jaxcore_tpu",
]
SOURCES = ["jaxcore", "jaxcore_cpu", "jaxcore_gpu", "jaxcore_tpu"]
SKIP_DIRS = {"named", "implicit", "__pycache__"}


@pytest.mark.parametrize("name", PUBLIC)
def test_public_package_lists_its_surface(name):
    module = importlib.import_module(name)
    assert isinstance(getattr(module, "__all__", None), list), f"{name} has no __all__ list"
    listed = module.__all__
    assert len(listed) == len(set(listed)), f"{name}.__all__ repeats a name"
    for attr in listed:
        assert hasattr(module, attr), f"{name}.__all__ names {attr}, which it lacks"
    # Every public non-module attribute defined by the package is listed.
    unlisted = {
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_")
        and not isinstance(value, types.ModuleType)
        and attr not in listed
        and getattr(value, "__module__", name).startswith(name.split(".")[0])
    }
    assert not unlisted, f"{name} defines public names missing from __all__: {sorted(unlisted)}"


def test_top_level_lists_its_lazy_submodules_without_importing_them():
    import jaxcore

    assert jaxcore.__all__[0] == "__version__"
    assert set(jaxcore.__all__) - {"__version__"} == set(jaxcore._SUBMODULES)
    for sub in jaxcore._SUBMODULES:
        assert (REPO / "jaxcore" / sub).is_dir() or (REPO / "jaxcore" / f"{sub}.py").is_file()
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = jaxcore.nope


def _is_module(root: Path, package: str, name: str) -> bool:
    base = root.joinpath(*package.split("."))
    return (base / f"{name}.py").is_file() or (base / name / "__init__.py").is_file()


def _private_imports(path: Path, root: Path = REPO) -> list[str]:
    """``from X import _name`` where ``_name`` is an object, not a module, of another module."""
    tree = ast.parse(path.read_text())
    parts = path.relative_to(root).with_suffix("").parts
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        module = node.module or ""
        if node.level:
            module = ".".join(parts[: -node.level] + ((module,) if module else ()))
        for alias in node.names:
            name = alias.name
            if (
                name.startswith("_")
                and not name.startswith("__")
                and not _is_module(root, module, name)
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {module}.{name}")
    return found


def test_no_private_name_is_imported_across_modules():
    files = [
        path
        for source in SOURCES
        for path in (REPO / source).rglob("*.py")
        if not SKIP_DIRS & set(path.relative_to(REPO / source).parts[:-1])
    ]
    assert len(files) > 20
    assert [f for path in files for f in _private_imports(path)] == []


def test_private_import_scan_finds_one(tmp_path):
    # The scan itself, on a module written here: a private class imported from a sibling.
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "_a.py").write_text("class _Hidden: ...\n")
    (package / "b.py").write_text("from pkg._a import _Hidden\nfrom pkg import _a\n")
    assert _private_imports(package / "b.py", root=tmp_path) == ["pkg/b.py:1: pkg._a._Hidden"]

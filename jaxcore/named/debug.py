"""Debugging aids (``hax.debug``): module sanity checks and sharding displays.

``diagnose_common_issues`` raises ``ModuleProblems`` when a model breaks a rule that JAX
pytrees rely on but nothing enforces: an array stored in two places (the two become
independent copies after any transformation, so "tied" weights silently untie) or an array
in a static field (static data goes into the treedef, must be hashable, and is baked into
compiled code). ``visualize_sharding``/``visualize_shardings`` print how arrays are laid
out over devices, by axis name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding

from jaxcore.named._array import NamedArray, Tracer, describe_axes

__all__ = [
    "ModuleProblems",
    "diagnose_common_issues",
    "describe_sharding",
    "visualize_sharding",
    "visualize_shardings",
]


class ModuleProblems(Exception):
    """The problems ``diagnose_common_issues`` found.

    Attributes:
        reused_arrays: ``(description, [paths])`` for each array stored at several paths.
        static_arrays: Paths of static fields that hold arrays.
    """

    def __init__(self, reused_arrays: list[tuple[str, list[str]]], static_arrays: list[str]):
        self.reused_arrays = reused_arrays
        self.static_arrays = static_arrays
        lines = []
        for what, paths in reused_arrays:
            lines.append(
                f"- {what} is stored at {len(paths)} places ({', '.join(paths)}); a pytree "
                "holds copies, so these untie under jit/grad: store it once"
            )
        for path in static_arrays:
            lines.append(
                f"- static field {path} holds an array; static data must be hashable and is "
                "compiled in: make the field a regular (non-static) one"
            )
        super().__init__("Module problems:\n" + "\n".join(lines))


def _is_array(x: Any) -> bool:
    return isinstance(x, (jax.Array, np.ndarray))


def _has_array(x: Any) -> bool:
    leaves = jax.tree.leaves(x, is_leaf=lambda v: isinstance(v, NamedArray))
    return any(isinstance(v, NamedArray) or _is_array(v) for v in leaves)


def _walk(node: Any, path: str, arrays: dict[int, tuple[str, list[str]]], static: list[str]):
    """Records each array's paths (by identity) and static fields holding arrays."""
    if isinstance(node, NamedArray):
        raw = node.array
        if _is_array(raw):
            what = f"the array with axes {describe_axes(node.axes)}"
            arrays.setdefault(id(raw), (what, []))[1].append(path or "<root>")
        return
    if _is_array(node):
        what = f"the array of shape {tuple(node.shape)}"
        arrays.setdefault(id(node), (what, []))[1].append(path or "<root>")
        return
    if isinstance(node, Mapping):
        for k, v in node.items():
            _walk(v, f"{path}[{k!r}]", arrays, static)
    elif isinstance(node, (list, tuple)):
        for i, v in enumerate(node):
            _walk(v, f"{path}[{i}]", arrays, static)
    elif dataclasses.is_dataclass(node) and not isinstance(node, type):
        for f in dataclasses.fields(node):
            value = getattr(node, f.name, None)
            sub = f"{path}.{f.name}"
            if f.metadata.get("static", False):
                if _has_array(value):
                    static.append(sub)
            else:
                _walk(value, sub, arrays, static)
    else:  # other pytree nodes (e.g. registered classes): walk their children
        children, _ = jax.tree_util.tree_flatten(
            node, is_leaf=lambda v: v is not node or isinstance(v, NamedArray)
        )
        if len(children) == 1 and children[0] is node:
            return
        for i, child in enumerate(children):
            _walk(child, f"{path}<{i}>", arrays, static)


def diagnose_common_issues(module: Any) -> None:
    """Raises ``ModuleProblems`` if ``module`` reuses an array or keeps one in a static field.

    Args:
        module: A model (dataclass modules, dicts, lists, tuples, pytrees).

    Raises:
        ModuleProblems: listing every array stored at more than one path and every static
            field that holds an array, each by its path (``.encoder.layers[0].weight``).
    """
    arrays: dict[int, tuple[str, list[str]]] = {}
    static: list[str] = []
    _walk(module, "", arrays, static)
    reused = [(what, paths) for what, paths in arrays.values() if len(paths) > 1]
    if reused or static:
        raise ModuleProblems(reused, static)


def describe_sharding(x: Any) -> str:
    """One line saying how ``x`` is laid out: each named axis and the mesh axes it is split over.

    Args:
        x: A NamedArray or a ``jax.Array`` with a concrete sharding.

    Returns:
        E.g. ``"batch=8 -> data, embed=4 -> replicated (mesh data=4, model=2)"``.
    """
    raw = x.array if isinstance(x, NamedArray) else x
    sharding = getattr(raw, "sharding", None)
    if isinstance(x, NamedArray):
        labels = [f"{a.name}={a.size}" for a in x.axes]
    else:
        labels = [f"dim{i}={n}" for i, n in enumerate(getattr(raw, "shape", ()))]
    if not isinstance(sharding, NamedSharding):
        where = "one device" if sharding is None or len(sharding.device_set) == 1 else "devices"
        return ", ".join(labels) + f" (not split: {where})" if labels else f"scalar ({where})"
    spec = tuple(sharding.spec) + (None,) * (len(labels) - len(sharding.spec))
    parts = []
    for label, entry in zip(labels, spec):
        if entry is None:
            parts.append(f"{label} -> replicated")
        else:
            mesh_axes = entry if isinstance(entry, tuple) else (entry,)
            parts.append(f"{label} -> {'*'.join(str(m) for m in mesh_axes)}")
    mesh = ", ".join(f"{k}={v}" for k, v in dict(sharding.mesh.shape).items())
    return ", ".join(parts) + f" (mesh {mesh})"


def visualize_sharding(x: Any) -> None:
    """Prints ``describe_sharding(x)``; works eagerly and, through a debug callback, under jit.

    Args:
        x: A NamedArray or a ``jax.Array``.
    """
    raw = x.array if isinstance(x, NamedArray) else x
    if isinstance(raw, Tracer):
        axes = x.axes if isinstance(x, NamedArray) else None

        def show(sharding: Any) -> None:
            print(_describe_traced(axes, raw.shape, sharding))

        jax.debug.inspect_array_sharding(raw, callback=show)
        return
    print(describe_sharding(x))


def _describe_traced(axes: Any, shape: tuple, sharding: Any) -> str:
    class _Stub:  # an object with the sharding, shaped like the traced array
        pass

    stub = _Stub()
    stub.sharding = sharding  # type: ignore[attr-defined]  # a plain attribute holder
    stub.shape = shape  # type: ignore[attr-defined]  # a plain attribute holder
    if axes is None:
        return describe_sharding(stub)
    return describe_sharding(NamedArray._new(stub, axes))


def visualize_shardings(tree: Any) -> None:
    """Prints the layout of every array in ``tree``, one line per leaf, by its key path.

    Args:
        tree: A pytree of NamedArrays and arrays (other leaves are skipped).
    """
    leaves, _ = jax.tree_util.tree_flatten_with_path(
        tree, is_leaf=lambda v: isinstance(v, NamedArray)
    )
    for path, leaf in leaves:
        if isinstance(leaf, (NamedArray, jax.Array)):
            name = jax.tree_util.keystr(path) or "<root>"
            if isinstance(leaf, NamedArray) and isinstance(leaf.array, Tracer):
                print(name + ":", end=" ")
                visualize_sharding(leaf)
            else:
                print(f"{name}: {describe_sharding(leaf)}")

"""State dicts: a model's arrays as a flat ``{"layer.0.weight": array}`` dict (``hax.state_dict``).

PyTorch checkpoints, Hugging Face hubs and safetensors files name every parameter by a
dotted path. ``to_state_dict`` flattens a model (dataclass modules, dicts, lists, tuples)
into such keys: field names and indices joined by ``.``, a ``NamedArray`` stored as its
positional array. A stacked layer (anything with a ``stacked`` tree and a ``Block``/``block``
axis, such as ``hax.nn.Stacked``) is written as one entry per layer, ``layers.0.…``,
``layers.1.…``, the way the unstacked model names them. ``from_state_dict`` walks a
template model and fills it from such a dict, restacking the layers and checking every
shape. ``save_state_dict``/``load_state_dict`` write and read the dict as a safetensors
file (the format PyTorch and Hugging Face use), with the keys as they are.

PyTorch's ``nn.Linear`` stores a 2-D ``(out_features, in_features)`` weight, while a named
``Linear`` may map several input axes to several output axes in either order.
``to_torch_compatible_state_dict`` first flattens every such layer (``flatten_linear_layers``:
``Out`` and ``In`` each merged into one axis, the weight laid out ``Out, In``), so the keys
and shapes are what a PyTorch model of the same architecture has;
``from_torch_compatible_state_dict`` reads such a dict back into the named layout.

A module can rename its fields' keys with a ``_state_dict_key_map()`` method returning
``{field: key}`` (a key of ``None`` puts the field's entries at the module's own prefix),
or take over completely with ``to_state_dict(prefix)`` and
``from_state_dict(state_dict, prefix)`` methods.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxcore.named._array import NamedArray, describe_axes
from jaxcore.named._axis import Axis, to_axes
from jaxcore.named._tree import stack_axis
from jaxcore.named.util import replace_fields

__all__ = [
    "ModuleWithStateDictSerialization",
    "StateDict",
    "flatten_linear_layers",
    "from_state_dict",
    "from_torch_compatible_state_dict",
    "load_state_dict",
    "save_state_dict",
    "to_state_dict",
    "to_torch_compatible_state_dict",
    "unflatten_linear_layers",
    "with_prefix",
]

StateDict = dict[str, Any]
"""A flat mapping from dotted keys to arrays."""


def with_prefix(prefix: str | None, key: str | int | None) -> str | None:
    """``prefix.key``, or whichever of the two is present (``None`` if neither is).

    Args:
        prefix: The enclosing key, or ``None`` at the root.
        key: The field name or index to append, or ``None`` to stay at ``prefix``.

    Returns:
        The joined key.
    """
    if key is None or key == "":
        return prefix
    return str(key) if not prefix else f"{prefix}.{key}"


def _is_array(x: Any) -> bool:
    return isinstance(x, (jax.Array, np.ndarray, np.generic))


def _fields(node: Any) -> list[str]:
    """The non-static dataclass fields of ``node`` (static ones hold no arrays)."""
    return [f.name for f in dataclasses.fields(node) if not f.metadata.get("static", False)]


def _key_map(node: Any) -> Mapping[str, str | None]:
    fn = getattr(node, "_state_dict_key_map", None)
    return fn() if callable(fn) else {}


def _layer(node: Any, block: Axis, i: int) -> Any:
    """Layer ``i`` of a stacked tree: named arrays indexed along ``block``, others along dim 0."""

    def take(leaf: Any) -> Any:
        if isinstance(leaf, NamedArray):
            if block.name not in leaf._names:
                raise ValueError(
                    f"state dict: a stacked array with axes {describe_axes(leaf.axes)} lacks the "
                    f"layer axis {block.name!r}"
                )
            pos = leaf._names.index(block.name)
            return NamedArray._new(
                jnp.take(leaf.array, i, axis=pos), leaf.axes[:pos] + leaf.axes[pos + 1 :]
            )
        if _is_array(leaf) and jnp.ndim(leaf) >= 1:
            return leaf[i]
        return leaf

    return jax.tree.map(take, node, is_leaf=lambda x: isinstance(x, NamedArray))


def to_state_dict(tree: Any, prefix: str | None = None) -> StateDict:
    """Flattens ``tree`` into a dict from dotted keys to positional arrays.

    Args:
        tree: A model: dataclass modules, dicts, lists and tuples of ``NamedArray`` and
            array leaves. Non-array leaves (Python numbers, strings, ``None``) are skipped.
        prefix: A key prefix for every entry (``"model"`` gives ``"model.w"``).

    Returns:
        The state dict. Stacked layers give one entry per layer (``"layers.3.w"``).

    Raises:
        ValueError: if two entries would get the same key.
    """
    out: StateDict = {}
    _flatten_into(tree, prefix, out)
    return out


def _put(out: StateDict, key: str | None, value: Any) -> None:
    if key is None:
        raise ValueError("state dict: an array at the root needs a prefix to be named")
    if key in out:
        raise ValueError(f"state dict: two entries share the key {key!r}")
    out[key] = value


def _flatten_into(node: Any, prefix: str | None, out: StateDict) -> None:
    if node is None:
        return
    if isinstance(node, NamedArray):
        _put(out, prefix, node.array)
    elif _is_array(node):
        _put(out, prefix, node)
    elif callable(getattr(node, "to_state_dict", None)) and not isinstance(node, type):
        for key, value in node.to_state_dict(prefix).items():
            _put(out, key, value)
    elif (block := stack_axis(node)) is not None:
        for i in range(block.size):
            _flatten_into(_layer(node.stacked, block, i), with_prefix(prefix, i), out)
    elif isinstance(node, Mapping):
        for key, value in node.items():
            _flatten_into(value, with_prefix(prefix, key), out)
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            _flatten_into(value, with_prefix(prefix, i), out)
    elif dataclasses.is_dataclass(node):
        _flatten_fields(node, prefix, out)


def _flatten_fields(node: Any, prefix: str | None, out: StateDict) -> None:
    """The entries of a dataclass module's (non-static) fields, renamed by its key map."""
    key_map = _key_map(node)
    for name in _fields(node):
        _flatten_into(getattr(node, name), with_prefix(prefix, key_map.get(name, name)), out)


def from_state_dict(tree: Any, state_dict: Mapping[str, Any], prefix: str | None = None) -> Any:
    """A copy of the template ``tree`` with every array taken from ``state_dict``.

    Args:
        tree: The template model; only its structure, axes and shapes are used (its arrays
            may be ``jax.ShapeDtypeStruct`` stand-ins, e.g. from ``jax.eval_shape``).
        state_dict: The flat dict, as ``to_state_dict`` or ``load_state_dict`` give it.
        prefix: The key prefix the template's entries have in ``state_dict``.

    Returns:
        The filled model; ``NamedArray`` leaves keep the template's axes and dtypes come
        from ``state_dict``. Stacked layers are restacked along their layer axis.

    Raises:
        KeyError: if an entry the template needs is missing (the message names the key).
        ValueError: if an entry's shape differs from the template's.
    """
    return _fill(tree, state_dict, prefix)


def _entry(state_dict: Mapping[str, Any], key: str | None, shape: tuple[int, ...]) -> Any:
    if key is None:
        raise ValueError("state dict: an array at the root needs a prefix to be named")
    if key not in state_dict:
        near = sorted(k for k in state_dict if k.rsplit(".", 1)[0] == key.rsplit(".", 1)[0])
        hint = f"; keys beside it: {near[:8]}" if near else ""
        raise KeyError(f"state dict has no entry {key!r}{hint}")
    value = state_dict[key]
    if tuple(np.shape(value)) != tuple(shape):
        raise ValueError(
            f"state dict entry {key!r} has shape {tuple(np.shape(value))}, the model expects {tuple(shape)}"
        )
    return jnp.asarray(value)


def _fill(node: Any, sd: Mapping[str, Any], prefix: str | None) -> Any:
    if node is None:
        return None
    if isinstance(node, NamedArray):
        return NamedArray(_entry(sd, prefix, tuple(a.size for a in node.axes)), node.axes)
    if _is_array(node) or isinstance(node, jax.ShapeDtypeStruct):
        return _entry(sd, prefix, tuple(node.shape))
    if callable(getattr(node, "from_state_dict", None)) and not isinstance(node, type):
        return node.from_state_dict(sd, prefix)
    if (block := stack_axis(node)) is not None:
        return _fill_stacked(node, block, sd, prefix)
    container: Any = type(node)
    if isinstance(node, Mapping):
        return container({k: _fill(v, sd, with_prefix(prefix, k)) for k, v in node.items()})
    if isinstance(node, (list, tuple)):
        filled = [_fill(v, sd, with_prefix(prefix, i)) for i, v in enumerate(node)]
        return container(*filled) if hasattr(node, "_fields") else container(filled)
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return _fill_fields(node, sd, prefix)
    return node


def _fill_fields(node: Any, sd: Mapping[str, Any], prefix: str | None) -> Any:
    """A dataclass module with each (non-static) field filled from ``sd``."""
    key_map = _key_map(node)
    updates = {
        name: _fill(getattr(node, name), sd, with_prefix(prefix, key_map.get(name, name)))
        for name in _fields(node)
    }
    return replace_fields(node, updates)


class ModuleWithStateDictSerialization:
    """A mixin for dataclass modules that customize their state-dict keys.

    Override ``_state_dict_key_map`` to rename fields (``{"weight": "w"}``; a ``None`` key
    puts the field's entries at the module's own prefix), or ``to_state_dict`` /
    ``from_state_dict`` to take over; the defaults walk the fields as the module-level
    functions do, so an override can call ``super()`` and adjust the result.
    """

    def _state_dict_key_map(self) -> dict[str, str | None]:
        return {}

    def to_state_dict(self, prefix: str | None = None) -> StateDict:
        """This module's entries under ``prefix``."""
        out: StateDict = {}
        _flatten_fields(self, prefix, out)
        return out

    def from_state_dict(self, state_dict: Mapping[str, Any], prefix: str | None = None) -> Any:
        """A copy of this module filled from ``state_dict`` under ``prefix``."""
        return _fill_fields(self, state_dict, prefix)


def module_to_state_dict(module: Any, prefix: str | None = None) -> StateDict:
    """The state-dict entries of one dataclass module, walked field by field.

    This is what a layer's ``to_state_dict`` method does (the ``hax.nn`` layers all have
    one, as Haliax's do): a stacked module gives per-layer keys, another one its fields'
    entries (renamed by its ``_state_dict_key_map``). Unlike the module-level
    ``to_state_dict`` it never calls ``module.to_state_dict`` itself.
    """
    out: StateDict = {}
    if (block := stack_axis(module)) is not None:
        for i in range(block.size):
            _flatten_into(_layer(module.stacked, block, i), with_prefix(prefix, i), out)
    else:
        _flatten_fields(module, prefix, out)
    return out


def module_from_state_dict(
    module: Any, state_dict: Mapping[str, Any], prefix: str | None = None
) -> Any:
    """A copy of one dataclass module filled from ``state_dict`` (its ``from_state_dict``)."""
    if (block := stack_axis(module)) is not None:
        return _fill_stacked(module, block, state_dict, prefix)
    return _fill_fields(module, state_dict, prefix)


def _fill_stacked(node: Any, block: Axis, sd: Mapping[str, Any], prefix: str | None) -> Any:
    layer_template = _layer(node.stacked, block, 0)
    layers = [_fill(layer_template, sd, with_prefix(prefix, i)) for i in range(block.size)]
    is_named = lambda x: isinstance(x, NamedArray)  # noqa: E731 - a leaf predicate
    template_leaves, treedef = jax.tree.flatten(node.stacked, is_leaf=is_named)
    per_layer = [jax.tree.leaves(layer, is_leaf=is_named) for layer in layers]
    stacked_leaves: list[Any] = []
    for k, template in enumerate(template_leaves):
        parts = [leaves[k] for leaves in per_layer]
        if isinstance(template, NamedArray):
            pos = template._names.index(block.name)
            raw = jnp.stack([p.array for p in parts], axis=pos)
            stacked_leaves.append(NamedArray(raw, template.axes))
        elif _is_array(template) and jnp.ndim(template) >= 1:
            stacked_leaves.append(jnp.stack(parts))
        else:
            stacked_leaves.append(template)
    return replace_fields(node, {"stacked": jax.tree.unflatten(treedef, stacked_leaves)})


def _require_safetensors() -> Any:
    try:
        import safetensors.numpy as st  # noqa: PLC0415 - optional dependency
    except ImportError as e:  # pragma: no cover - installed with the dev requirements
        raise ImportError(
            "save_state_dict/load_state_dict need the safetensors package (pip install safetensors)"
        ) from e
    return st


def save_state_dict(state_dict: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Writes ``state_dict`` to ``path`` as a safetensors file, keys as they are.

    PyTorch (``safetensors.torch.load_file``) and Hugging Face read the file directly.

    Args:
        state_dict: A flat dict of arrays (``to_state_dict``'s result).
        path: The file to write.

    Raises:
        TypeError: if a value is not an array.
    """
    st = _require_safetensors()
    arrays = {}
    for key, value in state_dict.items():
        if isinstance(value, NamedArray):
            value = value.array
        if not (_is_array(value) or isinstance(value, (int, float, bool))):
            raise TypeError(f"state dict entry {key!r} is a {type(value).__name__}, not an array")
        arrays[key] = np.ascontiguousarray(np.asarray(value))
    st.save_file(arrays, os.fspath(path))


def load_state_dict(path: str | os.PathLike) -> StateDict:
    """Reads a safetensors file into a flat dict of ``jax.Array``s.

    Args:
        path: A file written by ``save_state_dict``, PyTorch or Hugging Face.

    Returns:
        The state dict; feed it to ``from_state_dict`` with a template model.
    """
    st = _require_safetensors()
    return {key: jnp.asarray(value) for key, value in st.load_file(os.fspath(path)).items()}


FLAT_IN = "__IN__"
"""Name of the single input axis of a flattened linear layer."""
FLAT_OUT = "__OUT__"
"""Name of the single output axis of a flattened linear layer."""


def _is_linear(node: Any) -> bool:
    """A dense layer: a dataclass with a NamedArray ``weight`` and ``In``/``Out`` axes."""
    if not dataclasses.is_dataclass(node) or isinstance(node, type):
        return False
    names = {f.name for f in dataclasses.fields(node)}
    layer: Any = node
    return {"weight", "In", "Out"} <= names and isinstance(layer.weight, NamedArray)


def _relayout(raw: Any, perm: list[int], shape: tuple[int, ...]) -> Any:
    """``raw`` transposed by ``perm`` and reshaped to ``shape`` (shape stand-ins too)."""
    if isinstance(raw, jax.ShapeDtypeStruct):
        return jax.ShapeDtypeStruct(shape, raw.dtype)
    return jnp.reshape(jnp.transpose(raw, perm), shape)


def _flatten_linear(node: Any) -> Any:
    in_axes, out_axes = to_axes(node.In), to_axes(node.Out)
    weight: NamedArray = node.weight
    inner = {a.name for a in in_axes} | {a.name for a in out_axes}
    others = tuple(a for a in weight.axes if a.name not in inner)  # e.g. a stack's layer axis
    flat_in = Axis(FLAT_IN, math.prod(a.size for a in in_axes))
    flat_out = Axis(FLAT_OUT, math.prod(a.size for a in out_axes))
    order = [weight._names.index(a.name) for a in (*others, *out_axes, *in_axes)]
    w = _relayout(
        weight.array, order, tuple(a.size for a in others) + (flat_out.size, flat_in.size)
    )
    updates: dict[str, Any] = {
        "weight": NamedArray(w, (*others, flat_out, flat_in)),
        "In": flat_in,
        "Out": flat_out,
    }
    bias = getattr(node, "bias", None)
    if isinstance(bias, NamedArray):
        b_others = tuple(a for a in bias.axes if a.name not in inner)
        b_order = [bias._names.index(a.name) for a in (*b_others, *out_axes)]
        b = _relayout(bias.array, b_order, tuple(a.size for a in b_others) + (flat_out.size,))
        updates["bias"] = NamedArray(b, (*b_others, flat_out))
    return replace_fields(node, updates)


def _map_modules(node: Any, fn: Any) -> Any:
    """``node`` with ``fn`` applied to every linear layer (dicts, sequences, dataclasses)."""
    if _is_linear(node):
        return fn(node)
    container: Any = type(node)
    if isinstance(node, Mapping):
        return container({k: _map_modules(v, fn) for k, v in node.items()})
    if isinstance(node, (list, tuple)) and not hasattr(node, "_fields"):
        return container(_map_modules(v, fn) for v in node)
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        updates = {name: _map_modules(getattr(node, name), fn) for name in _fields(node)}
        return replace_fields(node, updates)
    return node


def flatten_linear_layers(tree: Any) -> Any:
    """Every linear layer of ``tree`` with ``In`` and ``Out`` each merged into one axis.

    A linear layer is a dataclass module with a ``NamedArray`` weight and static ``In`` and
    ``Out`` axis specs (``hax.nn.Linear``, also inside ``hax.nn.Stacked``). Its weight
    becomes ``(..., __OUT__, __IN__)`` (``...``: axes outside ``In``/``Out``, such as a
    stack's layer axis; ``Out``/``In`` flattened in their spec order) and its bias
    ``(..., __OUT__)``: PyTorch's ``nn.Linear`` layout.

    Args:
        tree: The model.

    Returns:
        The model with flattened linear layers (for state dicts, not for running).
    """
    return _map_modules(tree, _flatten_linear)


def unflatten_linear_layers(template: Any, flattened: Any) -> Any:
    """Undoes ``flatten_linear_layers``: ``flattened``'s arrays in ``template``'s layout.

    Args:
        template: The model with named linear layers (its structure, axes and static
            fields are kept).
        flattened: The same model after ``flatten_linear_layers`` (e.g. loaded from a
            PyTorch state dict); its arrays are used.

    Returns:
        The model in ``template``'s layout holding ``flattened``'s values.
    """
    if _is_linear(template):
        return _unflatten_linear(template, flattened)
    container: Any = type(template)
    if isinstance(template, Mapping):
        return container({k: unflatten_linear_layers(v, flattened[k]) for k, v in template.items()})
    if isinstance(template, (list, tuple)) and not hasattr(template, "_fields"):
        return container(unflatten_linear_layers(t, f) for t, f in zip(template, flattened))
    if dataclasses.is_dataclass(template) and not isinstance(template, type):
        updates = {
            name: unflatten_linear_layers(getattr(template, name), getattr(flattened, name))
            for name in _fields(template)
        }
        return replace_fields(template, updates)
    return flattened


def _unflatten_linear(template: Any, flat: Any) -> Any:
    in_axes, out_axes = to_axes(template.In), to_axes(template.Out)
    inner = {a.name for a in in_axes} | {a.name for a in out_axes}
    updates: dict[str, Any] = {}
    pairs = [("weight", (*out_axes, *in_axes))]
    if isinstance(getattr(template, "bias", None), NamedArray):
        pairs.append(("bias", tuple(out_axes)))
    for name, inner_axes in pairs:
        target: NamedArray = getattr(template, name)
        source: NamedArray = getattr(flat, name)
        others = tuple(a for a in target.axes if a.name not in inner)
        natural = (*others, *inner_axes)  # the flattened array's order, unflattened
        raw = jnp.reshape(source.array, tuple(a.size for a in natural))
        perm = [[a.name for a in natural].index(a.name) for a in target.axes]
        updates[name] = NamedArray(jnp.transpose(raw, perm), target.axes)
    return replace_fields(template, updates)


def to_torch_compatible_state_dict(
    tree: Any, *, flatten: bool = True, prefix: str | None = None
) -> StateDict:
    """``to_state_dict`` with linear layers in PyTorch's 2-D ``(out, in)`` layout.

    Args:
        tree: The model.
        flatten: Flatten linear layers first (``flatten_linear_layers``).
        prefix: A key prefix for every entry.

    Returns:
        The state dict a PyTorch model of the same architecture loads.
    """
    return to_state_dict(flatten_linear_layers(tree) if flatten else tree, prefix)


def from_torch_compatible_state_dict(
    template: Any,
    state_dict: Mapping[str, Any],
    *,
    unflatten: bool = True,
    prefix: str | None = None,
) -> Any:
    """``from_state_dict`` for a dict whose linear weights are PyTorch-shaped ``(out, in)``.

    Args:
        template: The model (named layout).
        state_dict: The PyTorch-style dict (e.g. ``load_state_dict`` of a HF checkpoint).
        unflatten: The dict's linear layers are flattened (as ``to_torch_compatible_state_dict``
            writes them).
        prefix: The key prefix of the template's entries.

    Returns:
        The model in the template's layout.

    Raises:
        KeyError: if an entry is missing.
        ValueError: if an entry's shape differs from the (flattened) template's.
    """
    if not unflatten:
        return from_state_dict(template, state_dict, prefix)
    flat = from_state_dict(flatten_linear_layers(template), state_dict, prefix)
    return unflatten_linear_layers(template, flat)

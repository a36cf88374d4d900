"""Saving pytrees of arrays, quantized arrays and tree dataclasses to safetensors files.

A file holds one tensor per array leaf, named by the leaf's key path
(``jax.tree_util.keystr``), and string metadata:

* ``jaxcore.format`` / ``jaxcore.version``: what wrote the file and the layout version;
* ``jaxcore.treedef``: the tree structure as text (class names and static fields, e.g. a
  quantized array's format and block size), compared on load;
* ``jaxcore.arrays``: per implicit array (quantized weights), its type, logical shape and
  dtype and, for ``jaxcore.quant`` arrays, format name and block size;
* ``jaxcore.tensors``: each tensor's dtype and shape (bfloat16 and other ``ml_dtypes`` types
  are stored as same-width unsigned integers, which safetensors' NumPy API reads
  everywhere, and 0-d arrays as one element);
* ``jaxcore.sha256``: a digest of every tensor's bytes, so a corrupted file is an error,
  never garbage.

Nothing in a file is executed: loading a tree needs a template (``like``) that names the
structure, and the file's structure must match it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from typing import Any

import jax
import numpy as np

try:
    import safetensors
    import safetensors.numpy

    _HAVE_SAFETENSORS = True
except ImportError:  # an optional dependency of the jaxcore wheel
    _HAVE_SAFETENSORS = False

FORMAT = "jaxcore.pytree"
VERSION = 1

_STORAGE = {2: np.uint16, 1: np.uint8, 4: np.uint32, 8: np.uint64}


class CheckpointError(ValueError):
    """A file that is not a jaxcore checkpoint, is damaged, or does not match the template."""


def _leaves_with_keys(tree) -> tuple[list[tuple[str, Any]], Any]:
    flat, treedef = jax.tree_util.tree_flatten_with_path(tree)
    return [(jax.tree_util.keystr(path), leaf) for path, leaf in flat], treedef


def _implicit_arrays(tree) -> dict[str, dict]:
    """Describes every implicit array (quantized weight) in ``tree`` by key path."""
    from jaxcore.implicit import ImplicitArray

    found: dict[str, dict[str, object]] = {}
    flat, _ = jax.tree_util.tree_flatten_with_path(
        tree, is_leaf=lambda x: isinstance(x, ImplicitArray)
    )
    for path, node in flat:
        if not isinstance(node, ImplicitArray):
            continue
        entry: dict[str, object] = {
            "type": f"{type(node).__module__}.{type(node).__qualname__}",
            "shape": [int(d) for d in node.shape],
            "dtype": str(np.dtype(node.dtype)),
        }
        for name in ("fmt", "block_size", "axis", "double_quant"):
            value = getattr(node, name, None)
            if isinstance(value, (bool, int, str)):
                entry[name] = value
        found[jax.tree_util.keystr(path)] = entry
    return found


def _to_storage(key: str, leaf) -> tuple[np.ndarray, str]:
    if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
        raise CheckpointError(
            f"save: leaf {key} is a global array this process cannot read whole; gather it "
            "first (jax.experimental.multihost_utils.process_allgather) or save per process "
            "with orbax-checkpoint"
        )
    array = np.asarray(leaf)
    dtype = array.dtype
    if dtype.kind not in "biuf" or dtype.type.__module__ != "numpy":
        if dtype.itemsize not in _STORAGE:
            raise CheckpointError(f"save: leaf {key} has dtype {dtype}, which cannot be stored")
        array = array.view(_STORAGE[dtype.itemsize])
    return np.ascontiguousarray(array), str(dtype)


def _require_safetensors() -> None:
    if not _HAVE_SAFETENSORS:
        raise ImportError("jaxcore.io needs the safetensors package: pip install safetensors")


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(array.tobytes()).hexdigest()


def save(path: str | os.PathLike, tree) -> None:
    """Writes ``tree`` to a safetensors file at ``path``, atomically.

    The file is written to a temporary file beside ``path``, flushed to disk and renamed
    over ``path``: a crash at any point leaves either the old file or the new one, never
    a partial one.

    Args:
        path: Destination file.
        tree: A pytree whose leaves are arrays (jax or NumPy, any dtype including
            bfloat16) or scalars; quantized arrays and ``jaxcore.tree`` dataclasses are
            flattened to their array fields.

    Raises:
        CheckpointError: for a leaf that is not an array, a dtype safetensors cannot hold,
            or a global array this process cannot read whole.
    """
    _require_safetensors()
    leaves, treedef = _leaves_with_keys(tree)
    tensors, described, digests = {}, {}, {}
    for key, leaf in leaves:
        if not hasattr(leaf, "dtype") and not isinstance(leaf, (bool, int, float, complex)):
            raise CheckpointError(f"save: leaf {key} is a {type(leaf).__name__}, not an array")
        tensors[key], dtype = _to_storage(key, leaf)
        described[key] = {"dtype": dtype, "shape": list(np.shape(leaf))}
        digests[key] = _digest(tensors[key])
    metadata = {
        "jaxcore.format": FORMAT,
        "jaxcore.version": str(VERSION),
        "jaxcore.treedef": str(treedef),
        "jaxcore.arrays": json.dumps(_implicit_arrays(tree), sort_keys=True),
        "jaxcore.tensors": json.dumps(described, sort_keys=True),
        "jaxcore.sha256": json.dumps(digests, sort_keys=True),
    }
    blob = safetensors.numpy.save(tensors, metadata=metadata)
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a power cut
    finally:
        os.close(dir_fd)


def _read(path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    _require_safetensors()
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as e:
        raise CheckpointError(f"load: cannot read {path!r}: {e.strerror or e}") from None
    try:
        tensors = safetensors.numpy.load(blob)
        with safetensors.safe_open(path, framework="numpy") as f:
            metadata = f.metadata() or {}
    except Exception as e:  # safetensors raises its own SafetensorError (and others on junk)
        raise CheckpointError(
            f"load: {path!r} is not a valid safetensors file (truncated or corrupted?): {e}"
        ) from None
    if metadata.get("jaxcore.format") != FORMAT:
        raise CheckpointError(
            f"load: {path!r} is a safetensors file but not a jaxcore checkpoint "
            f"(metadata 'jaxcore.format' is {metadata.get('jaxcore.format')!r}, expected {FORMAT!r})"
        )
    version = metadata.get("jaxcore.version")
    if version != str(VERSION):
        raise CheckpointError(
            f"load: {path!r} has jaxcore checkpoint version {version!r}; this jaxcore reads "
            f"version {VERSION} (re-save it with the jaxcore that wrote it)"
        )
    try:
        described = json.loads(metadata["jaxcore.tensors"])
        digests = json.loads(metadata["jaxcore.sha256"])
        if set(described) != set(tensors) or set(digests) != set(tensors):
            raise ValueError("the metadata does not describe the file's tensors")
        out = {}
        for key, stored in tensors.items():
            if _digest(stored) != digests[key]:
                raise CheckpointError(
                    f"load: tensor {key} of {path!r} is corrupted (sha256 mismatch)"
                )
            dtype = np.dtype(jax.numpy.dtype(described[key]["dtype"]))
            value = stored.view(dtype) if stored.dtype != dtype else stored
            out[key] = value.reshape(described[key]["shape"])
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"load: {path!r} has damaged jaxcore metadata ({e})") from None
    return out, metadata


def metadata(path: str | os.PathLike) -> dict[str, Any]:
    """What a checkpoint holds, without a template.

    Returns:
        ``{"version", "treedef", "arrays", "tensors"}``: the layout version, the tree
        structure as text, the implicit (quantized) arrays by key path with their format
        and block size, and each tensor's shape and dtype by key path.

    Raises:
        CheckpointError: for a missing, damaged or foreign file.
    """
    tensors, meta = _read(path)
    return {
        "version": int(meta["jaxcore.version"]),
        "treedef": meta.get("jaxcore.treedef", ""),
        "arrays": json.loads(meta.get("jaxcore.arrays", "{}")),
        "tensors": {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in tensors.items()},
    }


def load(path: str | os.PathLike, like, *, sharding=None):
    """Reads a tree saved by :func:`save` into the structure of ``like``.

    Args:
        path: The file.
        like: A template with the same structure (e.g. the model as initialized, or
            ``jax.eval_shape`` of it): its classes, static fields (a quantized array's
            format and block size), key paths, shapes and dtypes must match the file's.
        sharding: Where to put the arrays: ``None`` (the default device), one
            ``jax.sharding.Sharding`` for every leaf, or a pytree of shardings shaped like
            ``like``'s leaves.

    Returns:
        The tree, bit-for-bit equal to what was saved.

    Raises:
        CheckpointError: for a missing, truncated, corrupted, foreign or wrong-version
            file, and for a file whose structure, keys, shapes or dtypes differ from
            ``like`` (the message names the first difference).
    """
    tensors, meta = _read(path)
    leaves, treedef = _leaves_with_keys(like)
    saved_arrays = json.loads(meta.get("jaxcore.arrays", "{}"))
    template_arrays = _implicit_arrays(like)
    for key in sorted(set(saved_arrays) | set(template_arrays)):
        if saved_arrays.get(key) != template_arrays.get(key):
            raise CheckpointError(
                f"load: {key} is {saved_arrays.get(key)} in {os.fspath(path)!r} but "
                f"{template_arrays.get(key)} in the template"
            )
    if meta.get("jaxcore.treedef") != str(treedef):
        raise CheckpointError(
            f"load: the tree in {os.fspath(path)!r} has a different structure from the "
            f"template:\n  file:     {meta.get('jaxcore.treedef')}\n  template: {treedef}"
        )
    keys = [key for key, _ in leaves]
    if set(keys) != set(tensors):
        missing = sorted(set(keys) - set(tensors))
        extra = sorted(set(tensors) - set(keys))
        raise CheckpointError(
            f"load: keys differ from the template: missing {missing}, unexpected {extra}"
        )
    values = []
    for key, leaf in leaves:
        stored = tensors[key]
        shape = tuple(np.shape(leaf))
        dtype = np.dtype(getattr(leaf, "dtype", np.asarray(leaf).dtype))
        if stored.shape != shape or stored.dtype != dtype:
            raise CheckpointError(
                f"load: {key} is {stored.dtype}{list(stored.shape)} in the file but "
                f"{dtype}{list(shape)} in the template"
            )
        values.append(stored)
    if sharding is None:
        placed = [jax.numpy.asarray(v) for v in values]
    elif isinstance(sharding, jax.sharding.Sharding):
        placed = [jax.device_put(v, sharding) for v in values]
    else:
        shardings = jax.tree_util.tree_leaves(
            sharding, is_leaf=lambda s: isinstance(s, jax.sharding.Sharding)
        )
        if len(shardings) != len(values):
            raise CheckpointError(
                f"load: {len(shardings)} shardings for {len(values)} leaves; pass one Sharding "
                "or a tree of them shaped like the template's leaves"
            )
        placed = [jax.device_put(v, s) for v, s in zip(values, shardings, strict=True)]
    return jax.tree_util.tree_unflatten(treedef, placed)

"""jaxcore.io: safetensors checkpoints of pytrees with quantized weights, bit-exact and atomic."""

import json
import os
import struct

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcore.io as jio
import jaxcore.tree as jtree
from jaxcore.quant import ArrayInt4, ArrayInt8, ArrayNF4


@jtree.dataclass
class Layer:
    w: object
    b: jax.Array
    name: str = jtree.field(static=True, default="layer")


def _tree():
    rng = np.random.default_rng(0)
    w = jnp.asarray(rng.standard_normal((128, 64)), jnp.float32)
    return {
        "int8": ArrayInt8.quantize(w),
        "int8_blocked": ArrayInt8.quantize(w, block_size=32),
        "int4": ArrayInt4.quantize(w, block_size=64),
        "nf4": ArrayNF4.quantize(w, block_size=64),
        "nf4_dq": ArrayNF4.quantize(w, block_size=64, double_quant=True),
        "layer": Layer(
            ArrayNF4.quantize(w.astype(jnp.bfloat16), 32), jnp.arange(4, dtype=jnp.bfloat16)
        ),
        "dense": [
            jnp.asarray(rng.standard_normal((3, 5)), jnp.float16),
            np.arange(6, dtype=np.int32),
        ],
        "scalar": jnp.float32(2.5),
    }


def _assert_bit_equal(a, b):
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb
    for x, y in zip(la, lb, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes()


def test_round_trip_is_bit_exact_for_every_format(tmp_path):
    tree = _tree()
    path = tmp_path / "model.safetensors"
    jio.save(path, tree)
    back = jio.load(path, like=tree)
    _assert_bit_equal(back, tree)
    assert isinstance(back["nf4_dq"], ArrayNF4) and back["nf4_dq"].double_quant
    for key in ("int8", "int4", "nf4", "nf4_dq"):
        np.testing.assert_array_equal(back[key].materialize(), tree[key].materialize())


def test_file_names_what_it_holds(tmp_path):
    path = tmp_path / "m.safetensors"
    jio.save(path, _tree())
    meta = jio.metadata(path)
    assert meta["version"] == jio.VERSION
    nf4 = meta["arrays"]["['nf4_dq']"]
    assert (
        nf4["type"].endswith("ArrayNF4") and nf4["block_size"] == 64 and nf4["double_quant"] is True
    )
    assert nf4["shape"] == [128, 64]
    assert meta["arrays"]["['int4']"]["block_size"] == 64
    assert meta["tensors"]["['scalar']"] == {"shape": [], "dtype": "float32"}
    # Other safetensors readers see plain tensors (bfloat16 stored as its bits).
    import safetensors.numpy

    raw = safetensors.numpy.load_file(str(path))
    assert raw["['layer'].b"].dtype == np.uint16


def test_load_onto_a_sharding(tmp_path):
    tree = {"w": ArrayInt8.quantize(jnp.ones((16, 8))), "b": jnp.zeros((8,))}
    path = tmp_path / "s.safetensors"
    jio.save(path, tree)
    device = jax.devices()[0]
    sharding = jax.sharding.SingleDeviceSharding(device)
    back = jio.load(path, like=tree, sharding=sharding)
    assert all(leaf.sharding == sharding for leaf in jax.tree_util.tree_leaves(back))
    shardings = jax.tree_util.tree_map(lambda _: sharding, tree)
    _assert_bit_equal(jio.load(path, like=tree, sharding=shardings), tree)
    with pytest.raises(jio.CheckpointError, match="1 shardings for 3 leaves"):
        jio.load(path, like=tree, sharding=[sharding])


def test_template_mismatch_names_the_difference(tmp_path):
    w = jnp.ones((128, 64))
    path = tmp_path / "m.safetensors"
    jio.save(path, {"w": ArrayNF4.quantize(w, block_size=64)})
    with pytest.raises(jio.CheckpointError, match=r"\['w'\].*'block_size': 64.*'block_size': 32"):
        jio.load(path, like={"w": ArrayNF4.quantize(w, block_size=32)})
    with pytest.raises(jio.CheckpointError, match=r"ArrayNF4.*ArrayInt4"):
        jio.load(path, like={"w": ArrayInt4.quantize(w, block_size=64)})
    jio.save(path, {"a": jnp.ones((2, 3))})
    with pytest.raises(
        jio.CheckpointError, match=r"float32\[2, 3\] in the file but float32\[3, 2\]"
    ):
        jio.load(path, like={"a": jnp.ones((3, 2))})
    with pytest.raises(jio.CheckpointError, match="different structure"):
        jio.load(path, like={"b": jnp.ones((2, 3))})


def test_truncated_corrupted_foreign_and_wrong_version_files(tmp_path):
    tree = {"a": jnp.arange(64, dtype=jnp.float32)}
    path = tmp_path / "m.safetensors"
    jio.save(path, tree)
    blob = path.read_bytes()

    (tmp_path / "short").write_bytes(blob[: len(blob) - 10])
    with pytest.raises(jio.CheckpointError, match="truncated or corrupted"):
        jio.load(tmp_path / "short", like=tree)

    flipped = bytearray(blob)
    flipped[-5] ^= 0xFF  # a data byte: safetensors itself cannot notice
    (tmp_path / "flipped").write_bytes(bytes(flipped))
    with pytest.raises(jio.CheckpointError, match=r"\['a'\].*corrupted \(sha256 mismatch\)"):
        jio.load(tmp_path / "flipped", like=tree)

    (tmp_path / "junk").write_bytes(b"not a checkpoint at all")
    with pytest.raises(jio.CheckpointError, match="not a valid safetensors file"):
        jio.metadata(tmp_path / "junk")

    import safetensors.numpy

    safetensors.numpy.save_file({"a": np.zeros(3, np.float32)}, str(tmp_path / "foreign"))
    with pytest.raises(jio.CheckpointError, match="not a jaxcore checkpoint"):
        jio.load(tmp_path / "foreign", like=tree)

    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8 : 8 + n])
    header["__metadata__"]["jaxcore.version"] = "999"
    new_header = json.dumps(header).encode()
    new_header += b" " * (-len(new_header) % 8)
    (tmp_path / "future").write_bytes(
        struct.pack("<Q", len(new_header)) + new_header + blob[8 + n :]
    )
    with pytest.raises(jio.CheckpointError, match="version '999'; this jaxcore reads version 1"):
        jio.load(tmp_path / "future", like=tree)

    with pytest.raises(jio.CheckpointError, match="cannot read"):
        jio.load(tmp_path / "missing", like=tree)


def test_save_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "m.safetensors"
    old = {"a": jnp.zeros((4,))}
    jio.save(path, old)
    before = path.read_bytes()

    def crash(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="disk full"):
        jio.save(path, {"a": jnp.ones((4,))})
    monkeypatch.undo()
    assert path.read_bytes() == before  # the old file is intact ...
    assert [p.name for p in tmp_path.iterdir()] == ["m.safetensors"]  # ... and no temp file is left
    _assert_bit_equal(jio.load(path, like=old), old)


def test_non_array_leaf_is_named(tmp_path):
    with pytest.raises(jio.CheckpointError, match=r"\['f'\] is a function, not an array"):
        jio.save(tmp_path / "x", {"f": lambda: 0})
    assert not list(tmp_path.iterdir())

"""hax.state_dict: dotted keys, stacked layers per layer, key maps, safetensors round trips."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcore.named as hax
import jaxcore.tree as jtree
from jaxcore.named import state_dict as hsd

In, Out, Block = hax.Axis("in", 3), hax.Axis("out", 2), hax.Axis("layer", 4)


@jtree.dataclass
class Dense:
    weight: hax.NamedArray
    bias: hax.NamedArray | None
    name: str = jtree.field(static=True, default="dense")


@jtree.dataclass
class Renamed:
    inner: Dense
    scale: jax.Array

    def _state_dict_key_map(self):
        return {"inner": None, "scale": "gamma"}


def _dense(seed, block=None):
    rng = np.random.default_rng(seed)
    lead = () if block is None else (block,)
    w = rng.normal(size=tuple(a.size for a in (*lead, Out, In))).astype(np.float32)
    b = rng.normal(size=tuple(a.size for a in (*lead, Out))).astype(np.float32)
    return Dense(
        hax.named(jnp.asarray(w), (*lead, Out, In)), hax.named(jnp.asarray(b), (*lead, Out))
    )


def test_to_state_dict_uses_dotted_keys_and_positional_arrays():
    model = {"encoder": [_dense(0), _dense(1)], "head": _dense(2)}
    sd = hsd.to_state_dict(model)
    assert sorted(sd) == [
        "encoder.0.bias",
        "encoder.0.weight",
        "encoder.1.bias",
        "encoder.1.weight",
        "head.bias",
        "head.weight",
    ]
    np.testing.assert_array_equal(sd["head.weight"], model["head"].weight.array)
    assert isinstance(sd["head.weight"], jax.Array)
    assert sorted(hsd.to_state_dict(_dense(0), prefix="model")) == ["model.bias", "model.weight"]


def test_stacked_layers_flatten_to_per_layer_keys_and_back():
    stacked = hax.Stacked(_dense(3, Block), Block)
    sd = hsd.to_state_dict({"layers": stacked})
    assert sorted(sd) == sorted(f"layers.{i}.{n}" for i in range(4) for n in ("weight", "bias"))
    for i in range(4):
        np.testing.assert_array_equal(sd[f"layers.{i}.weight"], stacked.stacked.weight.array[i])
    back = hsd.from_state_dict({"layers": stacked}, sd)["layers"]
    assert isinstance(back, hax.Stacked) and back.block == Block
    assert back.stacked.weight.axes == (Block, Out, In)
    np.testing.assert_array_equal(back.stacked.weight.array, stacked.stacked.weight.array)
    np.testing.assert_array_equal(back.stacked.bias.array, stacked.stacked.bias.array)


def test_stacked_layer_axis_not_first_is_restacked_in_place():
    w = jnp.arange(2 * 4 * 3, dtype=jnp.float32).reshape(2, 4, 3)
    stacked = hax.Stacked(Dense(hax.named(w, (Out, Block, In)), None), Block)
    sd = hsd.to_state_dict(stacked, prefix="h")
    np.testing.assert_array_equal(sd["h.1.weight"], np.asarray(w)[:, 1, :])
    back = hsd.from_state_dict(stacked, sd, prefix="h")
    np.testing.assert_array_equal(back.stacked.weight.array, w)


def test_key_map_renames_and_flattens_fields():
    model = Renamed(_dense(4), jnp.ones(3))
    sd = hsd.to_state_dict(model, prefix="norm")
    assert sorted(sd) == ["norm.bias", "norm.gamma", "norm.weight"]
    back = hsd.from_state_dict(model, {k: v * 2 for k, v in sd.items()}, prefix="norm")
    np.testing.assert_allclose(back.inner.weight.array, 2 * model.inner.weight.array)
    np.testing.assert_allclose(back.scale, 2 * np.ones(3))
    assert back.inner.name == "dense"


def test_from_state_dict_accepts_shape_stand_ins_and_keeps_axes():
    model = _dense(5)
    abstract = jax.eval_shape(lambda: model)
    back = hsd.from_state_dict(abstract, hsd.to_state_dict(model))
    assert back.weight.axes == (Out, In)
    np.testing.assert_array_equal(back.weight.array, model.weight.array)


def test_from_state_dict_errors_name_the_key():
    model = _dense(6)
    sd = hsd.to_state_dict(model, prefix="m")
    with pytest.raises(KeyError, match="no entry 'm.bias'.*m.weight"):
        hsd.from_state_dict(model, {"m.weight": sd["m.weight"]}, prefix="m")
    with pytest.raises(
        ValueError, match=r"'m.weight' has shape \(3, 2\), the model expects \(2, 3\)"
    ):
        hsd.from_state_dict(model, {**sd, "m.weight": sd["m.weight"].T}, prefix="m")
    with pytest.raises(ValueError, match="needs a prefix"):
        hsd.to_state_dict(jnp.ones(2))
    with pytest.raises(ValueError, match="share the key 'a.0'"):
        hsd.to_state_dict({"a": [jnp.ones(1)], "a.0": jnp.ones(1)})


def test_save_and_load_state_dict_round_trip_safetensors(tmp_path):
    pytest.importorskip("safetensors")
    model = {"layers": hax.Stacked(_dense(7, Block), Block), "bf": jnp.ones(2, jnp.bfloat16)}
    path = tmp_path / "model.safetensors"
    hsd.save_state_dict(hsd.to_state_dict(model), path)
    import safetensors.numpy

    raw = safetensors.numpy.load_file(str(path))  # plain keys: what torch/HF read
    assert "layers.2.weight" in raw and raw["bf"].dtype == jnp.bfloat16
    loaded = hsd.load_state_dict(path)
    back = hsd.from_state_dict(model, loaded)
    np.testing.assert_array_equal(
        back["layers"].stacked.weight.array, model["layers"].stacked.weight.array
    )
    assert back["bf"].dtype == jnp.bfloat16
    with pytest.raises(TypeError, match="'x' is a str"):
        hsd.save_state_dict({"x": "not an array"}, tmp_path / "bad.safetensors")


def test_torch_compatible_state_dict_flattens_linear_layers():
    Heads, HeadSize, Embed = hax.make_axes(heads=2, head_size=3, embed=4)
    keys = jax.random.split(jax.random.key(0), 3)
    # In + Out layout with a multi-axis In: torch wants (embed, heads * head_size).
    proj = hax.nn.Linear.init((Heads, HeadSize), Embed, key=keys[0], out_first=False)
    up = hax.nn.Linear.init(Embed, (Heads, HeadSize), key=keys[1])
    model = {"o_proj": proj, "up": up}
    sd = hsd.to_torch_compatible_state_dict(model, prefix="m")
    w = np.asarray(proj.weight.array)  # axes (heads, head_size, embed)
    np.testing.assert_array_equal(sd["m.o_proj.weight"], w.transpose(2, 0, 1).reshape(4, 6))
    assert sd["m.up.weight"].shape == (6, 4) and sd["m.up.bias"].shape == (6,)
    np.testing.assert_array_equal(sd["m.up.bias"], np.asarray(up.bias.array).reshape(6))
    scaled = {k: v * 3 for k, v in sd.items()}
    back = hsd.from_torch_compatible_state_dict(model, scaled, prefix="m")
    assert back["o_proj"].weight.axes == proj.weight.axes and back["o_proj"].In == proj.In
    np.testing.assert_allclose(back["o_proj"].weight.array, 3 * proj.weight.array, rtol=1e-6)
    np.testing.assert_allclose(back["up"].bias.array, 3 * up.bias.array)
    x = hax.random.normal(keys[2], (Heads, HeadSize))
    np.testing.assert_allclose(back["o_proj"](x).array, 3 * proj(x).array, rtol=1e-5)
    with pytest.raises(ValueError, match=r"'m.up.weight' has shape \(4, 6\)"):
        hsd.from_torch_compatible_state_dict(
            model, {**sd, "m.up.weight": sd["m.up.weight"].T}, prefix="m"
        )


def test_torch_compatible_state_dict_of_stacked_linear():
    if not hasattr(hax.nn, "Stacked"):
        pytest.skip("hax.nn.Stacked is not available")
    In2, Out2, Layers = (
        hax.Axis("in", 3),
        (hax.Axis("a", 2), hax.Axis("b", 2)),
        hax.Axis("layer", 2),
    )
    stack = hax.nn.Stacked.init(Layers, hax.nn.Linear)(
        In2, Out2, key=jax.random.split(jax.random.key(1), 2)
    )
    sd = hsd.to_torch_compatible_state_dict({"layers": stack})
    assert sorted(sd) == ["layers.0.bias", "layers.0.weight", "layers.1.bias", "layers.1.weight"]
    w = np.asarray(stack.stacked.weight.array)  # (layer, a, b, in)
    np.testing.assert_array_equal(sd["layers.1.weight"], w[1].reshape(4, 3))
    back = hsd.from_torch_compatible_state_dict({"layers": stack}, sd)
    np.testing.assert_array_equal(back["layers"].stacked.weight.array, stack.stacked.weight.array)


@jtree.dataclass
class Attention(hsd.ModuleWithStateDictSerialization):
    q: Dense
    o: Dense

    def _state_dict_key_map(self):
        return {"q": "q_proj", "o": "o_proj"}


@jtree.dataclass
class Scaled(hsd.ModuleWithStateDictSerialization):
    w: jax.Array

    def to_state_dict(self, prefix=None):
        return {k: v / 2 for k, v in super().to_state_dict(prefix).items()}

    def from_state_dict(self, state_dict, prefix=None):
        loaded = super().from_state_dict(state_dict, prefix)
        return Scaled(loaded.w * 2)


def test_module_with_state_dict_serialization_mixin():
    attn = Attention(_dense(8), _dense(9))
    sd = hsd.to_state_dict({"attn": attn})
    assert sorted(sd) == [
        "attn.o_proj.bias",
        "attn.o_proj.weight",
        "attn.q_proj.bias",
        "attn.q_proj.weight",
    ]
    assert sorted(attn.to_state_dict("x")) == sorted("x" + k[4:] for k in sd)
    back = hsd.from_state_dict({"attn": attn}, sd)["attn"]
    np.testing.assert_array_equal(back.o.weight.array, attn.o.weight.array)
    s = Scaled(jnp.arange(3.0))
    sd = hsd.to_state_dict(s, prefix="s")
    np.testing.assert_allclose(sd["s.w"], np.arange(3.0) / 2)
    np.testing.assert_allclose(hsd.from_state_dict(s, sd, prefix="s").w, np.arange(3.0))


def test_layers_have_state_dict_methods_like_haliax():
    key = jax.random.key(3)
    lin = hax.nn.Linear.init(hax.Axis("i", 3), hax.Axis("o", 2), key=key)
    sd = lin.to_state_dict()
    assert sorted(sd) == ["bias", "weight"]
    np.testing.assert_array_equal(sd["weight"], lin.weight.array)
    assert sorted(lin.to_state_dict("enc")) == ["enc.bias", "enc.weight"]
    zeroed = {k: np.zeros_like(v) for k, v in sd.items()}
    back = lin.from_state_dict(zeroed)
    assert back.weight.axes == lin.weight.axes and not np.asarray(back.weight.array).any()
    # a Stacked module's methods give (and read) per-layer keys
    Layers = hax.Axis("layers", 3)
    stack = hax.nn.Stacked.init(Layers, hax.nn.Linear)(
        hax.Axis("i", 3), hax.Axis("o", 2), key=jax.random.split(key, 3)
    )
    ssd = stack.to_state_dict()
    assert sorted(ssd) == [f"{i}.{p}" for i in range(3) for p in ("bias", "weight")]
    ref = hax.state_dict.to_state_dict(stack)
    assert sorted(ref) == sorted(ssd)
    for k in ssd:
        np.testing.assert_array_equal(ssd[k], ref[k])
    again = stack.from_state_dict(ssd)
    np.testing.assert_array_equal(again.stacked.weight.array, stack.stacked.weight.array)

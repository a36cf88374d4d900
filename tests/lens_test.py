"""Tests for jaxcore.lens: focusing, functional get/set/apply on nested pytrees."""

import collections
import typing

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcore import lens
from jaxcore import tree as jt


@jt.dataclass
class Layer:
    w: jax.Array
    b: jax.Array
    name: str = jt.field(default="dense", static=True)


@jt.dataclass
class Model(lens.HasLensFields):
    layers: lens.LensField[tuple] = jt.lens_field()
    config: dict = jt.field(default_factory=dict)
    scale: lens.LensField[float] = jt.lens_field(default=1.0)


Pair = collections.namedtuple("Pair", ["left", "right"])


def _model():
    return Model(
        layers=(Layer(jnp.ones((2, 2)), jnp.zeros(2)), Layer(2 * jnp.ones((2, 2)), jnp.ones(2))),
        config={"lr": 0.1, "pair": Pair(1, [2, 3])},
    )


def test_get_follows_attributes_keys_and_indices():
    m = _model()
    np.testing.assert_array_equal(lens.get(m, ("layers", 1, "w")), 2 * np.ones((2, 2)))
    assert lens.get(m, "config.lr") == 0.1
    assert lens.get(m, ("config", "pair", "right", 1)) == 3
    assert lens.focus().get(m) is m
    assert lens.get(m, lens.focus("config").focus(jax.tree_util.DictKey("lr"))) == 0.1


def test_set_rebuilds_only_the_path_and_leaves_original_untouched():
    m = _model()
    new_w = jnp.full((2, 2), 7.0)
    m2 = lens.set(m, ("layers", 0, "w"), new_w)
    assert isinstance(m2, Model) and isinstance(m2.layers, tuple)
    np.testing.assert_array_equal(m2.layers[0].w, new_w)
    np.testing.assert_array_equal(m.layers[0].w, np.ones((2, 2)))  # original intact
    assert m2.layers[1] is m.layers[1] and m2.config is m.config  # sharing off-path
    assert m2.layers[0].name == "dense"
    m3 = lens.set(m, ("config", "pair", "right", 0), 20)
    assert m3.config["pair"] == Pair(1, [20, 3]) and m.config["pair"] == Pair(1, [2, 3])
    assert isinstance(m3.config["pair"], Pair)


def test_apply_matches_manual_update_under_jit_and_grad():
    m = _model()
    scale_b = lens.focus("layers", 1, "b")
    out = jax.jit(lambda mm: scale_b.apply(mm, lambda b: b * 3 + 1))(m)
    np.testing.assert_array_equal(out.layers[1].b, 3 * np.ones(2) + 1)
    np.testing.assert_array_equal(out.layers[0].w, m.layers[0].w)

    def loss(w):
        return jnp.sum(lens.set(m, "layers", (Layer(w, jnp.zeros(2)),)).layers[0].w ** 2)

    np.testing.assert_allclose(jax.grad(loss)(jnp.ones((2, 2))), 2 * np.ones((2, 2)))


def test_set_static_field_and_init_false_field():
    m = _model()
    renamed = lens.set(m, ("layers", 0, "name"), "head")
    assert renamed.layers[0].name == "head"
    assert jax.tree_util.tree_structure(renamed) != jax.tree_util.tree_structure(m)
    # Static fields take unhashable values too (compared by content); tracers are refused.
    assert lens.set(m, ("layers", 0, "name"), ["head"]).layers[0].name == ["head"]
    with pytest.raises(TypeError, match=r"Layer\.name is a static field .* holds a JAX tracer"):
        jax.jit(lambda v: lens.set(m, ("layers", 0, "name"), v))(1.0)

    @jt.dataclass
    class Derived:
        x: float
        twice: float = jt.field(init=False)

        def __post_init__(self):
            object.__setattr__(self, "twice", 2 * self.x)

    d = lens.set(Derived(1.0), "twice", 5.0)
    assert (d.x, d.twice) == (1.0, 5.0)


@jt.dataclass
class Interval:
    lo: float
    hi: float

    @jt.skip_post_init_if_disabled
    def __post_init__(self):
        if self.lo > self.hi:
            raise ValueError(f"empty interval [{self.lo}, {self.hi}]")


def test_structural_update_through_invalid_intermediate_needs_no_post_init():
    iv = Interval(0.0, 1.0)
    with pytest.raises(ValueError, match=r"empty interval \[5.0, 1.0\]"):
        lens.set(lens.set(iv, "lo", 5.0), "hi", 6.0)
    with jt.no_post_init():
        moved = lens.set(lens.set(iv, "lo", 5.0), "hi", 6.0)
    assert (moved.lo, moved.hi) == (5.0, 6.0)


def test_set_on_custom_pytree_node_and_flattened_index():
    @jax.tree_util.register_pytree_node_class
    class Box:
        def __init__(self, a, b):
            self.a, self.b = a, b

        def tree_flatten(self):
            return (self.a, self.b), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            return cls(*children)

    box = Box(1, 2)
    out = lens.set(box, jax.tree_util.FlattenedIndexKey(1), 20)
    assert (out.a, out.b) == (1, 20) and box.b == 2
    assert lens.get(box, jax.tree_util.FlattenedIndexKey(0)) == 1
    with pytest.raises(
        lens.LensPathError,
        match=r"cannot focus \.a on an object of type Box: the value is readable but is not a pytree child",
    ):
        lens.set(box, "a", 5)
    with pytest.raises(lens.LensPathError, match="it has 2 children"):
        lens.get(box, jax.tree_util.FlattenedIndexKey(5))


def test_set_on_lists_and_immutable_mapping_via_pytree():
    assert lens.set([1, [2, 3]], (1, 0), 9) == [1, [9, 3]]
    ordered = collections.OrderedDict(a=1, b=2)
    updated = lens.set(ordered, "b", 5)
    assert isinstance(updated, collections.OrderedDict) and updated == {"a": 1, "b": 5}
    assert ordered["b"] == 2


def test_has_lens_fields():
    assert Model.lens_fields() == ("layers", "scale")
    lz = Model.lens("layers", 0, "b")
    assert lz == lens.focus("layers", 0, "b")
    assert repr(lz) == "Lens(.layers[0].b)"
    assert hash(lz) == hash(lens.focus("layers", 0, "b"))
    assert lens.apply(_model(), Model.lens("scale"), lambda s: s * 4).scale == 4.0
    with pytest.raises(
        ValueError,
        match=r"Model.lens\('config'\): not a lens field; lens fields are \['layers', 'scale'\]",
    ):
        Model.lens("config")

    class NotADataclass(lens.HasLensFields):
        pass

    with pytest.raises(TypeError, match="NotADataclass uses HasLensFields but is not a dataclass"):
        NotADataclass.lens("x")


def test_lens_field_annotation_and_immutability():
    hint = Model.__annotations__["scale"]
    assert typing.get_origin(hint) is typing.Annotated
    assert typing.get_args(hint)[0] is float and repr(typing.get_args(hint)[1]) == "LensField"
    lz = lens.focus("a")
    with pytest.raises(AttributeError, match="Lens is immutable"):
        lz.steps = ()
    assert lens.focus(lz, "b").steps == (
        jax.tree_util.GetAttrKey("a"),
        jax.tree_util.GetAttrKey("b"),
    )
    path = jax.tree_util.tree_flatten_with_path({"k": [0, 5]})[0][1][0]
    assert lens.get({"k": [0, 5]}, lens.focus(path)) == 5


@pytest.mark.parametrize(
    "path, error, pattern",
    [
        (
            "layers.9",
            lens.LensPathError,
            r"lens \.layers: cannot focus \.9 on an object of type tuple: no such attribute",
        ),
        (
            ("layers", 5),
            lens.LensPathError,
            r"lens \.layers: cannot focus \[5\] .* index out of range for length 2",
        ),
        (
            "nope",
            lens.LensPathError,
            r"lens <root>: cannot focus \.nope on an object of type Model: no such field; available fields layers, config, scale",
        ),
        (
            "config.missing",
            lens.LensPathError,
            r"lens \.config: cannot focus \.missing .* no such key; available keys \['lr', 'pair'\]",
        ),
        (
            ("scale", 0),
            lens.LensPathError,
            r"lens \.scale: cannot focus \[0\] on an object of type float: indices need a list or tuple",
        ),
        (("scale", jax.tree_util.DictKey("k")), lens.LensPathError, r"float is not a mapping"),
    ],
)
def test_get_and_set_errors_name_the_failing_step(path, error, pattern):
    with pytest.raises(error, match=pattern):
        lens.get(_model(), path)
    with pytest.raises(error, match=pattern):
        lens.set(_model(), path, 0)


@pytest.mark.parametrize(
    "component, error, pattern",
    [
        ("", ValueError, r"lens path component '' is not a valid"),
        ("a..b", ValueError, r"'a\.\.b' is not a valid"),
        (True, TypeError, "booleans are not indices"),
        (1.5, TypeError, "component 1.5 of type float is not supported"),
    ],
)
def test_focus_rejects_bad_components(component, error, pattern):
    with pytest.raises(error, match=pattern):
        lens.focus(component)


def test_lens_path_error_is_lookup_error():
    with pytest.raises(LookupError):
        lens.get({"a": 1}, "b")

"""jaxcore.named core: Axis and axis-spec helpers, NamedArray, creation.

Every named computation is checked against the positional ``jax.numpy``/NumPy one, in
eager mode and under ``jit``, ``grad`` and ``vmap``; every error path is checked to name
the offending axis.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _named_test_util import B, E, H, assert_named, rand

import jaxcore.named as hax
from jaxcore.named import Axis, NamedArray

# ----------------------------------------------------------------------------- Axis


def test_axis_equality_hash_alias_resize():
    a = Axis("batch", 3)
    assert a == Axis("batch", 3) and a != Axis("batch", 4) and a != Axis("b", 3)
    assert len({a, Axis("batch", 3), Axis("batch", 4)}) == 2
    assert a.alias("b2") == Axis("b2", 3)
    assert a.resize(7) == Axis("batch", 7)
    assert Axis("x", np.int64(5)).size == 5 and type(Axis("x", np.int64(5)).size) is int
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.size = 4  # frozen


@pytest.mark.parametrize(
    "args, exc, msg",
    [
        ((3, 4), TypeError, "name must be a str"),
        (("x", -1), ValueError, "'x'.*non-negative"),
        (("x", 2.5), TypeError, "'x'.*must be an int"),
        (("x", True), TypeError, "'x'.*must be an int"),
    ],
)
def test_axis_invalid(args, exc, msg):
    with pytest.raises(exc, match=msg):
        Axis(*args)


def test_make_axes_and_axis_name():
    X, Y = hax.make_axes(X=10, Y=20)
    assert (Axis("X", 10), Axis("Y", 20)) == (X, Y)
    assert hax.axis_name(X) == "X" and hax.axis_name("Y") == "Y"
    assert hax.axis_name((X, "Y")) == ("X", "Y")
    assert hax.axis_name({"X": 10, "Y": None}) == ("X", "Y")
    with pytest.raises(TypeError, match="Expected an Axis"):
        hax.axis_name(3)
    with pytest.raises(TypeError, match="Expected an Axis or an axis name"):
        hax.axis_name(("X", 3))


def test_concat_axes():
    assert hax.concat_axes((B, E), (H,)) == (B, E, H)
    assert hax.concat_axes(B, "head") == (B, "head")
    assert hax.concat_axes({"batch": 3}, (E,)) == {"batch": 3, "embed": 4}
    with pytest.raises(ValueError, match="'embed' occurs in both"):
        hax.concat_axes((B, E), ("embed",))
    with pytest.raises(ValueError, match="Duplicate axis name 'batch'"):
        hax.concat_axes((B, B), (E,))


def test_union_axes():
    assert hax.union_axes((B, E), (E, H)) == (B, E, H)
    assert hax.union_axes(("batch", E), (B, H)) == (B, E, H)  # the sized axis wins
    assert hax.union_axes({"batch": 3}, (E, B)) == {"batch": 3, "embed": 4}
    assert hax.union_axes((B,), {"embed": 4}) == {"batch": 3, "embed": 4}
    with pytest.raises(ValueError, match="'batch' has size 3 .* and 5"):
        hax.union_axes((B,), (Axis("batch", 5),))


def test_intersect_eliminate_without():
    assert hax.intersect_axes((B, E, H), ("head", B)) == (B, H)
    assert hax.intersect_axes({"batch": 3, "embed": 4}, (E,)) == {"embed": 4}
    # names in ax1 pick up the sizes ax2 gives (the tuple[AxisSelector] x AxisSpec -> tuple[Axis] overload)
    assert hax.intersect_axes(("batch", "embed", "head"), (E, B)) == (B, E)
    assert hax.intersect_axes(("batch", "embed"), ("embed",)) == ("embed",)
    assert hax.intersect_axes({"batch": None, "embed": 4}, (B,)) == {"batch": 3}
    with pytest.raises(ValueError, match="'embed' has size 4"):
        hax.intersect_axes((E,), (Axis("embed", 9),))
    assert hax.eliminate_axes((B, E, H), ("embed",)) == (B, H)
    assert hax.eliminate_axes({"batch": 3, "embed": None}, "embed") == {"batch": 3}
    with pytest.raises(ValueError, match="Axis 'nope' not present"):
        hax.eliminate_axes((B, E), "nope")
    assert hax.without_axes((B, E), ("nope", E)) == (B,)
    with pytest.raises(ValueError, match="'embed' has size 4"):
        hax.without_axes((B, E), (Axis("embed", 5),))
    assert hax.without_axes((B, E), (Axis("embed", 5),), allow_mismatched_sizes=True) == (B,)


def test_axis_helpers_reject_malformed_selections():
    with pytest.raises(TypeError, match="Expected an axis selection"):
        hax.union_axes(3, (B,))
    with pytest.raises(ValueError, match="Axis 'batch' given with size 3 and 5"):
        hax.union_axes({B: 5}, (E,))
    with pytest.raises(TypeError, match="'x': size must be an int"):
        hax.union_axes({"x": "big"}, (E,))
    with pytest.raises(TypeError, match="Expected an AxisSpec"):
        hax.zeros(3)
    with pytest.raises(TypeError, match="'batch' is given by name only"):
        hax.zeros("batch")
    with pytest.raises(TypeError, match=r"Expected an Axis or an axis name \(str\), got 3"):
        hax.zeros((B, 3))
    assert hax.zeros({B: 3}).axes == (B,)


def test_selects_axis_and_compatibility():
    assert hax.selects_axis((B, "embed"), {"batch": None, "embed": 128})
    assert hax.selects_axis((B, E), ("batch",))
    assert not hax.selects_axis((B, E), (Axis("batch", 5),))
    assert not hax.selects_axis((B,), ("embed",))
    assert hax.is_axis_compatible(B, "batch") and hax.is_axis_compatible("batch", "batch")
    assert not hax.is_axis_compatible(B, Axis("batch", 5))
    assert not hax.is_axis_compatible("batch", "embed")


# ----------------------------------------------------------------------------- NamedArray


def test_named_array_properties():
    x = rand(3, 4)
    a = hax.named(x, (B, E))
    assert a.shape == {"batch": 3, "embed": 4} and list(a.shape) == ["batch", "embed"]
    assert a.dtype == jnp.float32 and a.ndim == 2 and a.size == 12 and a.nbytes == 48
    assert a.has_axis("batch") and a.has_axis((B, "embed")) and not a.has_axis("head")
    assert not a.has_axis(Axis("batch", 5))
    assert a.axis_size("embed") == 4 and a.axis_size(("embed", B)) == (4, 3)
    assert a.resolve_axis("embed") == E and a.resolve_axis(("embed", "batch")) == (E, B)
    assert a.resolve_axis({"batch": None, "embed": 4}) == {"batch": 3, "embed": 4}
    assert a.axis_indices("embed") == 1 and a.axis_indices("head") is None
    assert a.axis_indices(("head", "batch")) == (None, 0)
    np.testing.assert_array_equal(a.real.array, x)
    np.testing.assert_array_equal(a.imag.array, np.zeros_like(x))
    assert a.astype(jnp.int32).dtype == jnp.int32
    assert a.tolist() == x.tolist()
    assert "batch=3" in repr(a)


def test_named_array_errors_name_axes():
    with pytest.raises(ValueError, match="2 dimensions but 1 axes"):
        NamedArray(jnp.zeros((3, 4)), (B,))
    with pytest.raises(ValueError, match="Axis 'embed' has size 4 but the array's dimension is 5"):
        NamedArray(jnp.zeros((3, 5)), (B, E))
    with pytest.raises(ValueError, match="Duplicate axis name 'batch'"):
        NamedArray(jnp.zeros((3, 3)), (B, B))
    with pytest.raises(TypeError, match="'batch' is given by name only"):
        NamedArray(jnp.zeros((3,)), ("batch",))
    a = hax.zeros((B, E))
    with pytest.raises(
        ValueError, match="Axis 'head' not found in array with axes \\(batch=3, embed=4\\)"
    ):
        a.resolve_axis("head")
    with pytest.raises(ValueError, match="'embed' has size 4 in the array but 7"):
        a.resolve_axis(Axis("embed", 7))
    with pytest.raises(ValueError, match="'embed' has size 4 in the array but 5"):
        a.resolve_axis({"embed": 5})
    with pytest.raises(ValueError, match="no axes, got axes \\(batch=3, embed=4\\)"):
        a.scalar()
    with pytest.raises(TypeError, match="immutable"):
        a["batch", 0] = 1
    with pytest.raises(TypeError, match="unbind"):
        iter(a)


def test_item_scalar():
    s = hax.sum(hax.ones((B, E)))
    assert s.axes == () and s.item() == 12.0 and float(s) == 12.0
    assert jnp.asarray(s.scalar()).shape == ()
    assert bool(hax.named(jnp.asarray(True), ()))


def test_named_constructor():
    a = hax.named(np.arange(12).reshape(3, 4), ("batch", "embed"))
    assert a.axes == (B, E) and isinstance(a.array, jax.Array)
    assert hax.named(jnp.arange(4), "embed").axes == (E,)
    assert hax.named(jnp.zeros((3, 4)), {"batch": 3, "embed": None}).axes == (B, E)
    with pytest.raises(ValueError, match="2 dimensions but 1 axes"):
        hax.named(jnp.zeros((3, 4)), "batch")
    with pytest.raises(ValueError, match="'embed' was given size 5 but the array's dimension is 4"):
        hax.named(jnp.zeros((3, 4)), ("batch", Axis("embed", 5)))
    with pytest.raises(ValueError, match="Duplicate axis name 'batch'"):
        hax.named(jnp.zeros((3, 3)), ("batch", "batch"))


def test_class_getitem_and_matches_axes():
    ann = NamedArray["batch", "embed"]
    a = hax.zeros((B, E))
    assert a.matches_axes(ann)
    assert not a.matches_axes(NamedArray["embed", "batch"])
    assert a.matches_axes(NamedArray["batch", ...]) and a.matches_axes(NamedArray[..., "embed"])
    assert a.matches_axes("batch embed") and a.matches_axes(("batch", "embed"))
    assert a.matches_axes({"embed", "batch"}) and not a.matches_axes({"embed"})
    assert a.matches_axes({"embed", ...}) and not a.matches_axes({"head", ...})
    assert not a.matches_axes(NamedArray["batch"])
    assert hax.zeros((B, H, E)).matches_axes(NamedArray["batch", ..., "embed"])
    with pytest.raises(TypeError, match="Axes spec entries"):
        a.matches_axes((1, 2))
    import typing

    with pytest.raises(TypeError, match="carries no NamedArray axes spec"):
        a.matches_axes(typing.Annotated[NamedArray, "batch"])


def test_pytree_roundtrip_and_tree_map():
    a = hax.named(rand(3, 4), (B, E))
    leaves, treedef = jax.tree_util.tree_flatten(a)
    assert len(leaves) == 1 and leaves[0] is a.array
    b = jax.tree_util.tree_unflatten(treedef, [leaves[0] * 2])
    assert_named(b, np.asarray(a.array) * 2, (B, E))
    c = jax.tree.map(lambda x: x + 1, {"w": a})
    assert_named(c["w"], np.asarray(a.array) + 1, (B, E))
    paths = jax.tree_util.tree_flatten_with_path(a)[0]
    assert "array" in jax.tree_util.keystr(paths[0][0])
    out = jax.jit(lambda t: t)(a)
    assert_named(out, a.array, (B, E))
    shape = jax.eval_shape(lambda t: t.sum("batch"), a)
    assert shape.axes == (E,) and shape.array.shape == (4,)
    assert jax.tree.map(lambda x: None, a).axes == (B, E)  # unflatten accepts any leaf
    import pickle

    assert_named(pickle.loads(pickle.dumps(a)), a.array, (B, E))


# ----------------------------------------------------------------------------- creation


def test_creation_functions():
    assert_named(hax.zeros((B, E)), np.zeros((3, 4)), (B, E))
    assert_named(hax.ones({"batch": 3, "embed": 4}, dtype=jnp.int32), np.ones((3, 4)), (B, E))
    assert hax.ones(B, dtype=jnp.int32).dtype == jnp.int32
    assert_named(hax.full((B,), 7.5), np.full(3, 7.5), (B,))
    a = hax.named(rand(3, 4), (B, E))
    assert_named(hax.zeros_like(a), np.zeros((3, 4)), (B, E))
    assert_named(hax.ones_like(a, dtype=jnp.int8), np.ones((3, 4)), (B, E))
    assert hax.ones_like(a, dtype=jnp.int8).dtype == jnp.int8
    assert_named(hax.full_like(a, 2.0), np.full((3, 4), 2.0), (B, E))
    with pytest.raises(TypeError, match="'batch' is given by name only"):
        hax.zeros(("batch",))
    with pytest.raises(TypeError, match="zeros_like needs a NamedArray"):
        hax.zeros_like(jnp.zeros(3))
    with pytest.raises(ValueError, match="scalar fill_value"):
        hax.full((B,), hax.ones((B,)))


def test_arange_and_spaces():
    X, Y = hax.make_axes(X=3, Y=4)
    assert_named(hax.arange(X), np.arange(3), (X,))
    assert_named(hax.arange((X, Y)), np.arange(12).reshape(3, 4), (X, Y))
    assert_named(hax.arange(Y, start=2, step=3), np.arange(2, 14, 3), (Y,))
    assert hax.arange(Y, dtype=jnp.float32).dtype == jnp.float32
    traced = jax.jit(lambda s: hax.arange(Y, start=s, step=2).array)(jnp.int32(5))
    np.testing.assert_array_equal(traced, np.arange(5, 13, 2))
    assert_named(hax.linspace(Y, start=0.0, stop=1.0), np.linspace(0, 1, 4), (Y,))
    assert_named(
        hax.linspace(Y, start=0.0, stop=1.0, endpoint=False),
        np.linspace(0, 1, 4, endpoint=False),
        (Y,),
    )
    assert hax.linspace("t", start=0.0, stop=1.0).axes == (Axis("t", 50),)
    assert_named(
        hax.logspace(Y, start=0.0, stop=2.0, base=2.0),
        np.logspace(0, 2, 4, base=2.0),
        (Y,),
        rtol=1e-5,
    )
    assert_named(
        hax.geomspace(Y, start=1.0, stop=1000.0), np.geomspace(1, 1000, 4), (Y,), rtol=1e-5
    )
    with pytest.raises(TypeError, match="Expected an Axis or an axis name"):
        hax.linspace(3, start=0.0, stop=1.0)

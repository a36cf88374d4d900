"""Tree helpers (``hax.tree.*``) that keep ``NamedArray`` values whole, and ``scan_aware_map``."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcore.named as hax

Layers, Embed, Hidden = hax.make_axes(layers=3, embed=4, hidden=5)


def _tree():
    w = hax.NamedArray(jnp.arange(20.0).reshape(4, 5), (Embed, Hidden))
    b = hax.NamedArray(jnp.ones(5), (Hidden,))
    return {"w": w, "b": b, "plain": jnp.array([1.0, 2.0]), "n": None}


def test_map_sees_named_arrays():
    tree = _tree()
    seen = []

    def fn(x):
        seen.append(type(x).__name__)
        return x * 2 if isinstance(x, hax.NamedArray) else x + 1

    out = hax.tree.map(fn, tree)
    assert sorted(seen) == ["ArrayImpl", "NamedArray", "NamedArray"]
    assert out["w"].axes == (Embed, Hidden)
    np.testing.assert_array_equal(np.asarray(out["w"].array), np.arange(20.0).reshape(4, 5) * 2)
    np.testing.assert_array_equal(np.asarray(out["plain"]), [2.0, 3.0])
    # several trees, matched leaf by leaf
    summed = hax.tree.map(lambda a, b: a + b, tree, tree)
    np.testing.assert_array_equal(np.asarray(summed["b"].array), np.full(5, 2.0))
    # an extra is_leaf predicate is combined with the NamedArray rule
    tagged = hax.tree.map(
        lambda x: "leaf", {"pair": (1, 2), "w": tree["w"]}, is_leaf=lambda x: isinstance(x, tuple)
    )
    assert tagged == {"pair": "leaf", "w": "leaf"}
    assert hax.tree_map is hax.tree.map and hax.tree_util.tree_map is hax.tree.map


def test_flatten_unflatten_leaves_structure():
    tree = _tree()
    leaves, treedef = hax.tree.flatten(tree)
    assert [type(x).__name__ for x in leaves] == ["NamedArray", "ArrayImpl", "NamedArray"]
    assert hax.tree.leaves(tree)[0] is tree["b"]
    assert hax.tree.structure(tree) == treedef
    assert (
        treedef.num_leaves == 3 and jax.tree.structure(tree).num_leaves == 3
    )  # jax descends into arrays too
    rebuilt = hax.tree.unflatten(treedef, (x for x in leaves))
    assert rebuilt["w"] is tree["w"] and rebuilt["n"] is None
    leaves2, _ = hax.tree.flatten({"a": (1, 2)}, is_leaf=lambda x: isinstance(x, tuple))
    assert leaves2 == [(1, 2)]
    assert hax.tree.leaves({"a": (1, 2)}, is_leaf=lambda x: isinstance(x, tuple)) == [(1, 2)]
    assert hax.tree.structure({"a": (1, 2)}, is_leaf=lambda x: isinstance(x, tuple)).num_leaves == 1
    assert hax.tree_flatten is hax.tree.flatten and hax.tree_unflatten is hax.tree.unflatten
    assert hax.tree_leaves is hax.tree.leaves and hax.tree_structure is hax.tree.structure


def _stacked_params():
    w = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
    layer_w = hax.NamedArray(
        jnp.asarray(w.transpose(1, 0, 2)), (Embed, Layers, Hidden)
    )  # layer axis not first
    scale = jnp.asarray([1.0, 2.0, 3.0])
    return w, hax.Stacked({"w": layer_w, "scale": scale}, Layers)


def test_scan_aware_map_maps_each_layer():
    w, stacked = _stacked_params()
    shapes = []

    def per_layer(x):
        if isinstance(x, hax.NamedArray):
            shapes.append(x.axes)
            return hax.NamedArray(
                x.array.sum(axis=0), x.axes[1:]
            )  # reduce the first non-layer axis
        return x * 10

    out = hax.tree.scan_aware_map(
        per_layer, {"blocks": stacked, "head": hax.NamedArray(jnp.ones(4), (Embed,))}
    )
    assert (Embed, Hidden) in shapes and all(Layers not in axes for axes in shapes)
    blocks = out["blocks"]
    assert isinstance(blocks, hax.Stacked) and blocks.block == Layers
    assert blocks.stacked["w"].axes == (Layers, Hidden)
    np.testing.assert_array_equal(np.asarray(blocks.stacked["w"].array), w.sum(axis=1))
    np.testing.assert_array_equal(np.asarray(blocks.stacked["scale"]), [10.0, 20.0, 30.0])
    # outside Stacked nodes it is plain map: the head keeps its own axes minus the first
    assert out["head"].axes == ()
    assert hax.scan_aware_tree_map is hax.tree.scan_aware_map


def test_scan_aware_map_with_several_trees_and_without_stacked():
    w, stacked = _stacked_params()
    out = hax.tree.scan_aware_map(lambda a, b: a + b, stacked, stacked)
    np.testing.assert_array_equal(np.asarray(out.stacked["w"].array), 2 * w)
    plain = _tree()
    same = hax.tree.scan_aware_map(lambda x: x, plain)
    assert same["w"] is plain["w"]
    # is_leaf still applies
    assert hax.tree.scan_aware_map(
        lambda x: "leaf", {"t": (1, 2)}, is_leaf=lambda x: isinstance(x, tuple)
    ) == {"t": "leaf"}
    # ... including inside Stacked nodes: fn gets the (per-layer) pair as one leaf
    pair = hax.Stacked({"p": (jnp.arange(3.0), jnp.ones(3))}, Layers)
    summed = hax.tree.scan_aware_map(
        lambda t: t[0] + t[1], pair, is_leaf=lambda x: isinstance(x, tuple)
    )
    np.testing.assert_array_equal(np.asarray(summed.stacked["p"]), [1.0, 2.0, 3.0])


def test_stacked_is_a_pytree_through_jit():
    w, stacked = _stacked_params()
    doubled = jax.jit(lambda s: hax.tree.map(lambda x: x * 2, s))(stacked)
    assert isinstance(doubled, hax.Stacked) and doubled.block == Layers
    np.testing.assert_array_equal(np.asarray(doubled.stacked["scale"]), [2.0, 4.0, 6.0])


@pytest.mark.parametrize(
    "call, exc, message",
    [
        (
            lambda s: hax.tree.scan_aware_map(
                lambda x: x, hax.Stacked(hax.NamedArray(jnp.ones(4), (Embed,)), Layers)
            ),
            ValueError,
            "without the layer axis 'layers'",
        ),
        (
            lambda s: hax.tree.scan_aware_map(
                lambda x: x,
                hax.Stacked(hax.NamedArray(jnp.ones(2), (hax.Axis("layers", 2),)), Layers),
            ),
            ValueError,
            "layer axis 'layers' has size 2, Stacked says 3",
        ),
        (
            lambda s: hax.tree.scan_aware_map(
                lambda a, b: a, s, hax.Stacked(s.stacked, hax.Axis("layers", 9))
            ),
            ValueError,
            "does not line up",
        ),
        (lambda s: hax.Stacked({}, "layers"), TypeError, "Stacked.block must be an Axis"),
    ],
)
def test_errors(call, exc, message):
    _, stacked = _stacked_params()
    with pytest.raises(exc, match=re.escape(message)):
        call(stacked)


def test_scan_aware_map_sees_each_layer_of_an_nn_stacked():
    Block, In, Out = hax.make_axes(block=3, d_in=4, d_out=2)
    stack = hax.nn.Stacked.init(Block, hax.nn.Linear)(
        In, Out, key=jax.random.split(jax.random.key(0), 3)
    )
    seen = []

    def per_layer(x):
        if isinstance(x, hax.NamedArray):
            seen.append(x.axes)
            return x * 2.0
        return x

    out = hax.tree.scan_aware_map(per_layer, stack)
    assert seen and all(Block not in axes for axes in seen)
    assert type(out) is type(stack) and out.Block == Block
    np.testing.assert_allclose(
        np.asarray(out.stacked.weight.array), 2.0 * np.asarray(stack.stacked.weight.array)
    )
    assert out.stacked.weight.axes == stack.stacked.weight.axes

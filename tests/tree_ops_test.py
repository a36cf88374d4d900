"""Tests for jaxcore.tree's tree_map alignment and the stack/concat/where/scatter helpers."""

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tree_test_util import Labeled, Opaque, Point

from jaxcore import tree as jt

# ---------------------------------------------------------------------------
# tree_map and structure errors
# ---------------------------------------------------------------------------


def test_tree_map_matches_jax_tree_map():
    a = {"p": Point(jnp.arange(3.0), jnp.ones(3)), "q": [jnp.float32(2.0), None]}
    b = jax.tree_util.tree_map(lambda v: v + 1, a)
    ours = jt.tree_map(lambda u, v: u * v, a, b)
    ref = jax.tree_util.tree_map(lambda u, v: u * v, a, b)
    assert jax.tree_util.tree_structure(ours) == jax.tree_util.tree_structure(ref)
    for u, v in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(ref)):
        np.testing.assert_array_equal(u, v)


def test_tree_map_prefix_and_is_leaf():
    out = jt.tree_map(lambda u, v: (u, v), {"a": 1, "b": 2}, {"a": (3, 4), "b": 5})
    assert out == {"a": (1, (3, 4)), "b": (2, 5)}
    pairs = jt.tree_map(
        lambda t: sum(t), {"a": (1, 2), "b": (3, 4)}, is_leaf=lambda x: isinstance(x, tuple)
    )
    assert pairs == {"a": 3, "b": 7}


def test_tree_map_aligns_tree_match_nodes_and_recurses():
    a = {"w": Labeled(jnp.array([1.0, 2.0]), ("x", "y"))}
    b = {"w": Labeled(jnp.array([10.0, 30.0]), ("y", "z"))}
    out = jt.tree_map(lambda u, v: u + v, a, b)
    assert isinstance(out["w"], Labeled) and out["w"].labels == ("x", "y", "z")
    ref = {"x": 1.0, "y": 2.0 + 10.0, "z": 30.0}
    np.testing.assert_allclose(out["w"].values, [ref[k] for k in ("x", "y", "z")])
    assert isinstance(a["w"], jt.SupportsTreeMatch)
    # Plain jax.tree.map would refuse: the static labels differ.
    with pytest.raises(ValueError):
        jax.tree_util.tree_map(lambda u, v: u + v, a, b)


def test_tree_map_alignment_works_under_jit_and_single_tree():
    a = Labeled(jnp.array([1.0, 2.0]), ("b", "a"))
    out = jax.jit(lambda t: jt.tree_map(lambda v: v * 2, t))(a)
    assert out.labels == ("a", "b")  # self-alignment sorts the vocabulary
    np.testing.assert_allclose(out.values, [4.0, 2.0])


def test_tree_map_tree_match_leaf_and_is_leaf_nodes_get_aligned_values():
    out = jt.tree_map(lambda u, v: u.value * 10 + v.value, [Opaque(1)], [Opaque(2)])
    assert out == [3 * 10 + 3]
    a = Labeled(jnp.array([1.0]), ("x",))
    b = Labeled(jnp.array([5.0]), ("y",))
    seen = jt.tree_map(
        lambda u, v: (u.labels, v.labels), a, b, is_leaf=lambda x: isinstance(x, Labeled)
    )
    assert seen == (("x", "y"), ("x", "y"))


def test_tree_map_rejects_bad_tree_match_result():
    class Broken:
        def __tree_match__(self, *others):
            return [self]

    with pytest.raises(
        TypeError, match=r"Broken.__tree_match__ must return a tuple of 2 aligned nodes"
    ):
        jt.tree_map(lambda u, v: u, [Broken()], [Broken()])

    class Short:
        def __tree_match__(self, *others):
            return (self,)

    with pytest.raises(TypeError, match="got tuple of length 1"):
        jt.tree_map(lambda u, v: u, [Short()], [Short()])


def test_tree_map_mismatch_names_first_differing_path():
    a = {"a": {"b": 1, "c": 2}, "d": [1, 2]}
    with pytest.raises(
        ValueError,
        match=r"tree_map: tree #1 .* first difference at \['a'\]: .*\['b'\], \['c'\].*\['b'\], \['x'\]",
    ):
        jt.tree_map(lambda u, v: u, a, {"a": {"b": 1, "x": 2}, "d": [1, 2]})
    with pytest.raises(
        ValueError, match=r"first difference at \['d'\]: expected list node .*got leaf of type int"
    ):
        jt.tree_map(lambda u, v: u, a, {"a": {"b": 1, "c": 2}, "d": 3})
    with pytest.raises(ValueError, match=r"tree #2 .*first difference at \['d'\]"):
        jt.tree_map(lambda u, v, w: u, a, a, {"a": {"b": 1, "c": 2}, "d": [1, 2, 3]})


@pytest.mark.parametrize(
    "ref, other, pattern",
    [
        (
            {"a": None, "b": 1},
            {"a": 3, "b": 2},
            r"first difference at \['a'\]: expected None, got leaf of type int",
        ),
        (
            {"a": 3},
            {"a": None},
            r"first difference at \['a'\]: expected leaf of type int, got None",
        ),
        (
            {"a": ()},
            {"a": 3},
            r"first difference at \['a'\]: expected tuple node with children \[none\], got leaf",
        ),
        (
            {"a": {}},
            {"a": [1]},
            r"first difference at \['a'\]: expected dict node with children \[none\], got list node",
        ),
    ],
)
def test_mismatch_at_childless_nodes_names_the_path(ref, other, pattern):
    # None, () and {} are childless nodes, not leaves: the path must still be named.
    with pytest.raises(
        ValueError, match=r"tree #1 does not match the structure of tree #0; " + pattern
    ):
        jt.assert_same_structure(ref, other)
    if ref["a"] is None:
        with pytest.raises(ValueError, match=r"tree_map: tree #1 .*" + pattern):
            jt.tree_map(lambda u, v: u, ref, other)


def test_tree_map_rebuilds_childless_tree_match_nodes_like_jax():
    @jt.dataclass
    class Empty:
        labels: tuple = jt.field(default=(), static=True)

        def __tree_match__(self, *others):
            return (self, *others)

    ours = jt.tree_map(lambda u, v: "called", [Empty(), 1], [Empty(), 2])
    assert ours == jax.tree_util.tree_map(lambda u, v: "called", [Empty(), 1], [Empty(), 2])
    assert ours == [Empty(), "called"]


def test_mismatch_in_static_data_is_reported_at_the_node():
    p, q = Point(1.0, 2.0, tag="a"), Point(1.0, 2.0, tag="b")
    with pytest.raises(
        ValueError,
        match=r"first difference at \[1\]: expected Point node .*static data \('a',\).*static data \('b',\)",
    ):
        jt.tree_map(lambda u, v: u, [0, p], [0, q])


def test_tree_structure_is_jax_treedef():
    p = Point(jnp.ones(2), jnp.ones(2))
    td = jt.tree_structure(p)
    assert td == jax.tree_util.tree_structure(p)
    assert td.num_leaves == 2
    assert (
        jt.tree_structure(
            (1, (2, 3)), is_leaf=lambda x: isinstance(x, tuple) and len(x) == 2 and x[0] == 2
        ).num_leaves
        == 2
    )
    assert td.unflatten([1, 2]) == Point(1, 2)


# ---------------------------------------------------------------------------
# stack / concat / zeros_like / where
# ---------------------------------------------------------------------------

_leaf_arrays = hnp.arrays(
    np.float32,
    hnp.array_shapes(min_dims=1, max_dims=3, max_side=4),
    elements=st.floats(-1e3, 1e3, width=32),
)


# Few examples: each new shape compiles fresh XLA ops, and CI has 2 shared cores.
@settings(max_examples=12, deadline=None)
@given(_leaf_arrays, st.integers(1, 4))
def test_stack_round_trip_property(base, count):
    trees = [{"a": base + i, "b": (base * i,)} for i in range(count)]
    stacked = jt.tree_stack(*trees)
    np.testing.assert_array_equal(stacked["a"], np.stack([t["a"] for t in trees]))
    assert stacked["b"][0].shape == (count, *base.shape)
    for i, t in enumerate(trees):
        np.testing.assert_array_equal(stacked["a"][i], t["a"])
        np.testing.assert_array_equal(stacked["b"][0][i], t["b"][0])


@settings(max_examples=10, deadline=None)
@given(_leaf_arrays, st.lists(st.integers(0, 2), min_size=1, max_size=3))
def test_concat_round_trip_property(base, extra_rows):
    trees = [
        Point(np.repeat(base[:1], r + 1, axis=0), np.full((r + 1, 2), r, np.float32))
        for r in extra_rows
    ]
    cat = jt.tree_concat(*trees)
    assert isinstance(cat, Point)
    np.testing.assert_array_equal(cat.x, np.concatenate([t.x for t in trees]))
    offsets = np.cumsum([0] + [r + 1 for r in extra_rows])
    for t, lo, hi in zip(trees, offsets[:-1], offsets[1:]):
        np.testing.assert_array_equal(cat.x[lo:hi], t.x)
        np.testing.assert_array_equal(cat.y[lo:hi], t.y)


def test_stack_and_concat_errors():
    with pytest.raises(ValueError, match="tree_stack needs at least one pytree"):
        jt.tree_stack()
    with pytest.raises(ValueError, match="tree_concat needs at least one pytree"):
        jt.tree_concat()
    with pytest.raises(
        ValueError,
        match=r"tree_stack: tree #1 .*first difference at <root>: expected dict node with children \[\['a'\]\]",
    ):
        jt.tree_stack({"a": 1.0}, {"b": 1.0})
    with pytest.raises(
        ValueError, match=r"tree_stack: leaves at \['a'\] have different shapes \[\(2,\), \(3,\)\]"
    ):
        jt.tree_stack({"a": np.ones(2)}, {"a": np.ones(3)})
    with pytest.raises(ValueError, match=r"tree_concat: leaf at \['a'\] is a scalar"):
        jt.tree_concat({"a": 1.0}, {"a": 2.0})
    with pytest.raises(
        ValueError, match=r"tree_concat: leaves at \.x have shapes \[\(2, 3\), \(2, 4\)\]"
    ):
        jt.tree_concat(Point(np.ones((2, 3)), np.ones(1)), Point(np.ones((2, 4)), np.ones(1)))


def test_tree_zeros_like_matches_numpy():
    tree = {
        "f": np.ones((2, 3), np.float32),
        "i": np.arange(4, dtype=np.int32),
        "p": Point(jnp.ones(1), jnp.ones(2)),
    }
    z = jt.tree_zeros_like(tree)
    np.testing.assert_array_equal(z["f"], np.zeros((2, 3), np.float32))
    assert z["f"].dtype == np.float32 and z["i"].dtype == np.int32
    assert isinstance(z["p"], Point) and float(jnp.abs(z["p"].y).sum()) == 0.0


def test_tree_where_broadcast_last_matches_numpy():
    rng = np.random.default_rng(0)
    accept = rng.random(4) > 0.5
    t1 = {
        "v": rng.normal(size=(4, 3)).astype(np.float32),
        "s": rng.normal(size=4).astype(np.float32),
    }
    t2 = jax.tree_util.tree_map(lambda v: -v, t1)
    out = jt.tree_where_broadcast_last(accept, t1, t2)
    np.testing.assert_array_equal(out["v"], np.where(accept[:, None], t1["v"], t2["v"]))
    np.testing.assert_array_equal(out["s"], np.where(accept, t1["s"], t2["s"]))
    jitted = jax.jit(jt.tree_where_broadcast_last)(accept, t1, t2)
    np.testing.assert_array_equal(jitted["v"], out["v"])


def test_tree_where_broadcast_last_errors():
    with pytest.raises(
        ValueError,
        match=r"leaf at \['v'\] has shape \(4,\) / \(4,\), fewer dimensions than accept with shape \(4, 2\)",
    ):
        jt.tree_where_broadcast_last(np.ones((4, 2), bool), {"v": np.ones(4)}, {"v": np.ones(4)})
    with pytest.raises(
        ValueError, match=r"accept with shape \(3,\) does not broadcast .* leaf at \['v'\]"
    ):
        jt.tree_where_broadcast_last(
            np.ones(3, bool), {"v": np.ones((4, 2))}, {"v": np.ones((4, 2))}
        )
    with pytest.raises(ValueError, match=r"tree_where_broadcast_last: tree #1 .*\['v'\]"):
        jt.tree_where_broadcast_last(np.ones(4, bool), {"v": np.ones(4)}, {"w": np.ones(4)})


# ---------------------------------------------------------------------------
# tree_scatter_set
# ---------------------------------------------------------------------------


@jt.dataclass
class ClipBuffer:
    data: jax.Array

    @property
    def scatter_args(self) -> jt.ScatterArgs:
        return {"mode": "clip"}


def test_tree_scatter_set_matches_numpy_and_respects_node_args():
    item = {"plain": jnp.zeros(5), "buf": ClipBuffer(jnp.zeros(5))}
    value = {"plain": jnp.array([1.0, 2.0]), "buf": ClipBuffer(jnp.array([1.0, 2.0]))}
    idxs = jnp.array([1, 10])  # 10 is out of range
    # No caller mode: the node's own mode="clip" applies to its subtree only.
    out = jt.tree_scatter_set(item, value, idxs, {})
    ref = np.zeros(5)
    ref[[1, 4]] = [1.0, 2.0]  # clipped to the last row
    np.testing.assert_array_equal(out["buf"].data, ref)
    np.testing.assert_array_equal(out["plain"], [0, 1, 0, 0, 0])  # default scatter drops
    assert isinstance(out["buf"], ClipBuffer) and isinstance(out["buf"], jt.HasScatterArgs)
    jitted = jax.jit(lambda i, v, k: jt.tree_scatter_set(i, v, k, {}))(item, value, idxs)
    np.testing.assert_array_equal(jitted["buf"].data, out["buf"].data)


def test_tree_scatter_set_caller_args_override_node_scatter_args():
    item = {"buf": ClipBuffer(jnp.zeros(5))}
    value = {"buf": ClipBuffer(jnp.array([1.0, 2.0]))}
    out = jt.tree_scatter_set(item, value, jnp.array([1, 10]), {"mode": "drop"})
    np.testing.assert_array_equal(out["buf"].data, [0, 1, 0, 0, 0])  # dropped, not clipped

    @jt.dataclass
    class Outer:
        inner: ClipBuffer

        @property
        def scatter_args(self):
            return {"mode": "drop"}

    # Arguments in force above a node win over the node's own as well.
    nested = jt.tree_scatter_set(
        Outer(ClipBuffer(jnp.zeros(3))), Outer(ClipBuffer(jnp.array([7.0]))), jnp.array([5]), {}
    )
    np.testing.assert_array_equal(nested.inner.data, [0, 0, 0])


def test_tree_scatter_set_accepts_fill_value_and_wrap_negative_indices():
    item = {"a": jnp.arange(4.0)}
    value = {"a": jnp.array([10.0, 20.0])}
    out = jt.tree_scatter_set(item, value, jnp.array([1, 9]), {"mode": "fill", "fill_value": -1})
    np.testing.assert_array_equal(out["a"], [0, 10, 2, 3])  # fill drops out-of-range updates
    wrapped = jt.tree_scatter_set(item, value, jnp.array([-1, 0]), {"wrap_negative_indices": True})
    np.testing.assert_array_equal(wrapped["a"], [20, 1, 2, 10])
    unwrapped = jt.tree_scatter_set(
        item, value, jnp.array([-1, 0]), {"wrap_negative_indices": False, "mode": "drop"}
    )
    np.testing.assert_array_equal(unwrapped["a"], [20, 1, 2, 3])  # -1 is out of range
    empty = jt.tree_scatter_set(item, {"a": jnp.zeros((0,))}, jnp.zeros((0,), jnp.int32), {})
    np.testing.assert_array_equal(empty["a"], np.arange(4.0))


@jt.dataclass
class Tagged:
    """Rows plus a static vocabulary; aligning merges the vocabularies, keeps the rows."""

    rows: jax.Array
    vocab: tuple = jt.field(static=True)

    def __tree_match__(self, *others):
        union = tuple(sorted(set(self.vocab).union(*(o.vocab for o in others))))
        return tuple(Tagged(n.rows, union) for n in (self, *others))


def test_tree_scatter_set_aligns_tree_match_nodes():
    item = {"t": Tagged(jnp.zeros(3), ("a",))}
    value = {"t": Tagged(jnp.array([5.0]), ("b",))}
    with pytest.raises(ValueError):  # raw structures differ (static vocabularies)
        jax.tree.map(lambda a, b: a, item, value)
    out = jt.tree_scatter_set(item, value, jnp.array([2]), {})
    assert out["t"].vocab == ("a", "b")
    np.testing.assert_array_equal(out["t"].rows, [0.0, 0.0, 5.0])


@settings(max_examples=10, deadline=None)
@given(
    st.integers(1, 6).flatmap(
        lambda n: st.tuples(
            hnp.arrays(np.float32, (n, 2), elements=st.floats(-10, 10, width=32)),
            st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True),
        )
    )
)
def test_scatter_then_gather_round_trip_property(case):
    base, idx_list = case
    idxs = np.array(idx_list)
    item = {"m": base, "v": base[:, 0]}
    value = {"m": base[idxs] + 100, "v": base[idxs, 0] - 100}
    out = jt.tree_scatter_set(item, value, jnp.asarray(idxs), {"unique_indices": True})
    ref = base.copy()
    ref[idxs] = base[idxs] + 100
    np.testing.assert_array_equal(out["m"], ref)
    np.testing.assert_array_equal(np.asarray(out["m"])[idxs], value["m"])
    np.testing.assert_array_equal(np.asarray(out["v"])[idxs], value["v"])


def test_tree_scatter_set_errors():
    item = {"a": jnp.zeros(3)}
    with pytest.raises(TypeError, match=r"unknown scatter argument\(s\) \['mod'\] in args"):
        jt.tree_scatter_set(item, item, jnp.array([0]), {"mod": "drop"})
    with pytest.raises(TypeError, match="args must be a dict"):
        jt.tree_scatter_set(item, item, jnp.array([0]), [("mode", "drop")])

    @jt.dataclass
    class BadNode:
        a: jax.Array

        @property
        def scatter_args(self):
            return {"bogus": 1}

    with pytest.raises(
        TypeError, match=r"unknown scatter argument\(s\) \['bogus'\] in BadNode.scatter_args"
    ):
        jt.tree_scatter_set(BadNode(jnp.zeros(2)), BadNode(jnp.ones(1)), jnp.array([0]), {})
    with pytest.raises(ValueError, match=r"tree_scatter_set: tree #1 .*first difference at <root>"):
        jt.tree_scatter_set(item, {"b": jnp.zeros(1)}, jnp.array([0]), {})
    with pytest.raises(
        ValueError,
        match=r"cannot set the leaf at \['a'\] \(shape \(3,\)\) at indices of shape \(1,\) to a value of shape \(2,\)",
    ):
        jt.tree_scatter_set(item, {"a": jnp.ones(2)}, jnp.array([0]), {})


def test_assert_same_structure():
    jt.assert_same_structure()
    jt.assert_same_structure({"a": 1})
    jt.assert_same_structure({"a": 1, "b": [2]}, {"a": 5, "b": [jnp.ones(2)]})
    with pytest.raises(
        ValueError,
        match=r"assert_same_structure: tree #2 .*first difference at \['b'\]: expected list node with children \[\[0\]\], got list node with children \[\[0\], \[1\]\]",
    ):
        jt.assert_same_structure({"a": 1, "b": [2]}, {"a": 1, "b": [2]}, {"a": 1, "b": [2, 3]})
    jt.assert_same_structure([(1, 2)], [3], is_leaf=lambda x: isinstance(x, (tuple, int)))


def test_stack_concat_and_where_align_tree_match_nodes_first():
    a = {"t": Tagged(jnp.zeros(2), ("a",)), "n": jnp.zeros(2)}
    b = {"t": Tagged(jnp.ones(2), ("b",)), "n": jnp.ones(2)}
    stacked = jt.tree_stack(a, b)
    assert stacked["t"].vocab == ("a", "b")
    np.testing.assert_array_equal(stacked["t"].rows, [[0, 0], [1, 1]])
    concat = jt.tree_concat(a, b)
    np.testing.assert_array_equal(concat["t"].rows, [0, 0, 1, 1])
    assert concat["t"].vocab == ("a", "b")
    picked = jt.tree_where_broadcast_last(jnp.array([True, False]), a, b)
    np.testing.assert_array_equal(picked["t"].rows, [0, 1])
    np.testing.assert_array_equal(picked["n"], [0, 1])
    # Alignment that re-indexes values (label vocabularies merged into rows).
    x = Labeled(jnp.array([1.0, 2.0]), ("a", "b"))
    y = Labeled(jnp.array([3.0]), ("c",))
    both = jt.tree_stack(x, y)
    assert both.labels == ("a", "b", "c")
    np.testing.assert_array_equal(both.values, [[1, 2, 0], [0, 0, 3]])
    # A structural difference outside aligned nodes is still reported by path.
    with pytest.raises(ValueError, match=r"tree_stack: tree #1 .*first difference at \['n'\]"):
        jt.tree_stack(a, {"t": b["t"], "n": (jnp.ones(2),)})

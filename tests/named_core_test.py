"""jaxcore.named core: axes, NamedArray, creation, name-based broadcasting, indexing.

Every named computation is checked against the positional ``jax.numpy``/NumPy one, in
eager mode and under ``jit``, ``grad`` and ``vmap``; every error path is checked to name
the offending axis.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxcore.named as hax
from jaxcore.named import Axis, NamedArray

B, E, H = hax.make_axes(batch=3, embed=4, head=2)


def _rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _assert_named(out, ref, axes, rtol=1e-6, atol=1e-6):
    assert isinstance(out, NamedArray), type(out)
    assert out.axes == tuple(axes), (out.axes, axes)
    np.testing.assert_allclose(np.asarray(out.array), np.asarray(ref), rtol=rtol, atol=atol)


def _check_all_modes(named_fn, pos_fn, *arrays, grad=True):
    """named_fn/pos_fn take positional arrays and return a positional array.

    Compares them eagerly, under jit, under vmap (over a new leading dim) and, for float
    outputs, the gradient of their sum.
    """
    ref = pos_fn(*arrays)
    np.testing.assert_allclose(named_fn(*arrays), ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(jax.jit(named_fn)(*arrays), ref, rtol=1e-5, atol=1e-6)
    stacked = [np.stack([a, a * 2 + 1]) for a in arrays]
    np.testing.assert_allclose(
        jax.jit(jax.vmap(named_fn))(*stacked), jax.vmap(pos_fn)(*stacked), rtol=1e-5, atol=1e-5
    )
    if grad:
        g_named = jax.jit(
            jax.grad(lambda *xs: jnp.sum(named_fn(*xs)), argnums=tuple(range(len(arrays))))
        )(*arrays)
        g_pos = jax.grad(lambda *xs: jnp.sum(pos_fn(*xs)), argnums=tuple(range(len(arrays))))(
            *arrays
        )
        for gn, gp in zip(g_named, g_pos):
            np.testing.assert_allclose(gn, gp, rtol=1e-5, atol=1e-6)


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
    x = _rand(3, 4)
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
    a = hax.named(_rand(3, 4), (B, E))
    leaves, treedef = jax.tree_util.tree_flatten(a)
    assert len(leaves) == 1 and leaves[0] is a.array
    b = jax.tree_util.tree_unflatten(treedef, [leaves[0] * 2])
    _assert_named(b, np.asarray(a.array) * 2, (B, E))
    c = jax.tree.map(lambda x: x + 1, {"w": a})
    _assert_named(c["w"], np.asarray(a.array) + 1, (B, E))
    paths = jax.tree_util.tree_flatten_with_path(a)[0]
    assert "array" in jax.tree_util.keystr(paths[0][0])
    out = jax.jit(lambda t: t)(a)
    _assert_named(out, a.array, (B, E))
    shape = jax.eval_shape(lambda t: t.sum("batch"), a)
    assert shape.axes == (E,) and shape.array.shape == (4,)
    assert jax.tree.map(lambda x: None, a).axes == (B, E)  # unflatten accepts any leaf
    import pickle

    _assert_named(pickle.loads(pickle.dumps(a)), a.array, (B, E))


# ----------------------------------------------------------------------------- binary ops


def test_binary_ops_match_axes_by_name_all_modes():
    x, y = _rand(3, 4), _rand(4, 3, seed=1)

    def named_fn(x, y):
        return (hax.named(x, ("batch", "embed")) * hax.named(y, ("embed", "batch")) + 1.0).array

    _check_all_modes(named_fn, lambda x, y: x * y.T + 1.0, x, y)


def test_binary_broadcasting_subset_takes_the_larger_layout():
    # As in Haliax: one operand's axes must contain the other's; the result is laid out
    # like the operand that has every axis (the smaller one moves).
    x, y = _rand(3, 4), _rand(4, seed=1)
    out = hax.named(y, (E,)) - hax.named(x, (B, E))
    _assert_named(out, y[None, :] - x, (B, E))
    z = _rand(2, 3, 4, seed=2)
    out2 = hax.named(x, (B, E)) * hax.named(z, (H, B, E))
    _assert_named(out2, x[None] * z, (H, B, E))
    out3 = hax.named(x.T, (E, B)) + hax.named(z, (H, B, E))
    _assert_named(out3, x[None] + z, (H, B, E))

    def named_fn(x, z):
        return (
            hax.named(x, ("batch", "embed")) / (hax.named(z, ("head", "batch", "embed")) ** 2 + 1)
        ).array

    _check_all_modes(named_fn, lambda x, z: x[None] / (z**2 + 1), x, z)


def test_binary_broadcasting_without_subset_raises_naming_both():
    x, y = _rand(3, 4), _rand(2, 4, seed=1)
    with pytest.raises(ValueError, match=r"\(batch=3, embed=4\) and \(head=2, embed=4\)"):
        hax.named(x, (B, E)) - hax.named(y, (H, E))


def test_scalar_operands_and_reflected_ops():
    x = _rand(3, 4)
    a = hax.named(x, (B, E))
    _assert_named(2.0 - a, 2.0 - x, (B, E))
    _assert_named(a**2, x**2, (B, E))
    _assert_named(2 ** hax.named(jnp.arange(3), (B,)), 2 ** np.arange(3), (B,))
    _assert_named(a * jnp.float32(3), x * 3, (B, E))
    _assert_named(-a, -x, (B, E))
    _assert_named(abs(a), np.abs(x), (B, E))
    _assert_named(a > 0, x > 0, (B, E))
    _assert_named(a == a, np.ones_like(x, bool), (B, E))
    _assert_named(a != 0.0, x != 0, (B, E))
    ints = hax.named(jnp.arange(12).reshape(3, 4), (B, E))
    _assert_named(~ints, ~np.arange(12).reshape(3, 4), (B, E))
    _assert_named(ints % 5, np.arange(12).reshape(3, 4) % 5, (B, E))
    _assert_named(7 // (ints + 1), 7 // (np.arange(12).reshape(3, 4) + 1), (B, E))
    _assert_named(ints << 1, np.arange(12).reshape(3, 4) << 1, (B, E))
    _assert_named(
        (ints & 6) | 1 ^ ints,
        (np.arange(12).reshape(3, 4) & 6) | 1 ^ np.arange(12).reshape(3, 4),
        (B, E),
    )
    q, r = divmod(ints, 5)
    _assert_named(q, np.arange(12).reshape(3, 4) // 5, (B, E))
    _assert_named(r, np.arange(12).reshape(3, 4) % 5, (B, E))


def test_numpy_and_jax_left_operands_defer_to_named_ops():
    x = _rand(3, 4)
    a = hax.named(x, (B, E))
    _assert_named(np.float32(2) * a, 2 * x, (B, E))
    _assert_named(jnp.float32(3) - a, 3 - x, (B, E))
    with pytest.raises(ValueError, match="positional array of shape \\(4,\\)"):
        np.ones(4, np.float32) * a
    with pytest.raises(ValueError, match="positional array of shape \\(3, 4\\)"):
        jnp.ones((3, 4)) + a


def test_binary_errors_name_axes():
    a = hax.zeros((B, E))
    with pytest.raises(ValueError, match="Axis 'embed' has mismatched sizes 4 and 5"):
        a + hax.zeros((Axis("embed", 5),))
    with pytest.raises(ValueError, match="positional array of shape \\(3, 4\\).*hax.named"):
        a + jnp.zeros((3, 4))
    with pytest.raises(ValueError, match="positional array of shape \\(4,\\)"):
        hax.multiply(jnp.ones(4), a)


def test_named_add_jaxpr_has_no_extra_ops():
    x, y = _rand(3, 4), _rand(3, 4, seed=1)
    named = jax.make_jaxpr(lambda x, y: (hax.named(x, (B, E)) + hax.named(y, (B, E))).array)(x, y)
    pos = jax.make_jaxpr(lambda x, y: x + y)(x, y)
    assert [e.primitive for e in named.eqns] == [e.primitive for e in pos.eqns]
    named_t = jax.make_jaxpr(lambda x, y: (hax.named(x, (B, E)) + hax.named(y, (E, B))).array)(
        x, y.T
    )
    pos_t = jax.make_jaxpr(lambda x, y: x + y.T)(x, y.T)
    assert [e.primitive for e in named_t.eqns] == [e.primitive for e in pos_t.eqns]


_PROP_AXES = hax.make_axes(p=2, q=3, r=1, s=4)


def _axes_subsets():
    return st.permutations(_PROP_AXES).flatmap(
        lambda perm: st.integers(0, 4).map(lambda k: tuple(perm[:k]))
    )


def _reference_broadcast(x, axes, out_axes):
    """NumPy reference: transpose ``x`` into ``out_axes`` order, with 1s for missing axes."""
    names = [a.name for a in axes]
    present = [a for a in out_axes if a.name in names]
    x = np.transpose(x, [names.index(a.name) for a in present]) if names else x
    return np.reshape(x, [a.size if a.name in names else 1 for a in out_axes])


@settings(max_examples=30, deadline=None, database=None)
@given(_axes_subsets(), _axes_subsets())
def test_property_binary_alignment_matches_numpy(axes1, axes2):
    x = (
        np.random.default_rng(len(axes1))
        .standard_normal([a.size for a in axes1])
        .astype(np.float32)
    )
    y = (
        np.random.default_rng(len(axes2) + 7)
        .standard_normal([a.size for a in axes2])
        .astype(np.float32)
    )
    s1, s2 = set(axes1), set(axes2)
    if not (s1 <= s2 or s2 <= s1):  # Haliax's rule: the axes must nest
        with pytest.raises(ValueError, match="neither's axes contain the other's"):
            hax.named(x, axes1) * 2 - hax.named(y, axes2)
        return
    out = hax.named(x, axes1) * 2 - hax.named(y, axes2)
    result = axes1 if s2 <= s1 else axes2
    ref = _reference_broadcast(x, axes1, result) * 2 - _reference_broadcast(y, axes2, result)
    _assert_named(out, ref, result)


_INDEX_CHOICES = st.one_of(
    st.none(),
    st.integers(-4, 3),
    st.tuples(
        st.integers(-5, 5) | st.none(),
        st.integers(-5, 5) | st.none(),
        st.sampled_from([None, 1, 2, -1]),
    ),
)


@settings(max_examples=30, deadline=None, database=None)
@given(st.tuples(*[_INDEX_CHOICES] * 4))
def test_property_basic_indexing_matches_numpy(choices):
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 1, 4)
    a = hax.named(x, _PROP_AXES)
    named_idx, pos_idx, out_axes = {}, [], []
    for ax, c in zip(_PROP_AXES, choices):
        if c is None:
            pos_idx.append(slice(None))
            out_axes.append(ax)
        elif isinstance(c, int):
            c = c % ax.size
            named_idx[ax.name] = c
            pos_idx.append(c)
        else:
            sl = slice(*c)
            named_idx[ax.name] = sl
            pos_idx.append(sl)
            out_axes.append(Axis(ax.name, len(range(*sl.indices(ax.size)))))
    ref = x[tuple(pos_idx)]
    out = a[named_idx]
    if out_axes:
        _assert_named(out, ref, out_axes)
        # a scatter-add through .at on the same region matches NumPy's in-place add
        upd = x.copy()
        upd[tuple(pos_idx)] += 1
        _assert_named(a.at[named_idx].add(1.0), upd, _PROP_AXES)
    else:
        np.testing.assert_array_equal(out, ref)


_GATHER_AXES = hax.make_axes(p=2, q=3, s=4)
_K = Axis("k", 2)


@st.composite
def _gather_indices(draw):
    """A named index mixing ints, slices and integer NamedArrays over axes (k) or (k, p)."""
    out = {}
    for ax in _GATHER_AXES:
        kind = draw(st.sampled_from(["none", "int", "slice", "array", "array"]))
        if kind == "int":
            out[ax.name] = draw(st.integers(0, ax.size - 1))
        elif kind == "slice":
            out[ax.name] = slice(draw(st.integers(0, ax.size - 1)), None)
        elif kind == "array":
            idx_axes = draw(st.sampled_from([(_K,), (_K, _GATHER_AXES[0])]))
            if ax.name == "p" and len(idx_axes) == 2:
                idx_axes = (_K,)
            values = draw(st.lists(st.integers(0, ax.size - 1), min_size=4, max_size=4))
            arr = np.array(values[: int(np.prod([a.size for a in idx_axes]))]).reshape(
                [a.size for a in idx_axes]
            )
            out[ax.name] = hax.named(arr, idx_axes)
    return out


@settings(max_examples=25, deadline=None, database=None)
@given(_gather_indices())
def test_property_gather_indexing_matches_brute_force(idx):
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    a = hax.named(x, _GATHER_AXES)
    p_in_index_array = any(isinstance(v, NamedArray) and v.has_axis("p") for v in idx.values())
    if isinstance(idx.get("p"), slice) and p_in_index_array:
        with pytest.raises(ValueError, match="'p' is sliced and also appears in an index array"):
            a[idx]
        return
    out = a[idx]
    if not isinstance(out, NamedArray):
        out = hax.named(out, ())
    sizes = out.shape
    for coord in np.ndindex(*sizes.values()):
        at = dict(zip(sizes, coord))
        src = []
        for ax in _GATHER_AXES:
            v = idx.get(ax.name)
            if v is None:
                src.append(at[ax.name])
            elif isinstance(v, int):
                src.append(v)
            elif isinstance(v, slice):
                src.append(range(*v.indices(ax.size))[at[ax.name]])
            else:
                src.append(int(np.asarray(v.array)[tuple(at[n] for n in v._names)]))
        assert float(np.asarray(out.array)[coord]) == x[tuple(src)], (idx, at)


# ----------------------------------------------------------------------------- broadcasting


def test_broadcast_to_and_axis():
    x = _rand(4)
    a = hax.named(x, (E,))
    _assert_named(hax.broadcast_to(a, (B, E)), np.broadcast_to(x, (3, 4)), (B, E))
    _assert_named(hax.broadcast_to(a, (E, B)), np.broadcast_to(x[:, None], (4, 3)), (E, B))
    _assert_named(a.broadcast_axis(B), np.broadcast_to(x, (3, 4)), (B, E))
    y = _rand(3, 4)
    b = hax.named(y, (B, E))
    _assert_named(hax.broadcast_axis(b, H), np.broadcast_to(y, (2, 3, 4)), (H, B, E))
    _assert_named(hax.broadcast_to(b, (E,), enforce_no_extra_axes=False), y.T, (E, B))
    _assert_named(
        hax.broadcast_to(b, (H, E), ensure_order=False, enforce_no_extra_axes=False),
        np.broadcast_to(y, (2, 3, 4)),
        (H, B, E),
    )
    _assert_named(hax.broadcast_to(2.0, (B,)), np.full(3, 2.0), (B,))
    _assert_named(hax.broadcast_to(b, ("embed", "batch")), y.T, (E, B))  # names take sizes from b
    with pytest.raises(ValueError, match="axes \\['batch'\\] that are not in the target"):
        hax.broadcast_to(b, (E,))
    with pytest.raises(ValueError, match="Cannot broadcast axis 'embed' of size 4 to size 5"):
        hax.broadcast_to(b, (B, Axis("embed", 5)))
    with pytest.raises(ValueError, match="'head' is given by name only"):
        hax.broadcast_to(b, (B, E, "head"))
    with pytest.raises(ValueError, match="positional array of shape \\(3,\\)"):
        hax.broadcast_to(jnp.ones(3), (B,))


def test_broadcast_arrays():
    a, b = hax.named(_rand(3), (B,)), hax.named(_rand(4, 3, seed=1), (E, B))
    a2, b2, s = hax.broadcast_arrays(a, b, 1.0)
    assert a2.axes == (E, B) and b2.axes == (E, B) and s == 1.0
    np.testing.assert_allclose(a2.array, np.broadcast_to(np.asarray(a.array)[None, :], (4, 3)))
    c = hax.named(_rand(4, seed=2), (E,))
    with pytest.raises(ValueError, match=r"\(embed=4\) and \(batch=3\)"):  # larger first
        hax.broadcast_arrays(a, c)
    # require_subset=False: the smaller operand's extra axes go in front
    a3, c3 = hax.broadcast_arrays(a, c, require_subset=False)
    assert a3.axes == (B, E) and c3.axes == (B, E)
    np.testing.assert_allclose(c3.array, np.broadcast_to(np.asarray(c.array)[None, :], (3, 4)))


# ----------------------------------------------------------------------------- creation


def test_creation_functions():
    _assert_named(hax.zeros((B, E)), np.zeros((3, 4)), (B, E))
    _assert_named(hax.ones({"batch": 3, "embed": 4}, dtype=jnp.int32), np.ones((3, 4)), (B, E))
    assert hax.ones(B, dtype=jnp.int32).dtype == jnp.int32
    _assert_named(hax.full((B,), 7.5), np.full(3, 7.5), (B,))
    a = hax.named(_rand(3, 4), (B, E))
    _assert_named(hax.zeros_like(a), np.zeros((3, 4)), (B, E))
    _assert_named(hax.ones_like(a, dtype=jnp.int8), np.ones((3, 4)), (B, E))
    assert hax.ones_like(a, dtype=jnp.int8).dtype == jnp.int8
    _assert_named(hax.full_like(a, 2.0), np.full((3, 4), 2.0), (B, E))
    with pytest.raises(TypeError, match="'batch' is given by name only"):
        hax.zeros(("batch",))
    with pytest.raises(TypeError, match="zeros_like needs a NamedArray"):
        hax.zeros_like(jnp.zeros(3))
    with pytest.raises(ValueError, match="scalar fill_value"):
        hax.full((B,), hax.ones((B,)))


def test_arange_and_spaces():
    X, Y = hax.make_axes(X=3, Y=4)
    _assert_named(hax.arange(X), np.arange(3), (X,))
    _assert_named(hax.arange((X, Y)), np.arange(12).reshape(3, 4), (X, Y))
    _assert_named(hax.arange(Y, start=2, step=3), np.arange(2, 14, 3), (Y,))
    assert hax.arange(Y, dtype=jnp.float32).dtype == jnp.float32
    traced = jax.jit(lambda s: hax.arange(Y, start=s, step=2).array)(jnp.int32(5))
    np.testing.assert_array_equal(traced, np.arange(5, 13, 2))
    _assert_named(hax.linspace(Y, start=0.0, stop=1.0), np.linspace(0, 1, 4), (Y,))
    _assert_named(
        hax.linspace(Y, start=0.0, stop=1.0, endpoint=False),
        np.linspace(0, 1, 4, endpoint=False),
        (Y,),
    )
    assert hax.linspace("t", start=0.0, stop=1.0).axes == (Axis("t", 50),)
    _assert_named(
        hax.logspace(Y, start=0.0, stop=2.0, base=2.0),
        np.logspace(0, 2, 4, base=2.0),
        (Y,),
        rtol=1e-5,
    )
    _assert_named(
        hax.geomspace(Y, start=1.0, stop=1000.0), np.geomspace(1, 1000, 4), (Y,), rtol=1e-5
    )
    with pytest.raises(TypeError, match="Expected an Axis or an axis name"):
        hax.linspace(3, start=0.0, stop=1.0)


# ----------------------------------------------------------------------------- indexing


def test_index_ints_and_slices():
    x = _rand(3, 4, 2)
    a = hax.named(x, (B, E, H))
    _assert_named(a["batch", 1], x[1], (E, H))
    _assert_named(a[{"batch": -1}], x[-1], (E, H))
    _assert_named(a["embed", 1:3], x[:, 1:3], (B, Axis("embed", 2), H))
    _assert_named(a["embed", ::2, "batch", 0], x[0, ::2], (Axis("embed", 2), H))
    _assert_named(a[{E: 2, "head": slice(None, None, -1)}], x[:, 2, ::-1], (B, H))
    s = a["batch", 1, "embed", 2, "head", 0]
    assert isinstance(s, hax.NamedArray) and s.axes == ()
    np.testing.assert_allclose(s.scalar(), x[1, 2, 0])
    i = jnp.int32(2)
    _assert_named(a["embed", i], x[:, 2], (B, H))

    def named_fn(x, i):
        return hax.named(x, (B, E, H))["embed", i, "batch", 1:].array

    np.testing.assert_allclose(jax.jit(named_fn)(x, 3), x[1:, 3])
    g = jax.grad(lambda x: jnp.sum(named_fn(x, 1) ** 2))(x)
    ref = np.zeros_like(x)
    ref[1:, 1] = 2 * x[1:, 1]
    np.testing.assert_allclose(g, ref, rtol=1e-6)


def test_index_dslice_fills_past_end():
    x = _rand(3, 6)
    a = hax.named(x, ("batch", "seq"))
    out = a["seq", hax.ds(4, 3)]
    ref = np.concatenate([x[:, 4:], np.zeros((3, 1), np.float32)], axis=1)
    _assert_named(out, ref, (B, Axis("seq", 3)))
    f = jax.jit(lambda x, s: hax.named(x, ("batch", "seq"))["seq", hax.ds(s, 2)].array)
    np.testing.assert_allclose(f(x, 1), x[:, 1:3])
    np.testing.assert_allclose(f(x, 5), np.concatenate([x[:, 5:], np.zeros((3, 1), np.float32)], 1))
    # a window starting before the axis fills the missing front too (no wrap-around)
    np.testing.assert_allclose(
        f(x, -1), np.concatenate([np.zeros((3, 1), np.float32), x[:, :1]], 1)
    )
    _assert_named(
        a["seq", hax.ds(-2, 3)],
        np.concatenate([np.zeros((3, 2), np.float32), x[:, :1]], 1),
        (B, Axis("seq", 3)),
    )
    Win = Axis("window", 2)
    _assert_named(a["seq", hax.dslice(2, Win)], x[:, 2:4], (B, Win))
    _assert_named(a["seq", hax.dblock(1, 2)], x[:, 2:4], (B, Axis("seq", 2)))
    assert hax.dslice(3, 4).to_slice() == slice(3, 7)
    assert hax.dslice.block(2, 4).start == 8
    # dslice passes through jit as a pytree (dynamic start, static size)
    d = jax.jit(lambda d: d)(hax.ds(jnp.int32(2), 3))
    assert d.size == 3 and int(d.start) == 2
    with pytest.raises(TypeError, match="static start"):
        jax.jit(lambda s: hax.ds(s, 2).to_slice())(1)
    with pytest.raises(TypeError, match="dslice length must be a static int"):
        hax.ds(0, 2.5)
    with pytest.raises(ValueError, match="non-negative"):
        hax.ds(0, -1)


def test_index_gather_with_named_arrays():
    x = _rand(3, 6)
    a = hax.named(x, ("batch", "seq"))
    K = Axis("k", 2)
    idx = hax.named(jnp.array([5, 0]), (K,))
    _assert_named(a["seq", idx], x[:, [5, 0]], (B, K))
    # index shares "batch" with the array: elementwise (batched) gather
    bidx = hax.named(jnp.array([[0, 1], [2, 3], [4, 5]]), (B, K))
    _assert_named(
        a["seq", bidx], np.take_along_axis(x, np.array([[0, 1], [2, 3], [4, 5]]), 1), (B, K)
    )
    # two index arrays broadcast by name, plus an int elsewhere
    y = _rand(3, 6, 2)
    c = hax.named(y, ("batch", "seq", "head"))
    bi = hax.named(jnp.array([2, 0]), (K,))
    si = hax.named(jnp.array([1, 4]), (K,))
    _assert_named(c[{"batch": bi, "seq": si, "head": 1}], y[[2, 0], [1, 4], 1], (K,))
    _assert_named(c[{"seq": si, "head": 0}], y[:, [1, 4], 0], (B, K))
    _assert_named(c.take("seq", si), np.take(y, [1, 4], axis=1).transpose(0, 1, 2), (B, K, H))
    _assert_named(c.take("head", 1), y[:, :, 1], (B, Axis("seq", 6)))
    _assert_named(hax.take(hax.named(y[0, 0], (H,)), "head", index=1), y[0, 0, 1], ())

    def named_fn(y, i):
        return hax.named(y, ("batch", "seq", "head"))["seq", hax.named(i, ("k",))].array

    i = np.array([3, 3], np.int32)
    np.testing.assert_allclose(jax.jit(named_fn)(y, i), y[:, [3, 3], :])
    np.testing.assert_allclose(
        jax.vmap(named_fn, (0, None))(np.stack([y, y + 1]), i), np.stack([y, y + 1])[:, :, [3, 3]]
    )
    g = jax.grad(lambda y: jnp.sum(named_fn(y, i)))(y)
    ref = np.zeros_like(y)
    ref[:, 3, :] = 2
    np.testing.assert_allclose(g, ref)


@pytest.mark.parametrize(
    "idx, exc, msg",
    [
        (
            {"nope": 0},
            ValueError,
            "Axis 'nope' not found in array with axes \\(batch=3, embed=4\\)",
        ),
        ({"batch": 3}, IndexError, "Index 3 is out of bounds for axis 'batch' of size 3"),
        ({"embed": jnp.zeros((2, 2), jnp.int32)}, ValueError, "Only 0-d or 1-d un-named arrays"),
        ({"embed": 1.5}, TypeError, "Unsupported index for axis 'embed'"),
        (
            {"embed": hax.named(jnp.array([True]), "k")},
            TypeError,
            "axis 'embed' must be an integer NamedArray",
        ),
        ({Axis("embed", 9): 0}, ValueError, "'embed' has size 4 in the array but 9"),
        (("batch", 0, "embed"), TypeError, "alternating axis/index pairs"),
        (("batch", 0, "batch", 1), ValueError, "'batch' is indexed twice"),
        ((0, 1), TypeError, "Expected an axis name or Axis at position 0"),
        (0, TypeError, "NamedArray indices are dicts"),
    ],
)
def test_index_errors(idx, exc, msg):
    a = hax.zeros((B, E))
    with pytest.raises(exc, match=msg):
        a[idx]


def test_index_needs_named_array():
    with pytest.raises(TypeError, match=r"index\(\) needs a NamedArray, got ndarray"):
        hax.index(np.zeros(3), {"batch": 0})


def test_index_error_traced_slice_and_sliced_shared_axis():
    a = hax.zeros((B, E))
    with pytest.raises(TypeError, match="Slice bounds for axis 'embed' must be static.*hax.ds"):
        jax.jit(lambda s: a["embed", s:].array)(1)
    idx = hax.named(jnp.zeros((2, 2), jnp.int32), (Axis("embed", 2), Axis("k", 2)))
    with pytest.raises(ValueError, match="'embed' is sliced and also appears in an index array"):
        hax.zeros((B, E, H))[{"embed": slice(0, 2), "head": idx}]
    with pytest.raises(ValueError, match="array's axis 'batch' has size 3"):
        a["embed", hax.named(jnp.zeros((5,), jnp.int32), "batch")]


def test_at_updates():
    x = _rand(3, 4)
    a = hax.named(x, (B, E))
    _assert_named(a.at["batch", 1].set(0.0), np.where(np.arange(3)[:, None] == 1, 0, x), (B, E))
    row = _rand(4, seed=3)
    ref = x.copy()
    ref[1] += row
    _assert_named(a.at["batch", 1].add(hax.named(row, (E,))), ref, (B, E))
    col = _rand(3, seed=4)
    ref = x.copy()
    ref[:, 2] *= col
    _assert_named(a.at[{"embed": 2}].multiply(hax.named(col, (B,))), ref, (B, E))
    ref = x.copy()
    ref[:, 1:3] /= 2
    _assert_named(a.at["embed", 1:3].divide(2.0), ref, (B, E))
    ref = x.copy()
    ref[0] = ref[0] ** 2
    _assert_named(a.at["batch", 0].power(2), ref, (B, E), rtol=1e-5)
    _assert_named(
        a.at["batch", 0].min(0.0), np.where(np.arange(3)[:, None] == 0, np.minimum(x, 0), x), (B, E)
    )
    _assert_named(
        a.at["batch", 2].max(0.0), np.where(np.arange(3)[:, None] == 2, np.maximum(x, 0), x), (B, E)
    )
    _assert_named(
        a.at["batch", 2].apply(jnp.negative), np.where(np.arange(3)[:, None] == 2, -x, x), (B, E)
    )
    _assert_named(a.at["batch", 1].get(), x[1], (E,))
    # region axes matched by name: a (embed, batch) update into a (batch, embed) region
    upd = _rand(2, 3, seed=5)
    ref = x.copy()
    ref[:, 1:3] = upd.T
    _assert_named(a.at["embed", 1:3].set(hax.named(upd, (Axis("embed", 2), B))), ref, (B, E))
    # gather-style index: scatter-add with duplicates accumulates
    K = Axis("k", 3)
    idx = hax.named(jnp.array([0, 0, 3]), (K,))
    ref = x.copy()
    np.add.at(ref, (slice(None), [0, 0, 3]), 1.0)
    _assert_named(a.at["embed", idx].add(1.0), ref, (B, E))
    # dslice write past the end is dropped
    ref = x.copy()
    ref[:, 3] = 9.0
    _assert_named(a.at["embed", hax.ds(3, 2)].set(9.0), ref, (B, E))
    # and so is a write before the start of the axis (not wrapped to the end)
    ref = x.copy()
    ref[:, 0] = 9.0
    _assert_named(a.at["embed", hax.ds(-1, 2)].set(9.0), ref, (B, E))
    _assert_named(jax.jit(lambda s: a.at["embed", hax.ds(s, 2)].set(9.0))(-1), ref, (B, E))
    with pytest.raises(ValueError, match="positional array of shape \\(4,\\).*axes \\(embed=4\\)"):
        a.at["batch", 0].set(jnp.zeros(4))
    with pytest.raises(ValueError, match="axes \\['head'\\] that are not in the target"):
        a.at["batch", 0].set(hax.zeros((E, H)))


def test_at_under_jit_grad_vmap():
    x, v = _rand(3, 4), _rand(3, seed=1)

    def named_fn(x, v):
        a = hax.named(x, ("batch", "embed"))
        return a.at["embed", 2].add(hax.named(v, ("batch",)) * 2).array

    _check_all_modes(named_fn, lambda x, v: jnp.asarray(x).at[:, 2].add(v * 2), x, v)


def test_slice_forms():
    x = _rand(3, 6)
    a = hax.named(x, ("batch", "seq"))
    _assert_named(hax.slice(a, "seq", start=2, length=3), x[:, 2:5], (B, Axis("seq", 3)))
    _assert_named(a.slice("seq", "win", start=1, length=2), x[:, 1:3], (B, Axis("win", 2)))
    _assert_named(a.slice("seq", start=4), x[:, 4:], (B, Axis("seq", 2)))
    W = Axis("w", 4)
    _assert_named(hax.slice(a, "seq", W, start=1), x[:, 1:5], (B, W))
    _assert_named(
        hax.slice(a, {"batch": 1, "seq": 2}, {"batch": 2, "seq": W}),
        x[1:3, 2:6],
        (Axis("batch", 2), W),
    )
    f = jax.jit(
        lambda x, s: hax.slice(hax.named(x, ("batch", "seq")), "seq", start=s, length=2).array
    )
    np.testing.assert_allclose(f(x, 3), x[:, 3:5])
    np.testing.assert_allclose(f(x, 100), x[:, 4:6])  # traced starts are clamped
    g = jax.grad(lambda x: jnp.sum(f(x, 1)))(x)
    np.testing.assert_allclose(g, np.pad(np.ones((3, 2)), ((0, 0), (1, 3))))
    with pytest.raises(
        ValueError, match="axis 'seq' \\(size 6\\) from 5 with length 3 is out of bounds"
    ):
        hax.slice(a, "seq", start=5, length=3)
    with pytest.raises(ValueError, match="axis 'seq': a traced start needs an explicit length"):
        jax.jit(lambda s: hax.slice(a, "seq", start=s).array)(1)
    with pytest.raises(ValueError, match="new_axis .* disagrees with length 2"):
        hax.slice(a, "seq", W, length=2)
    with pytest.raises(ValueError, match="lengths given for axes \\['batch'\\] that have no start"):
        hax.slice(a, {"seq": 0}, {"seq": 2, "batch": 1})
    with pytest.raises(ValueError, match="Axis 'nope' not found"):
        hax.slice(a, "nope", start=0, length=1)
    with pytest.raises(TypeError, match="Start for axis 'seq' must be an integer scalar"):
        hax.slice(a, "seq", start=1.5, length=1)
    with pytest.raises(ValueError, match="Start for axis 'seq' must be a scalar"):
        hax.slice(a, "seq", start=hax.zeros((B,), dtype=jnp.int32), length=1)


def test_updated_slice():
    x = _rand(3, 6)
    a = hax.named(x, ("batch", "seq"))
    upd = _rand(2, 3, seed=1)  # (seq=2, batch=3): axes matched by name
    out = hax.updated_slice(a, {"seq": 3}, hax.named(upd, (Axis("seq", 2), B)))
    ref = x.copy()
    ref[:, 3:5] = upd.T
    _assert_named(out, ref, (B, Axis("seq", 6)))
    row = _rand(3, seed=2)
    out = a.updated_slice({"seq": 1}, hax.named(row, (B,)))  # missing started axis: width 1
    ref = x.copy()
    ref[:, 1] = row
    _assert_named(out, ref, (B, Axis("seq", 6)))
    out = hax.updated_slice(a, {"seq": hax.named(jnp.int32(0), ())}, 5.0)
    ref = x.copy()
    ref[:, 0] = 5
    _assert_named(out, ref, (B, Axis("seq", 6)))

    def named_fn(x, u, s):
        return hax.updated_slice(
            hax.named(x, ("batch", "seq")),
            {"seq": s},
            hax.named(u, ("batch", "s2")).rename({"s2": "seq"}),
        ).array

    u = _rand(3, 2, seed=3)
    np.testing.assert_allclose(
        jax.jit(named_fn)(x, u, 2), jax.lax.dynamic_update_slice(x, u, (0, 2))
    )
    gx, gu = jax.grad(lambda x, u: jnp.sum(named_fn(x, u, 2) * 3), argnums=(0, 1))(x, u)
    ref = np.full_like(x, 3.0)
    ref[:, 2:4] = 0
    np.testing.assert_allclose(gx, ref)
    np.testing.assert_allclose(gu, np.full_like(u, 3.0))
    with pytest.raises(
        ValueError,
        match=r"Update has axes \['head'\] that are not in the original array with shape",
    ):
        hax.updated_slice(a, {"seq": 0}, hax.zeros((B, H)))
    with pytest.raises(ValueError, match="Update axis 'seq' has size 7 > array size 6"):
        hax.updated_slice(a, {"seq": 0}, hax.zeros((B, Axis("seq", 7))))
    with pytest.raises(
        ValueError, match="window \\[5, 7\\) is out of bounds for axis 'seq' of size 6"
    ):
        hax.updated_slice(a, {"seq": 5}, hax.zeros((B, Axis("seq", 2))))
    with pytest.raises(ValueError, match="needs a NamedArray update"):
        hax.updated_slice(a, {"seq": 0}, jnp.zeros((3, 2)))


def test_creation_broadcast_and_slices_under_jit_vmap_grad():
    x = _rand(3, 4)

    def named_fn(x):
        a = hax.named(x, ("batch", "embed"))
        row = hax.slice(a, "batch", start=1, length=1).rename({"batch": "one"})
        grown = hax.broadcast_to(hax.sum(row, "one"), (H, E)) * hax.full_like(a["batch", 0], 2.0)
        base = hax.zeros_like(a) + hax.ones((B, E)) + hax.arange(E, dtype=jnp.float32)
        return hax.updated_slice(
            base * a, {"batch": 1}, grown["head", 0:1].rename({"head": "batch"})
        ).array

    def pos_fn(x):
        grown = jnp.broadcast_to(x[1], (2, 4)) * 2.0
        base = (jnp.zeros_like(x) + 1 + jnp.arange(4, dtype=jnp.float32)) * x
        return base.at[1:2].set(grown[0:1])

    _check_all_modes(named_fn, pos_fn, x)

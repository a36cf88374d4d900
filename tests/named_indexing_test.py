"""jaxcore.named core: indexing by name, gathers, .at updates, slice and updated_slice.

Every named computation is checked against the positional ``jax.numpy``/NumPy one, in
eager mode and under ``jit``, ``grad`` and ``vmap``; every error path is checked to name
the offending axis.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _named_test_util import PROP_AXES, B, E, H, assert_named, check_all_modes, rand
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxcore.named as hax
from jaxcore.named import Axis, NamedArray

# ----------------------------------------------------------------------------- properties

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
    a = hax.named(x, PROP_AXES)
    named_idx, pos_idx, out_axes = {}, [], []
    for ax, c in zip(PROP_AXES, choices):
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
        assert_named(out, ref, out_axes)
        # a scatter-add through .at on the same region matches NumPy's in-place add
        upd = x.copy()
        upd[tuple(pos_idx)] += 1
        assert_named(a.at[named_idx].add(1.0), upd, PROP_AXES)
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


# ----------------------------------------------------------------------------- indexing


def test_index_ints_and_slices():
    x = rand(3, 4, 2)
    a = hax.named(x, (B, E, H))
    assert_named(a["batch", 1], x[1], (E, H))
    assert_named(a[{"batch": -1}], x[-1], (E, H))
    assert_named(a["embed", 1:3], x[:, 1:3], (B, Axis("embed", 2), H))
    assert_named(a["embed", ::2, "batch", 0], x[0, ::2], (Axis("embed", 2), H))
    assert_named(a[{E: 2, "head": slice(None, None, -1)}], x[:, 2, ::-1], (B, H))
    s = a["batch", 1, "embed", 2, "head", 0]
    assert isinstance(s, hax.NamedArray) and s.axes == ()
    np.testing.assert_allclose(s.scalar(), x[1, 2, 0])
    i = jnp.int32(2)
    assert_named(a["embed", i], x[:, 2], (B, H))

    def named_fn(x, i):
        return hax.named(x, (B, E, H))["embed", i, "batch", 1:].array

    np.testing.assert_allclose(jax.jit(named_fn)(x, 3), x[1:, 3])
    g = jax.grad(lambda x: jnp.sum(named_fn(x, 1) ** 2))(x)
    ref = np.zeros_like(x)
    ref[1:, 1] = 2 * x[1:, 1]
    np.testing.assert_allclose(g, ref, rtol=1e-6)


def test_index_dslice_fills_past_end():
    x = rand(3, 6)
    a = hax.named(x, ("batch", "seq"))
    out = a["seq", hax.ds(4, 3)]
    ref = np.concatenate([x[:, 4:], np.zeros((3, 1), np.float32)], axis=1)
    assert_named(out, ref, (B, Axis("seq", 3)))
    f = jax.jit(lambda x, s: hax.named(x, ("batch", "seq"))["seq", hax.ds(s, 2)].array)
    np.testing.assert_allclose(f(x, 1), x[:, 1:3])
    np.testing.assert_allclose(f(x, 5), np.concatenate([x[:, 5:], np.zeros((3, 1), np.float32)], 1))
    # a window starting before the axis fills the missing front too (no wrap-around)
    np.testing.assert_allclose(
        f(x, -1), np.concatenate([np.zeros((3, 1), np.float32), x[:, :1]], 1)
    )
    assert_named(
        a["seq", hax.ds(-2, 3)],
        np.concatenate([np.zeros((3, 2), np.float32), x[:, :1]], 1),
        (B, Axis("seq", 3)),
    )
    Win = Axis("window", 2)
    assert_named(a["seq", hax.dslice(2, Win)], x[:, 2:4], (B, Win))
    assert_named(a["seq", hax.dblock(1, 2)], x[:, 2:4], (B, Axis("seq", 2)))
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
    x = rand(3, 6)
    a = hax.named(x, ("batch", "seq"))
    K = Axis("k", 2)
    idx = hax.named(jnp.array([5, 0]), (K,))
    assert_named(a["seq", idx], x[:, [5, 0]], (B, K))
    # index shares "batch" with the array: elementwise (batched) gather
    bidx = hax.named(jnp.array([[0, 1], [2, 3], [4, 5]]), (B, K))
    assert_named(
        a["seq", bidx], np.take_along_axis(x, np.array([[0, 1], [2, 3], [4, 5]]), 1), (B, K)
    )
    # two index arrays broadcast by name, plus an int elsewhere
    y = rand(3, 6, 2)
    c = hax.named(y, ("batch", "seq", "head"))
    bi = hax.named(jnp.array([2, 0]), (K,))
    si = hax.named(jnp.array([1, 4]), (K,))
    assert_named(c[{"batch": bi, "seq": si, "head": 1}], y[[2, 0], [1, 4], 1], (K,))
    assert_named(c[{"seq": si, "head": 0}], y[:, [1, 4], 0], (B, K))
    assert_named(c.take("seq", si), np.take(y, [1, 4], axis=1).transpose(0, 1, 2), (B, K, H))
    assert_named(c.take("head", 1), y[:, :, 1], (B, Axis("seq", 6)))
    assert_named(hax.take(hax.named(y[0, 0], (H,)), "head", index=1), y[0, 0, 1], ())

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
    x = rand(3, 4)
    a = hax.named(x, (B, E))
    assert_named(a.at["batch", 1].set(0.0), np.where(np.arange(3)[:, None] == 1, 0, x), (B, E))
    row = rand(4, seed=3)
    ref = x.copy()
    ref[1] += row
    assert_named(a.at["batch", 1].add(hax.named(row, (E,))), ref, (B, E))
    col = rand(3, seed=4)
    ref = x.copy()
    ref[:, 2] *= col
    assert_named(a.at[{"embed": 2}].multiply(hax.named(col, (B,))), ref, (B, E))
    ref = x.copy()
    ref[:, 1:3] /= 2
    assert_named(a.at["embed", 1:3].divide(2.0), ref, (B, E))
    ref = x.copy()
    ref[0] = ref[0] ** 2
    assert_named(a.at["batch", 0].power(2), ref, (B, E), rtol=1e-5)
    assert_named(
        a.at["batch", 0].min(0.0), np.where(np.arange(3)[:, None] == 0, np.minimum(x, 0), x), (B, E)
    )
    assert_named(
        a.at["batch", 2].max(0.0), np.where(np.arange(3)[:, None] == 2, np.maximum(x, 0), x), (B, E)
    )
    assert_named(
        a.at["batch", 2].apply(jnp.negative), np.where(np.arange(3)[:, None] == 2, -x, x), (B, E)
    )
    assert_named(a.at["batch", 1].get(), x[1], (E,))
    # region axes matched by name: a (embed, batch) update into a (batch, embed) region
    upd = rand(2, 3, seed=5)
    ref = x.copy()
    ref[:, 1:3] = upd.T
    assert_named(a.at["embed", 1:3].set(hax.named(upd, (Axis("embed", 2), B))), ref, (B, E))
    # gather-style index: scatter-add with duplicates accumulates
    K = Axis("k", 3)
    idx = hax.named(jnp.array([0, 0, 3]), (K,))
    ref = x.copy()
    np.add.at(ref, (slice(None), [0, 0, 3]), 1.0)
    assert_named(a.at["embed", idx].add(1.0), ref, (B, E))
    # dslice write past the end is dropped
    ref = x.copy()
    ref[:, 3] = 9.0
    assert_named(a.at["embed", hax.ds(3, 2)].set(9.0), ref, (B, E))
    # and so is a write before the start of the axis (not wrapped to the end)
    ref = x.copy()
    ref[:, 0] = 9.0
    assert_named(a.at["embed", hax.ds(-1, 2)].set(9.0), ref, (B, E))
    assert_named(jax.jit(lambda s: a.at["embed", hax.ds(s, 2)].set(9.0))(-1), ref, (B, E))
    with pytest.raises(ValueError, match="positional array of shape \\(4,\\).*axes \\(embed=4\\)"):
        a.at["batch", 0].set(jnp.zeros(4))
    with pytest.raises(ValueError, match="axes \\['head'\\] that are not in the target"):
        a.at["batch", 0].set(hax.zeros((E, H)))


def test_at_under_jit_grad_vmap():
    x, v = rand(3, 4), rand(3, seed=1)

    def named_fn(x, v):
        a = hax.named(x, ("batch", "embed"))
        return a.at["embed", 2].add(hax.named(v, ("batch",)) * 2).array

    check_all_modes(named_fn, lambda x, v: jnp.asarray(x).at[:, 2].add(v * 2), x, v)


def test_slice_forms():
    x = rand(3, 6)
    a = hax.named(x, ("batch", "seq"))
    assert_named(hax.slice(a, "seq", start=2, length=3), x[:, 2:5], (B, Axis("seq", 3)))
    assert_named(a.slice("seq", "win", start=1, length=2), x[:, 1:3], (B, Axis("win", 2)))
    assert_named(a.slice("seq", start=4), x[:, 4:], (B, Axis("seq", 2)))
    W = Axis("w", 4)
    assert_named(hax.slice(a, "seq", W, start=1), x[:, 1:5], (B, W))
    assert_named(
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
    x = rand(3, 6)
    a = hax.named(x, ("batch", "seq"))
    upd = rand(2, 3, seed=1)  # (seq=2, batch=3): axes matched by name
    out = hax.updated_slice(a, {"seq": 3}, hax.named(upd, (Axis("seq", 2), B)))
    ref = x.copy()
    ref[:, 3:5] = upd.T
    assert_named(out, ref, (B, Axis("seq", 6)))
    row = rand(3, seed=2)
    out = a.updated_slice({"seq": 1}, hax.named(row, (B,)))  # missing started axis: width 1
    ref = x.copy()
    ref[:, 1] = row
    assert_named(out, ref, (B, Axis("seq", 6)))
    out = hax.updated_slice(a, {"seq": hax.named(jnp.int32(0), ())}, 5.0)
    ref = x.copy()
    ref[:, 0] = 5
    assert_named(out, ref, (B, Axis("seq", 6)))

    def named_fn(x, u, s):
        return hax.updated_slice(
            hax.named(x, ("batch", "seq")),
            {"seq": s},
            hax.named(u, ("batch", "s2")).rename({"s2": "seq"}),
        ).array

    u = rand(3, 2, seed=3)
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
    x = rand(3, 4)

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

    check_all_modes(named_fn, pos_fn, x)

"""Property-based tests (hypothesis): quantization bounds, eager == jit, tree and rearrange round trips.

Profiles (chosen with the environment variable ``JAXCORE_HYPOTHESIS_PROFILE``):
  quick (default): derandomized (a fixed seed, the same examples every run), few examples per
    property, no deadline; the whole file runs in well under a minute on 2 cores.
  thorough: random examples, 20x as many per property. Run it with
    ``JAXCORE_HYPOTHESIS_PROFILE=thorough pytest tests/property_test.py`` or
    ``bazel test //tests:property_test_cpu --test_env=JAXCORE_HYPOTHESIS_PROFILE=thorough``.
Settings are applied per test (never `settings.load_profile`), so other test modules in the
same pytest process keep their own.

Quantization bound, per finite block (all in float64 against the input as float32):
  int8 / int4: |dequantized - w| <= (absmax / qmax) / 2 (qmax 127 / 7);
  NF4: |dequantized - w| <= absmax * half the gap between the two NF4 codes around w / absmax;
  NF4 double-quant: plus the error of the int8-coded absmax, (group max |absmax - offset|) / 127 / 2;
plus a few float32 ulps of absmax, the rounding into the weight's dtype, and float32
underflow: the scales are float32 and XLA:CPU flushes subnormals to zero, so a block whose
scale (absmax / qmax; NF4: absmax) is below float32's smallest normal may come back as zeros.
Non-finite blocks follow tests/quant_numerics_test.py: a block holding a NaN is all NaN; a
block holding an infinity (and no NaN) keeps each infinity with its sign and is NaN elsewhere;
with double quantization every block of a group (256 scales) holding a non-finite block is NaN.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jaxcore.named as hax
from jaxcore import kernels
from jaxcore import tree as jt
from jaxcore.quant import ArrayInt4, ArrayInt8, ArrayNF4, fake_quantize

# ----------------------------------------------------------------------------- profiles

_PROFILE_ENV = "JAXCORE_HYPOTHESIS_PROFILE"
_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile(
    "jaxcore-quick",
    derandomize=True,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=_SUPPRESS,
)
settings.register_profile(
    "jaxcore-thorough",
    derandomize=False,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=_SUPPRESS,
)
_PROFILE = os.environ.get(_PROFILE_ENV, "quick") or "quick"
if _PROFILE not in ("quick", "thorough"):
    raise ValueError(f"{_PROFILE_ENV}={_PROFILE!r}: expected 'quick' or 'thorough'")


def _examples(quick: int) -> settings:
    """The active profile with ``quick`` examples (20x as many under the thorough profile)."""
    parent = settings.get_profile(f"jaxcore-{_PROFILE}")
    return settings(parent, max_examples=quick if _PROFILE == "quick" else 20 * quick)


# ----------------------------------------------------------------------------- quantization

NF4 = np.asarray(kernels.NF4_CODE, np.float32).astype(np.float64)
F32 = np.finfo(np.float32)
GROUP_SIZE = 256  # jaxcore.quant._double_quant.GROUP_SIZE (scales per double-quant group)
DTYPES = {
    "float32": np.dtype(np.float32),
    "bfloat16": np.dtype(jnp.bfloat16),
    "float16": np.dtype(np.float16),
    "float64": np.dtype(np.float64),  # quantized through float32 (values within its range)
}
FORMATS = ("int8", "int4", "nf4", "nf4-double")
QMAX = {"int8": 127, "int4": 7}


def _quantizer(fmt: str, block_size: int, axis: int):
    if fmt == "int8":
        return lambda w: ArrayInt8.quantize(w, axis=axis, block_size=block_size)
    if fmt == "int4":
        return lambda w: ArrayInt4.quantize(w, block_size, axis=axis)
    return lambda w: ArrayNF4.quantize(w, block_size, double_quant=fmt == "nf4-double", axis=axis)


def _finfo(dtype):
    return np.finfo(np.float32) if dtype == np.float64 else jnp.finfo(dtype)


_SPECIALS = (
    "nan",
    "inf",
    "-inf",
    "max",
    "-max",
    "subnormal",
    "-subnormal",
    "tiny",
    "zero",
    "-zero",
)


@st.composite
def _weights(draw, formats=FORMATS):
    """(fmt, dtype name, block_size, axis, weight as a NumPy array of that dtype)."""
    fmt = draw(st.sampled_from(formats))
    dtype_name = draw(st.sampled_from(sorted(DTYPES)))
    dtype = DTYPES[dtype_name]
    block_size = draw(st.sampled_from([1, 2, 3, 4, 8, 16] if fmt == "int8" else [2, 4, 8, 16]))
    n_blocks = draw(st.integers(0, 3))
    other = draw(st.sampled_from([0, 1, 3, 5, 130]))  # 130 columns: several double-quant groups
    axis = draw(st.integers(0, 1))
    blocked_shape = (n_blocks * block_size, other)
    info = _finfo(dtype)
    top = float(info.max)
    # Per column: a magnitude from subnormal to the dtype's (float64: float32's) maximum.
    magnitudes = [
        1.0,
        1e-3,
        1e3,
        top / 2,
        top,
        float(info.tiny) * 4,
        float(info.smallest_subnormal) * 8,
    ]
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    mags = np.asarray(
        [draw(st.sampled_from(magnitudes)) for _ in range(min(other, 6))]
        + [1.0] * max(other - 6, 0)
    )
    w = rng.uniform(-1.0, 1.0, blocked_shape) * mags[None, :]
    w = np.clip(w, -top, top)
    size = w.size
    specials = draw(
        st.lists(
            st.tuples(st.integers(0, max(size - 1, 0)), st.sampled_from(_SPECIALS)),
            max_size=4 if size else 0,
        )
    )
    values = {
        "nan": np.nan,
        "inf": np.inf,
        "-inf": -np.inf,
        "max": top,
        "-max": -top,
        "subnormal": float(info.smallest_subnormal),
        "-subnormal": -float(info.smallest_subnormal),
        "tiny": float(info.tiny),
        "zero": 0.0,
        "-zero": -0.0,
    }
    flat = w.reshape(-1)
    for index, kind in specials:
        flat[index] = values[kind]
    w = flat.reshape(blocked_shape)
    w = w if axis == 0 else w.T
    w = w.astype(np.float32).astype(dtype) if dtype != np.float64 else w
    return fmt, dtype_name, block_size, axis, w


def _host(x) -> np.ndarray:
    return np.asarray(
        np.asarray(x).astype(np.float32) if np.asarray(x).dtype != np.float64 else x, np.float64
    )


def _expected(fmt: str, w: np.ndarray, block_size: int, out_dtype):
    """(bound, nan_mask, inf_values) for the blocked (K, N) float64 weight ``w`` (float32 values).

    ``bound`` applies where ``nan_mask`` is False and ``inf_values`` is not +-inf; there the
    output must be that infinity.
    """
    k, n = w.shape
    blocks = w.reshape(k // block_size, block_size, n)
    has_nan = np.isnan(blocks).any(axis=1)
    has_inf = np.isinf(blocks).any(axis=1) & ~has_nan
    nonfinite = has_nan | has_inf
    finite_blocks = np.where(np.isfinite(blocks), blocks, 0.0)
    absmax = np.abs(finite_blocks).max(axis=1) if block_size else np.zeros((0, n))
    rep = lambda per_block: np.repeat(per_block, block_size, axis=0)
    a = rep(absmax)
    wf = np.where(np.isfinite(w), w, 0.0)
    if fmt in QMAX:
        scale = absmax / QMAX[fmt]
        bound = rep(scale) / 2
    else:
        scale = absmax
        v = np.divide(wf, a, out=np.zeros_like(wf), where=a > 0)
        i = np.clip(np.searchsorted(NF4, v), 1, len(NF4) - 1)
        bound = (NF4[i] - NF4[i - 1]) / 2 * a
    if fmt == "nf4-double":
        flat, finite = absmax.reshape(-1), ~nonfinite.reshape(-1)
        offset = flat[finite].mean() if finite.any() else 0.0
        group = np.arange(flat.size) // GROUP_SIZE
        centred = np.where(finite, np.abs(flat - offset), 0.0)
        n_groups = -(-flat.size // GROUP_SIZE)
        group_max = np.zeros(n_groups)
        np.maximum.at(group_max, group, centred)
        poisoned = np.zeros(n_groups, bool)
        np.logical_or.at(poisoned, group, ~finite)
        dq_err = group_max[group] / 127 / 2 * (1 + 1e-3) + 4 * F32.eps * max(abs(offset), 0.0)
        bound = (
            bound
            + rep(dq_err.reshape(absmax.shape))
            + 4 * F32.eps * rep(group_max[group].reshape(absmax.shape))
        )
        has_nan = has_nan | poisoned[group].reshape(absmax.shape)
        has_inf = has_inf & ~has_nan
    bound = bound * (1 + 1e-5) + 4 * F32.eps * a
    # float32 underflow: a scale below the smallest normal float32 may be flushed to zero.
    bound = bound + np.where(rep(scale) < F32.tiny, a, 0.0) + 2 * F32.tiny
    # Rounding the float32 result into the output dtype.
    info = _finfo(out_dtype)
    bound = bound + (np.abs(wf) + bound) * float(info.eps) / 2 + float(info.smallest_subnormal)
    nan_mask = rep(has_nan) | (rep(has_inf) & ~np.isinf(w))
    inf_values = np.where(rep(has_inf) & np.isinf(w), w, 0.0)
    return bound, nan_mask, inf_values


def _assert_same(a, b):
    """Bit for bit (NaN where NaN), dtypes included."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(_host(a), _host(b))


@_examples(30)
@given(_weights())
def test_quantize_dequantize_within_format_bound_and_jit_matches_eager(case):
    fmt, dtype_name, block_size, axis, w = case
    quantize = _quantizer(fmt, block_size, axis)
    q = quantize(w)
    out = q.materialize()
    want_dtype = jnp.float32 if w.dtype == np.float64 else w.dtype  # float64 -> float32 without x64
    assert out.shape == w.shape and out.dtype == want_dtype, (out.shape, out.dtype)

    # eager == jit, for the stored arrays and for the dense weight.
    jq = jax.jit(quantize)(w)
    assert type(jq) is type(q) and (jq.block_size, jq.axis) == (q.block_size, q.axis)
    for got, want in zip(jax.tree_util.tree_leaves(jq), jax.tree_util.tree_leaves(q), strict=True):
        _assert_same(got, want)
    _assert_same(jax.jit(lambda w: quantize(w).materialize())(w), out)
    _assert_same(jax.jit(lambda q: q.materialize())(q), out)

    # The error bound, and NaN/inf where documented.
    ref = _host(w).astype(np.float32).astype(np.float64)  # what the float32 kernels see
    got = _host(out)
    if w.dtype == np.float64:  # within float32's range: only the float32 rounding on top
        finite = np.isfinite(ref)
        assert np.all(np.abs(_host(w) - ref)[finite] <= np.abs(ref[finite]) * F32.eps)
    if axis == 1:
        ref, got = ref.T, got.T
    bound, nan_mask, inf_values = _expected(fmt, ref, block_size, out.dtype)
    assert np.isnan(got[nan_mask]).all(), "a block holding NaN (or an inf's neighbours) must be NaN"
    infs = np.isinf(inf_values)
    np.testing.assert_array_equal(got[infs], inf_values[infs])
    rest = ~nan_mask & ~infs
    err = np.abs(got[rest] - ref[rest])
    worst = np.argmax(err - bound[rest]) if err.size else None
    assert np.all(err <= bound[rest]), (
        f"{fmt} {dtype_name} block_size={block_size}: error {err[worst]:.6g} > bound "
        f"{bound[rest][worst]:.6g} at value {ref[rest][worst]:.6g}"
    )


@_examples(10)
@given(_weights(formats=("int8", "int4", "nf4", "nf4-double")))
def test_fake_quantize_is_materialize_of_quantize_in_eager_and_jit(case):
    fmt, _, block_size, axis, w = case
    w = jnp.asarray(w)
    name, options = (fmt, {}) if fmt != "nf4-double" else ("nf4", {"double_quant": True})
    options.update(block_size=[block_size] if block_size % 2 else block_size, axis=axis)
    eager = fake_quantize(w, name, **options)
    want = _quantizer(fmt, block_size, axis)(w).materialize()
    _assert_same(eager, want)
    _assert_same(jax.jit(lambda w: fake_quantize(w, name, **options))(w), want)
    # Straight-through gradient: the identity, whatever the quantizer did.
    if w.size and w.dtype == jnp.float32:
        grad = jax.grad(lambda w: (fake_quantize(w, name, **options) * 2.0).sum())(w)
        np.testing.assert_array_equal(np.asarray(grad), np.full(w.shape, 2.0, np.float32))


@_examples(8)
@given(
    st.sampled_from(["int8", "int4", "nf4", "nf4-double"]),
    st.floats(float(F32.max) * 1.0001, 1e308),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_float64_beyond_float32_range_raises(fmt, big, negative, seed):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((8, 3))
    w[tuple(rng.integers((8, 3)))] = -big if negative else big
    with pytest.raises(ValueError, match="beyond float32's range"):
        _quantizer(fmt, 4, 0)(w)


# ----------------------------------------------------------------------------- trees


@jt.dataclass
class Layer:
    weight: Any
    bias: Any
    extra: Any = None
    name: str = jt.field(default="layer", static=True)


_LEAF_DTYPES = [jnp.float32, jnp.int32, jnp.bfloat16, jnp.bool_]


@st.composite
def _leaf(draw, shape=None):
    shape = draw(st.lists(st.integers(0, 3), max_size=3).map(tuple)) if shape is None else shape
    dtype = draw(st.sampled_from(_LEAF_DTYPES))
    seed = draw(st.integers(0, 2**16))
    raw = np.random.default_rng(seed).standard_normal(shape) * 10
    return jnp.asarray(raw > 0 if dtype == jnp.bool_ else raw).astype(dtype)


def _tree(leaf):
    """A pytree of ``leaf``s mixing tree dataclasses, dicts, tuples, lists and None."""
    return st.recursive(
        leaf,
        lambda children: st.one_of(
            st.tuples(
                children, children, st.one_of(st.none(), children), st.sampled_from(["a", "b"])
            ).map(lambda t: Layer(t[0], t[1], t[2], name=t[3])),
            st.dictionaries(st.sampled_from(["x", "y", "z"]), children, max_size=3),
            st.lists(children, max_size=3),
            st.tuples(children, children),
        ),
        max_leaves=6,
    )


def _assert_trees_equal(a, b):
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@_examples(25)
@given(_tree(_leaf()))
def test_flatten_unflatten_round_trips(tree):
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    back = jax.tree_util.tree_unflatten(treedef, leaves)
    _assert_trees_equal(back, tree)
    assert jax.tree_util.tree_structure(back) == treedef
    # Static fields survive in the treedef; the dataclasses are equal field by field.
    layers = [
        n
        for n in jax.tree_util.tree_leaves(tree, is_leaf=lambda n: isinstance(n, Layer))
        if isinstance(n, Layer)
    ]
    back_layers = [
        n
        for n in jax.tree_util.tree_leaves(back, is_leaf=lambda n: isinstance(n, Layer))
        if isinstance(n, Layer)
    ]
    assert [n.name for n in back_layers] == [n.name for n in layers]
    # Keyed paths name the fields, and flattening with paths gives the same leaves.
    with_path, treedef2 = jax.tree_util.tree_flatten_with_path(tree)
    assert treedef2 == treedef and len(with_path) == len(leaves)
    # New leaves go where the old ones were, and through jit unchanged.
    _assert_trees_equal(jax.jit(lambda t: t)(tree), tree)
    shifted = jax.tree_util.tree_unflatten(treedef, [jnp.zeros_like(x) for x in leaves])
    _assert_trees_equal(shifted, jt.tree_zeros_like(tree))


@st.composite
def _same_structure_trees(draw):
    """2-4 pytrees with one structure and matching leaf shapes/dtypes, different values."""
    template = draw(_tree(_leaf()))
    count = draw(st.integers(1, 4))
    leaves, treedef = jax.tree_util.tree_flatten(template)
    trees = [template]
    for k in range(1, count):
        seed = draw(st.integers(0, 2**16))
        rng = np.random.default_rng(seed + k)
        new = [jnp.asarray(rng.standard_normal(x.shape) * 10).astype(x.dtype) for x in leaves]
        trees.append(jax.tree_util.tree_unflatten(treedef, new))
    return trees


@_examples(25)
@given(_same_structure_trees())
def test_tree_stack_then_unstack_round_trips(trees):
    # jaxcore.tree has no tree_unstack: unstacking is indexing every leaf.
    stacked = jt.tree_stack(*trees)
    assert jax.tree_util.tree_structure(stacked) == jax.tree_util.tree_structure(trees[0])
    for s, x in zip(
        jax.tree_util.tree_leaves(stacked), jax.tree_util.tree_leaves(trees[0]), strict=True
    ):
        assert s.shape == (len(trees),) + x.shape and s.dtype == x.dtype
    for i, tree in enumerate(trees):
        _assert_trees_equal(jax.tree_util.tree_map(lambda s, i=i: s[i], stacked), tree)
    # Stacking is concatenating the trees with a new unit axis each.
    expanded = [jax.tree_util.tree_map(lambda x: x[None], t) for t in trees]
    _assert_trees_equal(jt.tree_concat(*expanded), stacked)


# ----------------------------------------------------------------------------- named.rearrange


@st.composite
def _named_array(draw):
    n = draw(st.integers(1, 4))
    names = draw(st.lists(st.sampled_from("abcdefgh"), min_size=n, max_size=n, unique=True))
    sizes = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    raw = np.arange(int(np.prod(sizes)), dtype=np.int32).reshape(sizes)
    return hax.NamedArray(jnp.asarray(raw), tuple(hax.Axis(k, s) for k, s in zip(names, sizes)))


def _assert_named_equal(a, b):
    assert a.axes == b.axes
    np.testing.assert_array_equal(np.asarray(a.array), np.asarray(b.array))


@_examples(30)
@given(_named_array(), st.data())
def test_rearrange_and_its_inverse_round_trip(x, data):
    names = [a.name for a in x.axes]
    perm = data.draw(st.permutations(range(len(names))))
    order = [names[i] for i in perm]
    raw = np.asarray(x.array)
    # Sequence form.
    y = hax.rearrange(x, order)
    assert y.axes == tuple(x.axes[i] for i in perm)
    np.testing.assert_array_equal(np.asarray(y.array), raw.transpose(perm))
    _assert_named_equal(hax.rearrange(y, names), x)
    # String form, permutation and its inverse.
    y = hax.rearrange(x, " ".join(names) + " -> " + " ".join(order))
    _assert_named_equal(hax.rearrange(y, " ".join(order) + " -> " + " ".join(names)), x)
    # String form that merges a run of the permuted axes into one, and its inverse split.
    start = data.draw(st.integers(0, len(order) - 1))
    stop = data.draw(st.integers(start + 1, len(order)))
    group = order[start:stop]
    merged_rhs = order[:start] + ["(m: " + " ".join(group) + ")"] + order[stop:]
    merged = hax.rearrange(x, " ".join(names) + " -> " + " ".join(merged_rhs))
    assert hax.Axis("m", int(np.prod([x.axes[names.index(g)].size for g in group]))) in merged.axes
    sizes = {a.name: a.size for a in x.axes}
    bindings = {g: sizes[g] for g in group[1:]}  # the first piece's size is inferred
    back = hax.rearrange(merged, " ".join(merged_rhs) + " -> " + " ".join(names), **bindings)
    _assert_named_equal(back, x)
    # unbind then stack along the same (first) axis gives the array back.
    first = x.axes[0]
    _assert_named_equal(hax.stack(first, hax.unbind(x, first.name)), x)

"""The string form of ``hax.rearrange``: parser, planner and application, checked against NumPy."""

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxcore.named as hax
from jaxcore.named import _rearrange
from jaxcore.named._rearrange import Capture, Side, parse_einsum, parse_rearrangement, rearrange_str

B, H, W, C = hax.Axis("B", 2), hax.Axis("H", 4), hax.Axis("W", 6), hax.Axis("C", 3)


def _image():
    raw = np.arange(2 * 4 * 6 * 3, dtype=np.float32).reshape(2, 4, 6, 3)
    return raw, hax.NamedArray(jnp.asarray(raw), (B, H, W, C))


def _names(arr):
    return tuple(a.name for a in arr.axes)


# ----------------------------------------------------------------------------- examples


def test_permute_matches_transpose():
    raw, x = _image()
    y = hax.rearrange(x, "B H W C -> C B H W")
    assert y.axes == (C, B, H, W)
    np.testing.assert_array_equal(np.asarray(y.array), raw.transpose(3, 0, 1, 2))


def test_flatten_into_named_group():
    raw, x = _image()
    y = hax.rearrange(x, "B H W C -> B (E: H W C)")
    assert y.axes == (B, hax.Axis("E", 72))
    np.testing.assert_array_equal(np.asarray(y.array), raw.reshape(2, 72))


def test_image_to_patches_unordered():
    raw, x = _image()
    y = hax.rearrange(x, "{ B (H: h1 H) (W: w1 W) C } -> (B: B h1 w1) (E: H W C) ...", H=2, W=2)
    assert y.axes == (hax.Axis("B", 2 * 2 * 3), hax.Axis("E", 2 * 2 * 3))
    want = raw.reshape(2, 2, 2, 3, 2, 3).transpose(0, 1, 3, 2, 4, 5).reshape(12, 12)
    np.testing.assert_array_equal(np.asarray(y.array), want)


def test_long_names_and_ellipsis_positions():
    raw, x = _image()
    y = hax.rearrange(x, "{B (H: h1 H) (W: w1 W) C} -> (B: B h1 w1) (embed: H W C) ...", H=2, W=2)
    assert _names(y) == ("B", "embed")
    z = hax.rearrange(x, "B ... C -> C ... B")
    assert _names(z) == ("C", "H", "W", "B")
    np.testing.assert_array_equal(np.asarray(z.array), raw.transpose(3, 1, 2, 0))
    front = hax.rearrange(x, "{W} -> W ...")
    assert _names(front) == ("W", "B", "H", "C")
    np.testing.assert_array_equal(np.asarray(front.array), raw.transpose(2, 0, 1, 3))


def test_ordered_names_are_positional_variables():
    raw, x = _image()
    # lhs identifiers need not be the axis names: they bind by position; names are kept.
    y = hax.rearrange(x, "a b c d -> d a (q: b c)")
    assert y.axes == (C, B, hax.Axis("q", 24))
    np.testing.assert_array_equal(np.asarray(y.array), raw.transpose(3, 0, 1, 2).reshape(3, 2, 24))


def test_split_then_merge_in_other_order():
    raw = np.arange(24.0).reshape(6, 4)
    x = hax.NamedArray(jnp.asarray(raw), (hax.Axis("ab", 6), hax.Axis("c", 4)))
    y = hax.rearrange(x, "(a b) c -> (x: c a) b", a=2)
    assert _names(y) == ("x", "b") and y.axis_size("b") == 3
    np.testing.assert_array_equal(
        np.asarray(y.array), raw.reshape(2, 3, 4).transpose(2, 0, 1).reshape(8, 3)
    )


def test_bindings_rename_and_alias():
    raw, x = _image()
    y = hax.rearrange(x, "{x y} -> ... y x", x="H", y=W)
    assert _names(y) == ("B", "C", "W", "H")
    np.testing.assert_array_equal(np.asarray(y.array), raw.transpose(0, 3, 2, 1))
    renamed = hax.rearrange(x, "B H W c -> B H W c", c="channel")
    assert _names(renamed) == ("B", "H", "W", "channel")
    grouped = hax.rearrange(x, "B H W C -> B (E: H W) C", E="spatial")
    assert grouped.axes[1] == hax.Axis("spatial", 24)
    sized = hax.rearrange(x, "B (H: h1 h2) W C -> B h1 h2 W C", h2=hax.Axis("rows", 2))
    assert sized.axes[1:3] == (hax.Axis("h1", 2), hax.Axis("rows", 2))
    np.testing.assert_array_equal(np.asarray(sized.array), raw.reshape(2, 2, 2, 6, 3))


def test_identity_needs_no_ops_and_plans_are_cached():
    _, x = _image()
    y = hax.rearrange(x, "B H W C -> B H W C")
    assert y.array is x.array
    _rearrange._plan.cache_clear()
    hax.rearrange(x, "B H W C -> C B H W")
    hax.rearrange(x, "B H W C -> C B H W")
    info = _rearrange._plan.cache_info()
    assert info.misses == 1 and info.hits == 1


def test_under_jit_grad_and_vmap():
    raw, x = _image()
    expr = "{B (H: h1 H) W C} -> (B: B h1) (E: H W C)"
    ref = raw.reshape(2, 2, 2, 6, 3).reshape(4, 36)
    jitted = jax.jit(lambda a: hax.rearrange(a, expr, H=2))(x)
    assert jitted.axes == (hax.Axis("B", 4), hax.Axis("E", 36))
    np.testing.assert_array_equal(np.asarray(jitted.array), ref)

    weights = np.random.default_rng(0).normal(size=(4, 36)).astype(np.float32)

    def loss(a):
        return jnp.sum(hax.rearrange(a, expr, H=2).array * weights)

    grad = jax.grad(loss)(x)
    assert grad.axes == x.axes
    np.testing.assert_allclose(np.asarray(grad.array), weights.reshape(2, 4, 6, 3), rtol=1e-6)

    stacked = np.stack([raw, raw + 1])
    out = jax.vmap(
        lambda r: hax.rearrange(hax.NamedArray(r, (B, H, W, C)), "B H W C -> C (E: B H W)").array
    )(jnp.asarray(stacked))
    np.testing.assert_array_equal(
        np.asarray(out), stacked.transpose(0, 4, 1, 2, 3).reshape(2, 3, 48)
    )


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "expr, message",
    [
        ("B H W C", "Expected '->'"),
        ("B H W C -> C B H W -> B", "Only one '->'"),
        ("B (H W C -> B", "Unclosed"),
        ("{B H W C -> B", "Missing '}'"),
        ("B H } -> B", "without a matching"),
        ("B 1H -> B", "cannot start with a digit"),
        ("B H, W -> B", "separates einsum operands"),
        ("B (E: ) -> B", "at least one axis"),
        ("B (a: b: c) -> B", "one 'name:'"),
        ("B ((H)) -> B", "inside a group"),
        ("B .. -> B", "Expected '...'"),
        ("B } C -> B", "without a matching"),
        ("{B} C -> B", "Nothing may follow"),
        ("B 'x -> B", "Unterminated"),
        ("B '' -> B", "Empty quoted"),
        ("B H ) -> B", "Unexpected ')'"),
        ("B H -> B H {}", "must open the side"),
    ],
)
def test_parse_errors_point_at_the_problem(expr, message):
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        parse_rearrangement(expr)
    assert expr in str(info.value) and "^" in str(info.value)


def test_unbound_name_on_the_right_is_named():
    _, x = _image()
    with pytest.raises(ValueError, match=r"Name 'Q' on the right is not bound on the left"):
        hax.rearrange(x, "B H W C -> B H W Q")


@pytest.mark.parametrize(
    "expr, bindings, message",
    [
        ("{B Z} -> ...", {}, r"Axis 'Z' is not in the array"),
        ("B H W -> B H W", {}, r"names 3 axes but the array has 4"),
        ("B H W C D ... -> B", {}, r"names 5 axes but the array has 4"),
        ("B ... ... C -> B C", {}, r"At most one '...' is allowed on the left"),
        ("B (H: a b) W C -> B a b W C", {}, r"sizes of a, b are unknown"),
        ("B (H: a b) W C -> B a b W C", {"a": 3}, r"not divisible by 3"),
        ("B (H: a b) W C -> B a b W C", {"a": 2, "b": 3}, r"pieces multiply to 6"),
        ("B H W C -> B (H W) C", {}, r"needs a name"),
        ("B H W C -> B H W C H", {}, r"Name 'H' is used twice on the right"),
        ("B H W H -> B H W", {}, r"Name 'H' is bound twice on the left"),
        ("B H W C -> B H W", {}, r"Axes \['C'\] are not on the right side"),
        ("B H W C -> B H W (H: C)", {}, r"duplicate axis names \['H'\]"),
        ("B H W C -> B H W C", {"Z": 3}, r"Bindings \['Z'\] are not used"),
        ("{B (H: W h)} -> ...", {"h": 2}, r"duplicate axis names \['W'\]"),
        ("{(a b)} -> ...", {}, r"need a name to match"),
        ("{B} -> {B}", {}, r"must be ordered"),
        (
            "B H W C -> B H W (E: C)",
            {"E": 5},
            r"Merged axis 'E' has size 3, but the binding says 5",
        ),
        ("B H W C -> B H W (E: C)", {"E": hax.Axis("chan", 4)}, r"Merged axis 'chan' has size 3"),
        ("{H} -> ...", {"H": 3}, r"Axis 'H' has size 4 but the pieces multiply to 3"),
    ],
)
def test_plan_errors_name_axes(expr, bindings, message):
    _, x = _image()
    with pytest.raises(ValueError, match=message):
        hax.rearrange(x, expr, **bindings)


def test_type_errors():
    _, x = _image()
    with pytest.raises(TypeError, match=r"binding a=1.5 must be an int size"):
        rearrange_str(x, "B H W C -> B H W C", a=1.5)
    with pytest.raises(TypeError, match="expects a NamedArray"):
        rearrange_str(np.zeros((2, 3)), "a b -> b a")


# ----------------------------------------------------------------------------- parser properties

_IDENT = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,5}", fullmatch=True)


@st.composite
def _side(draw, ordered):
    items = []
    used_ellipsis = False
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from(["ident", "group", "ellipsis"]))
        if kind == "ellipsis" and not used_ellipsis:
            used_ellipsis = True
            items.append(Ellipsis)
        elif kind == "group":
            name = draw(st.none() | _IDENT)
            members = tuple(draw(st.lists(_IDENT, min_size=1, max_size=3)))
            items.append(Capture(name, members))
        else:
            items.append(Capture(draw(_IDENT), None))
    return Side(tuple(items), ordered)


def _render(side, space):
    parts = []
    for item in side.items:
        if item is Ellipsis:
            parts.append("...")
        elif item.members is None:
            parts.append(item.name)
        else:
            head = f"{item.name}:{space}" if item.name is not None else ""
            parts.append("(" + space + head + " ".join(item.members) + space + ")")
    body = (" " + space).join(parts)
    return body if side.ordered else "{" + space + body + space + "}"


@settings(max_examples=100, deadline=None)
@given(
    lhs=st.booleans().flatmap(lambda o: _side(o)),
    rhs=_side(True),
    space=st.sampled_from(["", " ", "  "]),
)
def test_parser_round_trips_rendered_structures(lhs, rhs, space):
    expr = _render(lhs, space) + f"{space}->{space}" + _render(rhs, space)
    got_lhs, got_rhs = parse_rearrangement(expr)
    assert got_lhs == lhs and got_rhs == rhs
    inputs, out = parse_einsum(
        _render(lhs, space) + " , " + _render(rhs, space) + " -> " + _render(rhs, space)
    )
    assert inputs == (lhs, rhs) and out == rhs


# ----------------------------------------------------------------------------- application properties


@st.composite
def _rearrangement(draw):
    n = draw(st.integers(1, 4))
    sizes = [draw(st.integers(1, 4)) for _ in range(n)]
    names = [f"a{i}" for i in range(n)]
    perm = draw(st.permutations(range(n)))
    # partition the permuted axes into consecutive groups; each group merges into one axis
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=n - 1))) if n > 1 else []
    bounds = [0, *cuts, n]
    groups = [list(perm[bounds[i] : bounds[i + 1]]) for i in range(len(bounds) - 1)]
    unordered = draw(st.booleans())
    return sizes, names, groups, unordered


@settings(max_examples=40, deadline=None)
@given(_rearrangement())
def test_permute_and_merge_match_numpy(case):
    sizes, names, groups, unordered = case
    raw = np.arange(math.prod(sizes), dtype=np.int32).reshape(sizes)
    x = hax.NamedArray(jnp.asarray(raw), tuple(hax.Axis(n, s) for n, s in zip(names, sizes)))
    lhs = "{" + " ".join(reversed(names)) + "}" if unordered else " ".join(names)
    rhs = []
    for k, g in enumerate(groups):
        rhs.append(names[g[0]] if len(g) == 1 else f"(m{k}: " + " ".join(names[i] for i in g) + ")")
    y = hax.rearrange(x, lhs + " -> " + " ".join(rhs))
    order = [i for g in groups for i in g]
    want = raw.transpose(order).reshape([math.prod(sizes[i] for i in g) for g in groups])
    np.testing.assert_array_equal(np.asarray(y.array), want)
    assert [a.size for a in y.axes] == list(want.shape)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(1, 3), min_size=2, max_size=3),
    st.integers(1, 3),
    st.data(),
)
def test_split_matches_numpy_reshape(factors, other, data):
    # one axis of size prod(factors) is split into len(factors) pieces, one size inferred
    total = math.prod(factors)
    raw = np.arange(total * other, dtype=np.int32).reshape(total, other)
    x = hax.NamedArray(jnp.asarray(raw), (hax.Axis("s", total), hax.Axis("o", other)))
    pieces = [f"p{i}" for i in range(len(factors))]
    infer = data.draw(st.integers(0, len(factors) - 1))
    bindings = {p: f for i, (p, f) in enumerate(zip(pieces, factors)) if i != infer}
    perm = data.draw(st.permutations(range(len(factors) + 1)))
    outs = pieces + ["o"]
    y = hax.rearrange(
        x, "(s: " + " ".join(pieces) + ") o -> " + " ".join(outs[i] for i in perm), **bindings
    )
    want = raw.reshape(*factors, other).transpose(perm)
    np.testing.assert_array_equal(np.asarray(y.array), want)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 4), st.data())
def test_ellipsis_keeps_unnamed_axes_in_order(n, data):
    sizes = [2, 3, 1, 4][:n]
    names = [f"x{i}" for i in range(n)]
    raw = np.arange(math.prod(sizes), dtype=np.int32).reshape(sizes)
    x = hax.NamedArray(jnp.asarray(raw), tuple(hax.Axis(k, s) for k, s in zip(names, sizes)))
    named = data.draw(st.lists(st.sampled_from(range(n)), unique=True))
    cut = data.draw(st.integers(0, len(named)))
    rest = [i for i in range(n) if i not in named]
    rhs = [names[i] for i in named[:cut]] + ["..."] + [names[i] for i in named[cut:]]
    y = hax.rearrange(x, "{" + " ".join(names[i] for i in named) + "} -> " + " ".join(rhs))
    order = named[:cut] + rest + named[cut:]
    assert _names(y) == tuple(names[i] for i in order)
    np.testing.assert_array_equal(np.asarray(y.array), raw.transpose(order))


def test_rearrange_lhs_count_errors_use_haliax_wording():
    x = hax.ones((B, H, W, C))
    with pytest.raises(
        ValueError, match="Too many axes in lhs: it names 5 axes but the array has 4"
    ):
        hax.rearrange(x, "b h w c q -> b h w c q")
    with pytest.raises(
        ValueError, match=r"Too few axes in lhs \(Not all axes are bound\): it names 3"
    ):
        hax.rearrange(x, "b h w -> b h w")
    with pytest.raises(ValueError, match="Too many axes in lhs: it names 5 axes"):
        hax.rearrange(x, "b h ... w c q -> b h w c q")


@pytest.mark.parametrize(
    ("expr", "kwargs", "phrase"),
    [
        ("b h w c q -> b h w c q", {}, "Too many axes in lhs"),
        ("b h w -> b h w c q", {}, "Not all axes are bound"),
        ("b h w c -> b h w c q", {}, "Axis q is not bound on the lhs"),
        ("b ... h ... -> b h ...", {}, "Only one ellipsis allowed"),
        ("b h q q -> b h q", {}, "Capture q is assigned more than once"),
        ("b h w c -> b h w c c", {}, "is used more than once"),
        ("b h w c -> b h w", {}, "Not all intermediate axes are used"),
        ("b h w c ... b -> b h w c", {}, "is bound more than once"),
        ("b h (q q) c -> b h c", {"q": 2}, "Capture q is assigned more than once"),
        ("(x y) h w c -> h w c x y", {"x": 3, "y": 5}, "do not divide"),
        ("(x y) h w c -> h w c x y", {"x": 3}, "do not divide"),
        ("b ... c -> (b c) ...", {}, "must have a name"),
        ("(b q) ... c -> b q c ...", {}, "are ambiguous"),
        ("{(q) } -> (Z: q)", {}, "must be bound by name"),
        ("{(Z: q) } -> Z", {}, "Could not resolve"),
    ],
)
def test_rearrange_errors_carry_haliax_phrases(expr, kwargs, phrase):
    # Haliax users match on these phrases; the duplicate-name check comes before counts
    with pytest.raises(ValueError, match=re.escape(phrase)):
        hax.rearrange(hax.ones((B, H, W, C)), expr, **kwargs)

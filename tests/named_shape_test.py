"""jaxcore.named shape ops: rename, flatten/unflatten, split/unbind, concatenate/stack, rearrange.

Each op is compared with the positional reshape/transpose it stands for, in eager mode and
under ``jit``, ``vmap`` and ``grad``; error paths must name the offending axis.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcore.named as hax
from jaxcore.named import Axis, NamedArray

B, H, W, C = hax.make_axes(B=2, H=3, W=4, C=5)
X = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)


def _a():
    return hax.named(X, (B, H, W, C))


def _assert_named(out, ref, axes):
    assert isinstance(out, NamedArray), type(out)
    assert out.axes == tuple(axes), (out.axes, axes)
    np.testing.assert_allclose(np.asarray(out.array), np.asarray(ref), rtol=1e-6)


def test_rename():
    a = _a()
    _assert_named(
        hax.rename(a, {"H": "height", W: Axis("width", 4)}),
        X,
        (B, Axis("height", 3), Axis("width", 4), C),
    )
    _assert_named(a.rename({"C": "channels"}), X, (B, H, W, Axis("channels", 5)))
    with pytest.raises(ValueError, match="Axis 'nope' not found"):
        hax.rename(a, {"nope": "x"})
    with pytest.raises(ValueError, match="rename of 'H': axis 'h2' has size 9, expected 3"):
        hax.rename(a, {"H": Axis("h2", 9)})
    with pytest.raises(ValueError, match="Duplicate axis name 'W'"):
        hax.rename(a, {"H": "W"})
    with pytest.raises(TypeError, match="rename of 'H': expected an axis name or Axis, got 3"):
        hax.rename(a, {"H": 3})


def test_ravel_and_flatten():
    a = _a()
    _assert_named(hax.ravel(a, "flat"), X.reshape(-1), (Axis("flat", 120),))
    _assert_named(a.flatten("flat"), X.reshape(-1), (Axis("flat", 120),))
    _assert_named(hax.flatten(a, Axis("flat", 120)), X.reshape(-1), (Axis("flat", 120),))
    with pytest.raises(ValueError, match="ravel: axis 'flat' has size 7, expected 120"):
        hax.ravel(a, Axis("flat", 7))
    with pytest.raises(TypeError, match="takes no is_leaf"):
        hax.flatten(a, "flat", is_leaf=lambda x: True)
    # without an axis name, flatten is the pytree flatten
    tree = {"a": a, "n": jnp.ones(2)}
    leaves, treedef = hax.flatten(tree)
    rebuilt = jax.tree_util.tree_unflatten(treedef, leaves)
    _assert_named(rebuilt["a"], X, a.axes)
    np.testing.assert_array_equal(rebuilt["n"], np.ones(2))


def test_flatten_axes():
    a = _a()
    _assert_named(
        hax.flatten_axes(a, ("H", "W"), "HW"), X.reshape(2, 12, 5), (B, Axis("HW", 12), C)
    )
    # merged in the given order, placed where the first merged axis was
    _assert_named(
        a.flatten_axes(("C", "H"), "CH"),
        X.transpose(0, 3, 1, 2).reshape(2, 15, 4),
        (B, Axis("CH", 15), W),
    )
    _assert_named(
        hax.flatten_axes(a, (B, C), "BC"),
        X.transpose(0, 3, 1, 2).reshape(10, 3, 4),
        (Axis("BC", 10), H, W),
    )
    assert hax.flatten_axes((B, H, W), ("H", "W"), "HW") == (B, Axis("HW", 12))
    assert hax.flatten_axes((H, W), "HW") == Axis("HW", 12)
    assert hax.flatten_axes({"H": 3, "W": 4}, Axis("HW", 12)) == Axis("HW", 12)
    with pytest.raises(ValueError, match="flatten_axes: axis 'HW' has size 11, expected 12"):
        hax.flatten_axes(a, ("H", "W"), Axis("HW", 11))
    with pytest.raises(ValueError, match="Axis 'Z' not found"):
        hax.flatten_axes(a, ("H", "Z"), "HZ")
    with pytest.raises(ValueError, match="names an axis twice"):
        hax.flatten_axes(a, ("H", "H"), "HH")
    with pytest.raises(ValueError, match="Duplicate axis name 'C'"):
        hax.flatten_axes(a, ("H", "W"), "C")
    with pytest.raises(ValueError, match="at least one axis"):
        hax.flatten_axes(a, (), "none")
    with pytest.raises(TypeError, match="flatten_axes takes"):
        hax.flatten_axes(a, ("H", "W"))


def test_unflatten_axis():
    a = hax.flatten_axes(_a(), ("H", "W"), "HW")
    _assert_named(hax.unflatten_axis(a, "HW", (H, W)), X, (B, H, W, C))
    _assert_named(
        a.unflatten_axis("HW", {"p": 6, "q": 2}),
        X.reshape(2, 6, 2, 5),
        (B, Axis("p", 6), Axis("q", 2), C),
    )
    with pytest.raises(
        ValueError, match="axis 'HW' has size 12 but the new axes \\(H=3, W=5\\) have 15"
    ):
        hax.unflatten_axis(a, "HW", (H, Axis("W", 5)))
    with pytest.raises(ValueError, match="Duplicate axis name 'B'"):
        hax.unflatten_axis(a, "HW", (Axis("B", 3), W))
    with pytest.raises(ValueError, match="Axis 'Q' not found"):
        hax.unflatten_axis(a, "Q", (H, W))


def test_split_and_unbind():
    a = _a()
    W1, W2 = Axis("W1", 1), Axis("W", 3)
    p, q = hax.split(a, "W", (W1, W2))
    _assert_named(p, X[:, :, :1], (B, H, W1, C))
    _assert_named(q, X[:, :, 1:], (B, H, W2, C))
    parts = a.split(C, [Axis("C", 2), Axis("C", 3)])
    _assert_named(parts[1], X[..., 2:], (B, H, W, Axis("C", 3)))
    with pytest.raises(ValueError, match="split: axis 'W' has size 4 but the new axes add up to 5"):
        hax.split(a, "W", (Axis("a", 2), Axis("b", 3)))
    with pytest.raises(TypeError, match="split needs Axis objects"):
        hax.split(a, "W", ("a", "b"))
    with pytest.raises(ValueError, match="Duplicate axis name 'H'"):
        hax.split(a, "W", (Axis("H", 4),))
    rows = hax.unbind(a, "H")
    assert len(rows) == 3
    for k, r in enumerate(rows):
        _assert_named(r, X[:, k], (B, W, C))
    _assert_named(a.unbind("B")[1], X[1], (H, W, C))
    with pytest.raises(ValueError, match="Axis 'Z' not found"):
        hax.unbind(a, "Z")


def test_concatenate_and_stack():
    a = _a()
    b = hax.named(X[:, :2].transpose(3, 0, 2, 1) * 2, (C, B, W, Axis("H", 2)))  # other order
    out = hax.concatenate("H", [a, b])
    _assert_named(out, np.concatenate([X, X[:, :2] * 2], axis=1), (B, Axis("H", 5), W, C))
    _assert_named(
        hax.concatenate(Axis("H", 5), (a, b)),
        np.concatenate([X, X[:, :2] * 2], 1),
        (B, Axis("H", 5), W, C),
    )
    with pytest.raises(ValueError, match="concatenate: axis 'H' has size 4, expected 5"):
        hax.concatenate(Axis("H", 4), (a, b))
    with pytest.raises(ValueError, match="array 1 \\(axes \\(B=2, W=4, C=5\\)\\) has no axis 'H'"):
        hax.concatenate("H", [a, a["H", 0]])
    with pytest.raises(
        ValueError, match="concatenate: axis 'W' has size 3 in array 1 but 4 in array 0"
    ):
        hax.concatenate("H", [a, hax.zeros((B, H, Axis("W", 3), C))])
    with pytest.raises(
        ValueError, match="array 1 has axes \\(B=2, H=3, W=4, Z=5\\) but array 0 has"
    ):
        hax.concatenate("H", [a, hax.zeros((B, H, W, Axis("Z", 5)))])
    with pytest.raises(ValueError, match="at least one array"):
        hax.concatenate("H", [])
    with pytest.raises(TypeError, match="concatenate needs a NamedArray"):
        hax.concatenate("H", [a, X])
    S = Axis("S", 2)
    out = hax.stack(S, [a, hax.rearrange(a * 3, (C, W, H, B))])
    _assert_named(out, np.stack([X, X * 3]), (S, B, H, W, C))
    _assert_named(hax.stack("S", [a]), X[None], (Axis("S", 1), B, H, W, C))
    with pytest.raises(ValueError, match="stack: axis 'S' has size 2, expected 3"):
        hax.stack(S, [a, a, a])
    with pytest.raises(ValueError, match="already have an axis 'B'"):
        hax.stack("B", [a, a])
    with pytest.raises(ValueError, match="stack: axis 'C' has size 2 in array 1 but 5 in array 0"):
        hax.stack("S", [a, hax.zeros((B, H, W, Axis("C", 2)))])
    with pytest.raises(ValueError, match="at least one array"):
        hax.stack("S", [])


def test_rearrange_sequence_form():
    a = _a()
    _assert_named(hax.rearrange(a, (C, B, H, W)), X.transpose(3, 0, 1, 2), (C, B, H, W))
    _assert_named(hax.rearrange(a, ("C", ...)), X.transpose(3, 0, 1, 2), (C, B, H, W))
    _assert_named(a.rearrange((..., "B")), X.transpose(1, 2, 3, 0), (H, W, C, B))
    _assert_named(hax.rearrange(a, ("W", ..., "H")), X.transpose(2, 0, 3, 1), (W, B, C, H))
    _assert_named(hax.rearrange(a, "W", ..., "H"), X.transpose(2, 0, 3, 1), (W, B, C, H))
    assert hax.rearrange(a, (...,)) is a
    with pytest.raises(ValueError, match="axes \\['H', 'W'\\] are not mentioned"):
        hax.rearrange(a, (C, B))
    # several ... share the other axes out as Haliax does
    _assert_named(hax.rearrange(a, (..., C, ...)), X, (B, H, W, C))
    _assert_named(hax.rearrange(a, (C, ..., ...)), X.transpose(3, 0, 1, 2), (C, B, H, W))
    with pytest.raises(ValueError, match="names an axis twice"):
        hax.rearrange(a, (C, C, ...))
    with pytest.raises(ValueError, match="Axis 'Z' not found"):
        hax.rearrange(a, ("Z", ...))
    with pytest.raises(TypeError, match="takes no keyword arguments"):
        hax.rearrange(a, (C, ...), H=3)
    with pytest.raises(TypeError, match="rearrange needs a NamedArray"):
        hax.rearrange(X, (C, ...))


def test_rearrange_string_form_delegates():
    a = _a()
    _assert_named(hax.rearrange(a, "B H W C -> C B H W"), X.transpose(3, 0, 1, 2), (C, B, H, W))


def test_shape_ops_under_jit_vmap_grad():
    def named_fn(x):
        a = hax.named(x, ("B", "H", "W", "C"))
        flat = hax.flatten_axes(a, ("W", "C"), "WC")
        top, rest = hax.split(flat, "WC", (Axis("WC", 8), Axis("R", 12)))
        merged = hax.concatenate("WC", [top, hax.rename(rest, {"R": "WC"})])
        back = hax.unflatten_axis(merged, "WC", (W, C))
        stacked = hax.stack("S", hax.unbind(back, "H"))
        return hax.rearrange(stacked, ("C", ...)).array * 2

    def pos_fn(x):
        return jnp.transpose(x, (3, 1, 0, 2)) * 2  # (C, S=H, B, W)

    np.testing.assert_allclose(named_fn(X), pos_fn(X))
    np.testing.assert_allclose(jax.jit(named_fn)(X), pos_fn(X))
    xs = np.stack([X, -X])
    np.testing.assert_allclose(jax.jit(jax.vmap(named_fn))(xs), jax.vmap(pos_fn)(xs))
    w = np.random.default_rng(1).standard_normal(pos_fn(X).shape).astype(np.float32)
    np.testing.assert_allclose(
        jax.jit(jax.grad(lambda x: jnp.sum(named_fn(x) * w)))(X),
        jax.grad(lambda x: jnp.sum(pos_fn(x) * w))(X),
    )

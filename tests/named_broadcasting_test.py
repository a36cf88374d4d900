"""jaxcore.named core: binary ops matched and broadcast by axis name, broadcast_to/arrays.

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
from jaxcore.named import Axis

# ----------------------------------------------------------------------------- binary ops


def test_binary_ops_match_axes_by_name_all_modes():
    x, y = rand(3, 4), rand(4, 3, seed=1)

    def named_fn(x, y):
        return (hax.named(x, ("batch", "embed")) * hax.named(y, ("embed", "batch")) + 1.0).array

    check_all_modes(named_fn, lambda x, y: x * y.T + 1.0, x, y)


def test_binary_broadcasting_subset_takes_the_larger_layout():
    # As in Haliax: one operand's axes must contain the other's; the result is laid out
    # like the operand that has every axis (the smaller one moves).
    x, y = rand(3, 4), rand(4, seed=1)
    out = hax.named(y, (E,)) - hax.named(x, (B, E))
    assert_named(out, y[None, :] - x, (B, E))
    z = rand(2, 3, 4, seed=2)
    out2 = hax.named(x, (B, E)) * hax.named(z, (H, B, E))
    assert_named(out2, x[None] * z, (H, B, E))
    out3 = hax.named(x.T, (E, B)) + hax.named(z, (H, B, E))
    assert_named(out3, x[None] + z, (H, B, E))

    def named_fn(x, z):
        return (
            hax.named(x, ("batch", "embed")) / (hax.named(z, ("head", "batch", "embed")) ** 2 + 1)
        ).array

    check_all_modes(named_fn, lambda x, z: x[None] / (z**2 + 1), x, z)


def test_binary_broadcasting_without_subset_raises_naming_both():
    x, y = rand(3, 4), rand(2, 4, seed=1)
    with pytest.raises(ValueError, match=r"\(batch=3, embed=4\) and \(head=2, embed=4\)"):
        hax.named(x, (B, E)) - hax.named(y, (H, E))


def test_scalar_operands_and_reflected_ops():
    x = rand(3, 4)
    a = hax.named(x, (B, E))
    assert_named(2.0 - a, 2.0 - x, (B, E))
    assert_named(a**2, x**2, (B, E))
    assert_named(2 ** hax.named(jnp.arange(3), (B,)), 2 ** np.arange(3), (B,))
    assert_named(a * jnp.float32(3), x * 3, (B, E))
    assert_named(-a, -x, (B, E))
    assert_named(abs(a), np.abs(x), (B, E))
    assert_named(a > 0, x > 0, (B, E))
    assert_named(a == a, np.ones_like(x, bool), (B, E))
    assert_named(a != 0.0, x != 0, (B, E))
    ints = hax.named(jnp.arange(12).reshape(3, 4), (B, E))
    assert_named(~ints, ~np.arange(12).reshape(3, 4), (B, E))
    assert_named(ints % 5, np.arange(12).reshape(3, 4) % 5, (B, E))
    assert_named(7 // (ints + 1), 7 // (np.arange(12).reshape(3, 4) + 1), (B, E))
    assert_named(ints << 1, np.arange(12).reshape(3, 4) << 1, (B, E))
    assert_named(
        (ints & 6) | 1 ^ ints,
        (np.arange(12).reshape(3, 4) & 6) | 1 ^ np.arange(12).reshape(3, 4),
        (B, E),
    )
    q, r = divmod(ints, 5)
    assert_named(q, np.arange(12).reshape(3, 4) // 5, (B, E))
    assert_named(r, np.arange(12).reshape(3, 4) % 5, (B, E))


def test_numpy_and_jax_left_operands_defer_to_named_ops():
    x = rand(3, 4)
    a = hax.named(x, (B, E))
    assert_named(np.float32(2) * a, 2 * x, (B, E))
    assert_named(jnp.float32(3) - a, 3 - x, (B, E))
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
    x, y = rand(3, 4), rand(3, 4, seed=1)
    named = jax.make_jaxpr(lambda x, y: (hax.named(x, (B, E)) + hax.named(y, (B, E))).array)(x, y)
    pos = jax.make_jaxpr(lambda x, y: x + y)(x, y)
    assert [e.primitive for e in named.eqns] == [e.primitive for e in pos.eqns]
    named_t = jax.make_jaxpr(lambda x, y: (hax.named(x, (B, E)) + hax.named(y, (E, B))).array)(
        x, y.T
    )
    pos_t = jax.make_jaxpr(lambda x, y: x + y.T)(x, y.T)
    assert [e.primitive for e in named_t.eqns] == [e.primitive for e in pos_t.eqns]


def _axes_subsets():
    return st.permutations(PROP_AXES).flatmap(
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
    assert_named(out, ref, result)


# ----------------------------------------------------------------------------- broadcasting


def test_broadcast_to_and_axis():
    x = rand(4)
    a = hax.named(x, (E,))
    assert_named(hax.broadcast_to(a, (B, E)), np.broadcast_to(x, (3, 4)), (B, E))
    assert_named(hax.broadcast_to(a, (E, B)), np.broadcast_to(x[:, None], (4, 3)), (E, B))
    assert_named(a.broadcast_axis(B), np.broadcast_to(x, (3, 4)), (B, E))
    y = rand(3, 4)
    b = hax.named(y, (B, E))
    assert_named(hax.broadcast_axis(b, H), np.broadcast_to(y, (2, 3, 4)), (H, B, E))
    assert_named(hax.broadcast_to(b, (E,), enforce_no_extra_axes=False), y.T, (E, B))
    assert_named(
        hax.broadcast_to(b, (H, E), ensure_order=False, enforce_no_extra_axes=False),
        np.broadcast_to(y, (2, 3, 4)),
        (H, B, E),
    )
    assert_named(hax.broadcast_to(2.0, (B,)), np.full(3, 2.0), (B,))
    assert_named(hax.broadcast_to(b, ("embed", "batch")), y.T, (E, B))  # names take sizes from b
    with pytest.raises(ValueError, match="axes \\['batch'\\] that are not in the target"):
        hax.broadcast_to(b, (E,))
    with pytest.raises(ValueError, match="Cannot broadcast axis 'embed' of size 4 to size 5"):
        hax.broadcast_to(b, (B, Axis("embed", 5)))
    with pytest.raises(ValueError, match="'head' is given by name only"):
        hax.broadcast_to(b, (B, E, "head"))
    with pytest.raises(ValueError, match="positional array of shape \\(3,\\)"):
        hax.broadcast_to(jnp.ones(3), (B,))


def test_broadcast_arrays():
    a, b = hax.named(rand(3), (B,)), hax.named(rand(4, 3, seed=1), (E, B))
    a2, b2, s = hax.broadcast_arrays(a, b, 1.0)
    assert a2.axes == (E, B) and b2.axes == (E, B) and s == 1.0
    np.testing.assert_allclose(a2.array, np.broadcast_to(np.asarray(a.array)[None, :], (4, 3)))
    c = hax.named(rand(4, seed=2), (E,))
    with pytest.raises(ValueError, match=r"\(embed=4\) and \(batch=3\)"):  # larger first
        hax.broadcast_arrays(a, c)
    # require_subset=False: the smaller operand's extra axes go in front
    a3, c3 = hax.broadcast_arrays(a, c, require_subset=False)
    assert a3.axes == (B, E) and c3.axes == (B, E)
    np.testing.assert_allclose(c3.array, np.broadcast_to(np.asarray(c.array)[None, :], (3, 4)))

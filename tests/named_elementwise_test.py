"""jaxcore.named ops: the unary/binary op table (jax.numpy elementwise ops by name).

Each named op is compared with the positional ``jax.numpy`` op on the same data (with the
second operand stored in a different axis order, so name alignment is exercised), in
eager mode and under ``jit``, ``vmap`` and ``grad``; error paths must name the axis.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _named_test_util import BIG, COMPLEX, F1, F2, I1, I2, INTS, SIGNED, UNIT, B, E, assert_named_op

import jaxcore.named as hax
from jaxcore.named import Axis, NamedArray

_INT_UNARY = {"bitwise_count", "bitwise_invert", "bitwise_not", "invert"}
_BIG_UNARY = {"arccosh"}
_COMPLEX_UNARY = {"angle", "conj", "conjugate", "imag", "real", "iscomplex", "isreal"}
_SIGNED_UNARY = {
    "abs",
    "absolute",
    "sign",
    "signbit",
    "fabs",
    "fix",
    "trunc",
    "rint",
    "around",
    "ceil",
    "floor",
    "negative",
    "positive",
    "cbrt",
    "square",
    "sinc",
    "isneginf",
    "isposinf",
    "isfinite",
    "isinf",
    "isnan",
    "logical_not",
    "copy",
}
_NONDIFF_UNARY = _INT_UNARY | {
    "ceil",
    "floor",
    "fix",
    "trunc",
    "rint",
    "around",
    "sign",
    "signbit",
    "isfinite",
    "isinf",
    "isnan",
    "isneginf",
    "isposinf",
    "logical_not",
    "iscomplex",
    "isreal",
    "frexp",
    "i0",
}

_POS_REF = {"fix": jnp.trunc, "rsqrt": lambda x: 1 / jnp.sqrt(x)}


def _unary_input(name):
    if name in _INT_UNARY:
        return INTS
    if name in _BIG_UNARY:
        return BIG
    if name in _COMPLEX_UNARY:
        return COMPLEX
    if name in _SIGNED_UNARY:
        return SIGNED
    return UNIT


def _ref_fn(name):
    return _POS_REF.get(name) or getattr(jnp, name)


def _np_ref(name):
    """The NumPy function for an op (an independent reference that needs no compiling)."""
    # numpy.fix is deprecated from NumPy 2.5 (the newest lock's); trunc is the same function.
    return {"rsqrt": lambda x: 1 / np.sqrt(x), "fix": np.trunc}.get(name) or getattr(np, name)


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def test_tables_cover_the_spec_lists():
    assert len(hax.UNARY_OPS) == 62 and len(hax.BINARY_OPS) == 37
    for name in hax.UNARY_OPS + hax.BINARY_OPS:
        fn = getattr(hax, name)
        owner = "jax.lax" if name == "rsqrt" else "jax.numpy"  # jnp has no rsqrt
        assert fn.__name__ == name and f"{owner}.{name}" in fn.__doc__
        # Real defs (not generated at import): go-to-definition and help() find them.
        assert fn.__module__ in ("jaxcore.named._unary", "jaxcore.named._binary")


@pytest.mark.parametrize("name", hax.UNARY_OPS)
def test_unary_op_eager(name):
    x = _unary_input(name)
    out = getattr(hax, name)(hax.named(x, (B, E)))
    for o, r in zip(_as_tuple(out), _as_tuple(_np_ref(name)(x))):
        assert_named_op(o, r, (B, E))


def test_unary_ops_pass_positional_arrays_through():
    for name in ("exp", "frexp", "bitwise_not"):
        x = jnp.asarray(_unary_input(name))
        for o, r in zip(_as_tuple(getattr(hax, name)(x)), _as_tuple(_ref_fn(name)(x))):
            assert not isinstance(o, NamedArray)
            np.testing.assert_allclose(o, r)


def test_unary_ops_under_jit_vmap_grad():
    names = [n for n in hax.UNARY_OPS if _unary_input(n) is UNIT]

    def named_all(x):
        a = hax.named(x, ("batch", "embed"))
        return [o.array for n in names for o in _as_tuple(getattr(hax, n)(a))]

    def pos_all(x):
        return [o for n in names for o in _as_tuple(_ref_fn(n)(x))]

    for got, ref in zip(jax.jit(named_all)(UNIT), pos_all(UNIT)):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    xs = np.stack([UNIT, UNIT * 0.5])
    rows = [pos_all(row) for row in xs]  # eager reference, row by row
    for k, got in enumerate(jax.jit(jax.vmap(named_all))(xs)):
        np.testing.assert_allclose(got, np.stack([r[k] for r in rows]), rtol=1e-5, atol=1e-6)
    # grad: the named program's gradient jaxpr is the positional one, op for op (so it is
    # numerically identical once compiled); one op is also checked numerically.
    diff = [n for n in names if n not in _NONDIFF_UNARY]
    pos_op = {**{n: _ref_fn(n) for n in diff}, "rsqrt": jax.lax.rsqrt}

    def named_loss(x):
        return sum(jnp.sum(getattr(hax, n)(hax.named(x, ("batch", "embed"))).array) for n in diff)

    def pos_loss(x):
        return sum(jnp.sum(pos_op[n](x)) for n in diff)

    assert str(jax.make_jaxpr(jax.grad(named_loss))(UNIT)) == str(
        jax.make_jaxpr(jax.grad(pos_loss))(UNIT)
    )
    g = jax.grad(lambda x: jnp.sum(hax.tanh(hax.named(x, ("batch", "embed"))).array))(UNIT)
    np.testing.assert_allclose(g, 1 - np.tanh(UNIT) ** 2, rtol=1e-5)


def test_round_and_ndim():
    x = SIGNED * 10
    assert_named_op(hax.round(hax.named(x, (B, E)), 1), jnp.round(x, 1), (B, E))
    assert_named_op(hax.named(x, (B, E)).round(2), jnp.round(x, 2), (B, E))
    np.testing.assert_allclose(hax.round(jnp.asarray(x)), jnp.round(x))
    assert hax.ndim(hax.named(x, (B, E))) == 2 and hax.ndim(jnp.zeros((1, 2, 3))) == 3


_INT_BINARY = {
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bitwise_left_shift",
    "bitwise_right_shift",
    "left_shift",
    "right_shift",
}
_NONDIFF_BINARY = _INT_BINARY | {
    "equal",
    "not_equal",
    "greater",
    "greater_equal",
    "less",
    "less_equal",
    "logical_and",
    "logical_or",
    "logical_xor",
    "floor_divide",
    "divmod",
    "nextafter",
    "mod",
    "remainder",
    "fmod",
}


def _binary_inputs(name):
    return (I1, I2) if name in _INT_BINARY else (F1, F2)


@pytest.mark.parametrize("name", hax.BINARY_OPS)
def test_binary_op_eager_aligns_by_name(name):
    x, y = _binary_inputs(name)
    ref = _np_ref(name)(x, y)
    # y is stored as (embed, batch): the op must transpose it back by name
    out = getattr(hax, name)(hax.named(x, (B, E)), hax.named(y.T, (E, B)))
    for o, r in zip(_as_tuple(out), _as_tuple(ref)):
        assert_named_op(o, r, (B, E))


@pytest.mark.parametrize("name", ["subtract", "power", "divmod", "left_shift", "less"])
def test_binary_op_with_scalars(name):
    x, y = _binary_inputs(name)
    s = y[0, 0]
    for o, r in zip(
        _as_tuple(getattr(hax, name)(hax.named(x, (B, E)), s)), _as_tuple(getattr(jnp, name)(x, s))
    ):
        assert_named_op(o, r, (B, E))
    for o, r in zip(
        _as_tuple(getattr(hax, name)(s, hax.named(x, (B, E)))), _as_tuple(getattr(jnp, name)(s, x))
    ):
        assert_named_op(o, r, (B, E))
    np.testing.assert_allclose(getattr(hax, name)(s, s), getattr(jnp, name)(s, s))


def test_binary_ops_under_jit_vmap_grad():
    names = [n for n in hax.BINARY_OPS if n not in _INT_BINARY]

    def named_all(x, y):
        a, b = hax.named(x, ("batch", "embed")), hax.named(y, ("embed", "batch"))
        return [o.array for n in names for o in _as_tuple(getattr(hax, n)(a, b))]

    def pos_all(x, y):
        return [o for n in names for o in _as_tuple(getattr(jnp, n)(x, y.T))]

    for got, ref in zip(jax.jit(named_all)(F1, F2.T), pos_all(F1, F2.T)):
        np.testing.assert_allclose(got, ref, rtol=1e-5)
    xs, ys = np.stack([F1, F1 + 1]), np.stack([F2.T, F2.T * 2])
    rows = [pos_all(x, y) for x, y in zip(xs, ys)]  # eager reference, row by row
    for k, got in enumerate(jax.jit(jax.vmap(named_all))(xs, ys)):
        np.testing.assert_allclose(got, np.stack([r[k] for r in rows]), rtol=1e-5)
    diff = [n for n in names if n not in _NONDIFF_BINARY]

    def loss(fn_of):
        return lambda x, y: sum(jnp.sum(fn_of(n, x, y)) for n in diff)

    # grad: the named gradient jaxpr is the positional one, op for op; one op numerically.
    named_loss = loss(
        lambda n, x, y: (
            getattr(hax, n)(
                hax.named(x, ("batch", "embed")), hax.named(y, ("embed", "batch"))
            ).array
        )
    )
    pos_loss = loss(lambda n, x, y: getattr(jnp, n)(x, jnp.transpose(y)))
    assert str(jax.make_jaxpr(jax.grad(named_loss, (0, 1)))(F1, F2.T)) == str(
        jax.make_jaxpr(jax.grad(pos_loss, (0, 1)))(F1, F2.T)
    )
    gx, gy = jax.grad(
        lambda x, y: jnp.sum(hax.multiply(hax.named(x, (B, E)), hax.named(y, (E, B))).array), (0, 1)
    )(F1, F2.T)
    np.testing.assert_allclose(gx, F2, rtol=1e-6)
    np.testing.assert_allclose(gy, F1.T, rtol=1e-6)


def test_binary_op_errors():
    with pytest.raises(ValueError, match="Axis 'embed' has mismatched sizes 4 and 2"):
        hax.add(hax.zeros((B, E)), hax.zeros((Axis("embed", 2),)))
    with pytest.raises(ValueError, match="positional array of shape \\(3, 4\\)"):
        hax.maximum(jnp.zeros((3, 4)), hax.zeros((B, E)))

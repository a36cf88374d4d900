"""jaxcore.named ops: the unary/binary op table, reductions, axis-wise and other ops.

Each named op is compared with the positional ``jax.numpy`` op on the same data (with the
second operand stored in a different axis order, so name alignment is exercised), in
eager mode and under ``jit``, ``vmap`` and ``grad``; error paths must name the axis.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcore.named as hax
from jaxcore.named import Axis, NamedArray

B, E = hax.make_axes(batch=3, embed=4)

# Inputs per domain: (positional array, how to build it).
_RNG = np.random.default_rng(0)
_UNIT = _RNG.uniform(0.1, 0.9, (3, 4)).astype(np.float32)  # safe for every float op
_SIGNED = _RNG.uniform(-2.0, 2.0, (3, 4)).astype(np.float32)
_BIG = _RNG.uniform(1.5, 3.0, (3, 4)).astype(np.float32)
_INTS = _RNG.integers(0, 100, (3, 4)).astype(np.int32)
_COMPLEX = (_SIGNED + 1j * _UNIT).astype(np.complex64)

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
        return _INTS
    if name in _BIG_UNARY:
        return _BIG
    if name in _COMPLEX_UNARY:
        return _COMPLEX
    if name in _SIGNED_UNARY:
        return _SIGNED
    return _UNIT


def _ref_fn(name):
    return _POS_REF.get(name) or getattr(jnp, name)


def _np_ref(name):
    """The NumPy function for an op (an independent reference that needs no compiling)."""
    return {"rsqrt": lambda x: 1 / np.sqrt(x)}.get(name) or getattr(np, name)


def _with_nan(base, name, at):
    """A copy of ``base``, with a NaN at index ``at`` for the ``nan*`` variant ``name``."""
    x = np.array(base)
    if name.startswith("nan"):
        x[at] = np.nan
    return x


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _assert_named(out, ref, axes, rtol=1e-5, atol=1e-6):
    assert isinstance(out, NamedArray), type(out)
    assert out.axes == tuple(axes), (out.axes, axes)
    np.testing.assert_allclose(np.asarray(out.array), np.asarray(ref), rtol=rtol, atol=atol)


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
        _assert_named(o, r, (B, E))


def test_unary_ops_pass_positional_arrays_through():
    for name in ("exp", "frexp", "bitwise_not"):
        x = jnp.asarray(_unary_input(name))
        for o, r in zip(_as_tuple(getattr(hax, name)(x)), _as_tuple(_ref_fn(name)(x))):
            assert not isinstance(o, NamedArray)
            np.testing.assert_allclose(o, r)


def test_unary_ops_under_jit_vmap_grad():
    names = [n for n in hax.UNARY_OPS if _unary_input(n) is _UNIT]

    def named_all(x):
        a = hax.named(x, ("batch", "embed"))
        return [o.array for n in names for o in _as_tuple(getattr(hax, n)(a))]

    def pos_all(x):
        return [o for n in names for o in _as_tuple(_ref_fn(n)(x))]

    for got, ref in zip(jax.jit(named_all)(_UNIT), pos_all(_UNIT)):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    xs = np.stack([_UNIT, _UNIT * 0.5])
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

    assert str(jax.make_jaxpr(jax.grad(named_loss))(_UNIT)) == str(
        jax.make_jaxpr(jax.grad(pos_loss))(_UNIT)
    )
    g = jax.grad(lambda x: jnp.sum(hax.tanh(hax.named(x, ("batch", "embed"))).array))(_UNIT)
    np.testing.assert_allclose(g, 1 - np.tanh(_UNIT) ** 2, rtol=1e-5)


def test_round_and_ndim():
    x = _SIGNED * 10
    _assert_named(hax.round(hax.named(x, (B, E)), 1), jnp.round(x, 1), (B, E))
    _assert_named(hax.named(x, (B, E)).round(2), jnp.round(x, 2), (B, E))
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
_F1 = _RNG.uniform(0.5, 2.0, (3, 4)).astype(np.float32)
_F2 = _RNG.uniform(0.5, 2.0, (3, 4)).astype(np.float32)
_I1 = _RNG.integers(0, 64, (3, 4)).astype(np.int32)
_I2 = _RNG.integers(0, 5, (3, 4)).astype(np.int32)


def _binary_inputs(name):
    return (_I1, _I2) if name in _INT_BINARY else (_F1, _F2)


@pytest.mark.parametrize("name", hax.BINARY_OPS)
def test_binary_op_eager_aligns_by_name(name):
    x, y = _binary_inputs(name)
    ref = _np_ref(name)(x, y)
    # y is stored as (embed, batch): the op must transpose it back by name
    out = getattr(hax, name)(hax.named(x, (B, E)), hax.named(y.T, (E, B)))
    for o, r in zip(_as_tuple(out), _as_tuple(ref)):
        _assert_named(o, r, (B, E))


@pytest.mark.parametrize("name", ["subtract", "power", "divmod", "left_shift", "less"])
def test_binary_op_with_scalars(name):
    x, y = _binary_inputs(name)
    s = y[0, 0]
    for o, r in zip(
        _as_tuple(getattr(hax, name)(hax.named(x, (B, E)), s)), _as_tuple(getattr(jnp, name)(x, s))
    ):
        _assert_named(o, r, (B, E))
    for o, r in zip(
        _as_tuple(getattr(hax, name)(s, hax.named(x, (B, E)))), _as_tuple(getattr(jnp, name)(s, x))
    ):
        _assert_named(o, r, (B, E))
    np.testing.assert_allclose(getattr(hax, name)(s, s), getattr(jnp, name)(s, s))


def test_binary_ops_under_jit_vmap_grad():
    names = [n for n in hax.BINARY_OPS if n not in _INT_BINARY]

    def named_all(x, y):
        a, b = hax.named(x, ("batch", "embed")), hax.named(y, ("embed", "batch"))
        return [o.array for n in names for o in _as_tuple(getattr(hax, n)(a, b))]

    def pos_all(x, y):
        return [o for n in names for o in _as_tuple(getattr(jnp, n)(x, y.T))]

    for got, ref in zip(jax.jit(named_all)(_F1, _F2.T), pos_all(_F1, _F2.T)):
        np.testing.assert_allclose(got, ref, rtol=1e-5)
    xs, ys = np.stack([_F1, _F1 + 1]), np.stack([_F2.T, _F2.T * 2])
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
    assert str(jax.make_jaxpr(jax.grad(named_loss, (0, 1)))(_F1, _F2.T)) == str(
        jax.make_jaxpr(jax.grad(pos_loss, (0, 1)))(_F1, _F2.T)
    )
    gx, gy = jax.grad(
        lambda x, y: jnp.sum(hax.multiply(hax.named(x, (B, E)), hax.named(y, (E, B))).array), (0, 1)
    )(_F1, _F2.T)
    np.testing.assert_allclose(gx, _F2, rtol=1e-6)
    np.testing.assert_allclose(gy, _F1.T, rtol=1e-6)


def test_binary_op_errors():
    with pytest.raises(ValueError, match="Axis 'embed' has mismatched sizes 4 and 2"):
        hax.add(hax.zeros((B, E)), hax.zeros((Axis("embed", 2),)))
    with pytest.raises(ValueError, match="positional array of shape \\(3, 4\\)"):
        hax.maximum(jnp.zeros((3, 4)), hax.zeros((B, E)))


# ----------------------------------------------------------------------------- reductions

_REDUCTIONS = [
    "sum",
    "prod",
    "mean",
    "max",
    "min",
    "amax",
    "amin",
    "all",
    "any",
    "std",
    "var",
    "nansum",
    "nanprod",
    "nanmean",
    "nanmax",
    "nanmin",
    "nanstd",
    "nanvar",
    "ptp",
]


def _reduction_ref(name, x, axis, where=None, **kw):
    """NumPy reference; masked max/min use the dtype's extreme as ``initial`` (as hax does)."""
    fn = getattr(np, name)
    if name == "ptp" and where is not None:
        return np.max(x, axis=axis, where=where, initial=-np.inf) - np.min(
            x, axis=axis, where=where, initial=np.inf
        )
    if where is None:
        return fn(x, axis=axis, **kw)
    if name in ("max", "min", "amax", "amin", "nanmax", "nanmin"):
        kw["initial"] = -np.inf if "max" in name else np.inf
    return fn(x, axis=axis, where=where, **kw)


@pytest.mark.parametrize("name", _REDUCTIONS)
def test_reductions(name):
    x = _with_nan(_SIGNED, name, (0, 1))
    if name in ("all", "any"):
        x = x > 0
    a = hax.named(x, (B, E))
    fn = getattr(hax, name)
    _assert_named(fn(a), _reduction_ref(name, x, None), ())
    _assert_named(fn(a, "batch"), _reduction_ref(name, x, 0), (E,))
    # `where` is matched by name: give it in (embed, batch) order
    mask = np.array(_UNIT > 0.3)
    mask[:, 0] = True
    got = fn(a, "embed", where=hax.named(mask.T, (E, B)))
    _assert_named(got, _reduction_ref(name, x, 1, where=mask), (B,))
    if name in ("std", "var", "nanstd", "nanvar"):
        _assert_named(fn(a, "batch", ddof=1), _reduction_ref(name, x, 0, ddof=1), (E,))
    if name in ("sum", "mean", "nanprod"):
        out = fn(a, "batch", dtype=jnp.float16)
        assert out.dtype == jnp.float16
        _assert_named(
            out, _reduction_ref(name, x, 0, dtype=jnp.float16), (E,), rtol=1e-2, atol=1e-2
        )


def test_reduction_axis_forms():
    a = hax.named(_SIGNED, (B, E))
    _assert_named(hax.sum(a, E), _SIGNED.sum(1), (B,))
    _assert_named(hax.sum(a, {"batch": None}), _SIGNED.sum(0), (E,))
    _assert_named(hax.sum(a, {"batch": 3}), _SIGNED.sum(0), (E,))
    _assert_named(hax.sum(a, [B, "embed"]), _SIGNED.sum(), ())
    _assert_named(hax.prod(a, ("embed", "batch")), _SIGNED.prod(), (), rtol=1e-4)
    _assert_named(
        hax.max(hax.named(_INTS, (B, E)), "batch", where=hax.named(_INTS > 50, (B, E))),
        np.max(_INTS, 0, where=_INTS > 50, initial=np.iinfo(np.int32).min),
        (E,),
    )
    _assert_named(
        hax.min(hax.named(_INTS > 50, (B, E)), "batch", where=hax.named(_INTS > 20, (B, E))),
        np.min(_INTS > 50, 0, where=_INTS > 20, initial=True),
        (E,),
    )


def test_reductions_methods_and_modes():
    x = _SIGNED
    a = hax.named(x, (B, E))
    _assert_named(a.sum("batch"), x.sum(0), (E,))
    _assert_named(a.mean(), x.mean(), ())
    _assert_named(a.max("embed"), x.max(1), (B,))
    _assert_named(a.min("embed"), x.min(1), (B,))
    _assert_named(a.prod("batch"), x.prod(0), (E,))
    _assert_named(a.product("batch"), x.prod(0), (E,))
    _assert_named(a.std("batch", ddof=1), x.std(0, ddof=1), (E,))
    _assert_named(a.var("batch"), x.var(0), (E,))
    _assert_named(a.ptp("embed"), np.ptp(x, 1), (B,))
    _assert_named((a > 0).all("embed"), (x > 0).all(1), (B,))
    _assert_named((a > 0).any("embed"), (x > 0).any(1), (B,))

    def named_fn(x, m):
        a = hax.named(x, ("batch", "embed"))
        return (
            hax.sum(a, "batch")
            + hax.mean(a, "batch", where=hax.named(m, ("batch", "embed")))
            + hax.var(a, "batch")
            + hax.max(a, "batch")
        ).array

    def pos_fn(x, m):
        return x.sum(0) + jnp.mean(x, 0, where=m) + jnp.var(x, 0) + jnp.max(x, 0)

    m = _UNIT > 0.2
    m[0] = True
    np.testing.assert_allclose(jax.jit(named_fn)(x, m), pos_fn(x, m), rtol=1e-5)
    np.testing.assert_allclose(
        jax.vmap(named_fn, (0, None))(np.stack([x, -x]), m),
        jax.vmap(pos_fn, (0, None))(np.stack([x, -x]), m),
        rtol=1e-5,
    )
    np.testing.assert_allclose(
        jax.grad(lambda x: named_fn(x, m).sum())(x),
        jax.grad(lambda x: pos_fn(x, m).sum())(x),
        rtol=1e-5,
    )


def test_reduction_errors():
    a = hax.zeros((B, E))
    with pytest.raises(
        ValueError, match="Axis 'head' not found in array with axes \\(batch=3, embed=4\\)"
    ):
        hax.sum(a, "head")
    with pytest.raises(ValueError, match="names an axis twice"):
        hax.sum(a, ("batch", "batch"))
    with pytest.raises(ValueError, match="'embed' has size 4 in the array but 5"):
        hax.mean(a, Axis("embed", 5))
    with pytest.raises(ValueError, match="`where` must be a NamedArray"):
        hax.sum(a, "batch", where=jnp.ones((3, 4), bool))
    with pytest.raises(ValueError, match="axes \\['head'\\] that are not in the target"):
        hax.sum(a, "batch", where=hax.ones((B, E, Axis("head", 2)), dtype=bool))
    with pytest.raises(TypeError, match="sum needs a NamedArray or an array, got str"):
        hax.sum("x")
    with pytest.raises(TypeError, match="a positional array takes an integer axis, got 'batch'"):
        hax.sum(jnp.zeros(3), "batch")


def test_reductions_take_plain_arrays_and_pytrees_like_haliax():
    # Haliax passes a positional array straight to jax.numpy (axis is then positional)
    x = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(hax.sum(jnp.asarray(x), axis=1), x.sum(axis=1))
    assert bool(hax.all(jnp.asarray(x) >= 0)) and not bool(hax.any(jnp.asarray(x) > 11))
    assert int(hax.argmax(jnp.asarray(x))) == 11
    np.testing.assert_array_equal(hax.cumsum(jnp.asarray(x), axis=0), np.cumsum(x, axis=0))
    m = jnp.asarray(x) > 5
    assert float(hax.sum(jnp.asarray(x), where=m)) == x[x > 5].sum()
    # a pytree of NamedArrays (and arrays) is reduced leaf by leaf
    a = hax.named(jnp.asarray(x), (B, E))
    out = hax.sum({"w": a, "b": jnp.ones(2)})
    assert out["w"].axes == () and float(out["w"].array) == x.sum()
    assert float(out["b"]) == 2.0
    per_axis = hax.mean([a, a * 2], "embed")
    np.testing.assert_allclose(per_axis[1].array, 2 * x.mean(axis=1))
    assert per_axis[0].axes == (B,)


@pytest.mark.parametrize("name", ["argmax", "argmin", "nanargmax", "nanargmin"])
def test_arg_reductions(name):
    x = _with_nan(_SIGNED, name, (1, 2))
    a = hax.named(x, (B, E))
    fn, ref = getattr(hax, name), getattr(jnp, name)
    _assert_named(fn(a, "embed"), ref(x, axis=1), (B,))
    _assert_named(fn(a, "batch"), ref(x, axis=0), (E,))
    _assert_named(fn(a, None), ref(x), ())
    with pytest.raises(TypeError, match=f"{name} takes a single axis"):
        fn(a, ("batch", "embed"))
    with pytest.raises(ValueError, match="Axis 'nope' not found"):
        fn(a, "nope")
    if name == "argmax":
        _assert_named(a.argmax("embed"), ref(x, axis=1), (B,))
        jitted = jax.jit(lambda x: fn(hax.named(x, (B, E)), "batch").array)
        np.testing.assert_array_equal(jitted(x), ref(x, axis=0))
        vmapped = jax.vmap(lambda x: fn(hax.named(x, (B, E)), "embed").array)(np.stack([x, -x]))
        np.testing.assert_array_equal(
            vmapped, jax.vmap(lambda x: ref(x, axis=1))(np.stack([x, -x]))
        )
    if name == "argmin":
        _assert_named(a.argmin("embed"), ref(x, axis=1), (B,))


# ----------------------------------------------------------------------------- axis-wise


@pytest.mark.parametrize("name", ["cumsum", "cumprod", "nancumsum", "nancumprod", "sort"])
def test_axiswise(name):
    x = _with_nan(_BIG, name, (1, 1))
    a = hax.named(x, (B, E))
    fn, ref = getattr(hax, name), getattr(jnp, name)
    _assert_named(fn(a, "embed"), ref(x, axis=1), (B, E))
    _assert_named(fn(a, B), ref(x, axis=0), (B, E))
    if name != "sort":
        out = fn(a, "embed", dtype=jnp.float16)
        assert out.dtype == jnp.float16
    with pytest.raises(ValueError, match="Axis 'nope' not found"):
        fn(a, "nope")


def test_axiswise_methods_and_modes():
    x = _SIGNED
    a = hax.named(x, (B, E))
    _assert_named(a.cumsum("embed"), np.cumsum(x, 1), (B, E))
    _assert_named(a.cumprod("batch"), np.cumprod(x, 0), (B, E), rtol=1e-5)
    _assert_named(a.sort("embed"), np.sort(x, 1), (B, E))
    _assert_named(a.argsort("embed"), np.argsort(x, 1), (B, E))
    _assert_named(hax.argsort(a, "batch", stable=True), np.argsort(x, 0, kind="stable"), (B, E))
    flat = hax.argsort(a, None)
    assert not isinstance(flat, NamedArray)
    np.testing.assert_array_equal(flat, np.argsort(x, axis=None))
    f = lambda x: (
        (
            hax.cumsum(hax.named(x, ("batch", "embed")), "embed")
            * hax.sort(hax.named(x, ("batch", "embed")), "batch")
        ).array
    )
    g = lambda x: jnp.cumsum(x, 1) * jnp.sort(x, 0)
    np.testing.assert_allclose(jax.jit(f)(x), g(x), rtol=1e-6)
    np.testing.assert_allclose(
        jax.vmap(f)(np.stack([x, x * 2])), jax.vmap(g)(np.stack([x, x * 2])), rtol=1e-6
    )
    np.testing.assert_allclose(
        jax.grad(lambda x: f(x).sum())(x), jax.grad(lambda x: g(x).sum())(x), rtol=1e-5
    )


# ----------------------------------------------------------------------------- misc


def test_where_and_clip():
    c, x, y = _SIGNED > 0, _SIGNED, _BIG
    out = hax.where(hax.named(c, (B, E)), hax.named(x.T, (E, B)), hax.named(y, (B, E)))
    _assert_named(out, np.where(c, x, y), (B, E))
    out = hax.where(hax.named(c[:, 0], (B,)), hax.named(x, (B, E)), 0.0)
    _assert_named(out, np.where(c[:, :1], x, 0.0), (B, E))
    K = Axis("k", 12)
    idx = hax.where(hax.named(c, (B, E)), fill_value=-1, new_axis=K)
    ref = np.nonzero(c)
    for got, r in zip(idx, ref):
        _assert_named(got, np.pad(r, (0, 12 - len(r)), constant_values=-1), (K,))
    with pytest.raises(ValueError, match="needs both x and y"):
        hax.where(hax.named(c, (B, E)), 1.0)
    with pytest.raises(ValueError, match="needs both fill_value and new_axis"):
        hax.where(hax.named(c, (B, E)))
    lo = hax.named(np.full(4, -0.5, np.float32), (E,))
    _assert_named(hax.clip(hax.named(x, (B, E)), lo, 0.5), np.clip(x, -0.5, 0.5), (B, E))
    _assert_named(hax.named(x, (B, E)).clip(None, 0.1), np.minimum(x, 0.1), (B, E))
    with pytest.raises(ValueError, match="at least one of a_min and a_max"):
        hax.clip(hax.named(x, (B, E)), None, None)
    with pytest.raises(ValueError, match="'embed' has mismatched sizes 4 and 2"):
        hax.where(hax.named(c, (B, E)), hax.zeros((Axis("embed", 2),)), 0.0)

    def named_fn(x, y):
        return hax.where(
            hax.named(x, ("batch", "embed")) > 0,
            hax.named(x, ("batch", "embed")),
            hax.clip(hax.named(y, ("embed", "batch")), 1.6, 2.5),
        ).array

    pos_fn = lambda x, y: jnp.where(x > 0, x, jnp.clip(y.T, 1.6, 2.5))
    np.testing.assert_allclose(jax.jit(named_fn)(x, y.T), pos_fn(x, y.T))
    np.testing.assert_allclose(
        jax.vmap(named_fn)(np.stack([x, -x]), np.stack([y.T, y.T])),
        jax.vmap(pos_fn)(np.stack([x, -x]), np.stack([y.T, y.T])),
    )
    for a, b in zip(
        jax.grad(lambda x, y: named_fn(x, y).sum(), (0, 1))(x, y.T),
        jax.grad(lambda x, y: pos_fn(x, y).sum(), (0, 1))(x, y.T),
    ):
        np.testing.assert_allclose(a, b)


def test_isclose_family():
    x = _SIGNED
    a = hax.named(x, (B, E))
    b = hax.named((x + 1e-7).T, (E, B))
    _assert_named(hax.isclose(a, b), np.isclose(x, x + 1e-7), (B, E))
    assert bool(hax.allclose(a, b))
    assert not bool(hax.allclose(a, b + 1.0))
    assert bool(hax.allclose(a, hax.named(x.T, (E, B)) + 0.01, atol=0.02))
    nan = hax.named(np.array([np.nan, 1.0], np.float32), "k")
    assert bool(hax.allclose(nan, nan, equal_nan=True)) and not bool(hax.allclose(nan, nan))
    assert bool(hax.array_equal(a, hax.named(x.T, (E, B))))
    assert not bool(hax.array_equal(a, hax.named(x.T + 1, (E, B))))
    assert not bool(hax.array_equal(a, hax.named(x[:, :1], (B, Axis("embed", 1)))))
    assert not bool(hax.array_equal(a, x))
    assert bool(hax.array_equal(jnp.ones(2), jnp.ones(2)))
    row = hax.named(x[0], (E,))
    assert bool(hax.array_equiv(hax.broadcast_axis(row, B), row))
    assert not bool(hax.array_equiv(a, row))
    assert not bool(hax.array_equiv(a, hax.zeros((Axis("embed", 2),))))


def test_top_k():
    x = _SIGNED
    a = hax.named(x, (B, E))
    vals, idx = hax.top_k(a, "embed", 2)
    ref_v, ref_i = jax.lax.top_k(x, 2)
    _assert_named(vals, ref_v, (B, Axis("embed", 2)))
    _assert_named(idx, ref_i, (B, Axis("embed", 2)))
    K = Axis("k", 2)
    vals, idx = hax.top_k(a, "batch", 2, new_axis=K)
    ref_v, ref_i = jax.lax.top_k(x.T, 2)
    _assert_named(vals, ref_v.T, (K, E))
    _assert_named(idx, ref_i.T, (K, E))
    assert hax.top_k(a, "batch", 2, new_axis="best")[0].axes == (Axis("best", 2), E)
    with pytest.raises(ValueError, match="k=5 is out of range for axis 'embed' of size 4"):
        hax.top_k(a, "embed", 5)
    with pytest.raises(ValueError, match="axis Axis\\('k', 2\\) must have size 3"):
        hax.top_k(a, "embed", 3, new_axis=K)
    g = jax.grad(lambda x: hax.top_k(hax.named(x, (B, E)), "embed", 2)[0].array.sum())(x)
    np.testing.assert_allclose(g, jax.grad(lambda x: jax.lax.top_k(x, 2)[0].sum())(x))


def test_nonzero_searchsorted_bincount():
    m = np.array([[0, 1, 0, 2], [3, 0, 0, 0], [0, 0, 4, 0]])
    N = Axis("n", 5)
    rows, cols = hax.nonzero(hax.named(m, (B, E)), size=N, fill_value=0)
    _assert_named(rows, [0, 0, 1, 2, 0], (N,))
    _assert_named(cols, [1, 3, 0, 2, 0], (N,))
    with pytest.raises(TypeError, match="size=Axis"):
        hax.nonzero(hax.named(m, (B, E)), size=5)
    sorted_ = hax.named(np.array([1.0, 2.0, 4.0, 8.0], np.float32), (E,))
    v = hax.named(np.array([[0.5, 3.0], [8.0, 9.0]], np.float32), ("p", "q"))
    _assert_named(
        hax.searchsorted(sorted_, v),
        np.searchsorted([1, 2, 4, 8], [[0.5, 3.0], [8.0, 9.0]]),
        v.axes,
    )
    _assert_named(
        hax.searchsorted(sorted_, v, side="right"),
        np.searchsorted([1, 2, 4, 8], [[0.5, 3.0], [8.0, 9.0]], side="right"),
        v.axes,
    )
    unsorted = hax.named(np.array([4.0, 1.0, 8.0, 2.0], np.float32), (E,))
    sorter = hax.named(np.argsort([4.0, 1.0, 8.0, 2.0]), (E,))
    _assert_named(
        hax.searchsorted(unsorted, v, sorter=sorter),
        np.searchsorted(
            [4.0, 1.0, 8.0, 2.0], [[0.5, 3.0], [8.0, 9.0]], sorter=np.argsort([4.0, 1.0, 8.0, 2.0])
        ),
        v.axes,
    )
    np.testing.assert_array_equal(hax.searchsorted(sorted_, jnp.array([3.0])), [2])
    with pytest.raises(ValueError, match="one-dimensional `a`, got axes \\(batch=3, embed=4\\)"):
        hax.searchsorted(hax.zeros((B, E)), v)
    with pytest.raises(ValueError, match="one-dimensional sorter"):
        hax.searchsorted(sorted_, v, sorter=hax.zeros((B, E), dtype=jnp.int32))
    C = Axis("counts", 6)
    xs = np.array([[0, 1, 1, 5], [2, 2, 2, 0], [1, 0, 3, 3]])
    _assert_named(
        hax.bincount(hax.named(xs, (B, E)), C), np.bincount(xs.ravel(), minlength=6), (C,)
    )
    w = _UNIT
    _assert_named(
        hax.bincount(hax.named(xs, (B, E)), C, weights=hax.named(w.T, (E, B))),
        np.bincount(xs.ravel(), weights=w.ravel(), minlength=6),
        (C,),
        rtol=1e-5,
    )
    _assert_named(
        hax.bincount(hax.named(xs, (B, E)), C, weights=2.0),
        2 * np.bincount(xs.ravel(), minlength=6),
        (C,),
    )
    with pytest.raises(ValueError, match="minlength=7 exceeds the size 6 of axis 'counts'"):
        hax.bincount(hax.named(xs, (B, E)), C, minlength=7)
    with pytest.raises(TypeError, match="needs an Axis for Counts"):
        hax.bincount(hax.named(xs, (B, E)), 6)
    with pytest.raises(ValueError, match="weights must be a NamedArray or a scalar"):
        hax.bincount(hax.named(xs, (B, E)), C, weights=np.ones(12))
    f = jax.jit(lambda xs: hax.bincount(hax.named(xs, ("batch", "embed")), C).array)
    np.testing.assert_array_equal(f(xs), np.bincount(xs.ravel(), minlength=6))


def test_pad_trace_tril_triu():
    x = _SIGNED
    a = hax.named(x, (B, E))
    _assert_named(hax.pad(a, {"embed": (1, 2)}), np.pad(x, ((0, 0), (1, 2))), (B, Axis("embed", 7)))
    _assert_named(
        hax.pad(a, {B: 1}, constant_values=hax.named(jnp.float32(5), ())),
        np.pad(x, ((1, 1), (0, 0)), constant_values=5),
        (Axis("batch", 5), E),
    )
    _assert_named(
        hax.pad(a, {"embed": (0, 2)}, mode="edge"),
        np.pad(x, ((0, 0), (0, 2)), mode="edge"),
        (B, Axis("embed", 6)),
    )
    with pytest.raises(ValueError, match="widths for axis 'embed' must be non-negative"):
        hax.pad(a, {"embed": (-1, 0)})
    with pytest.raises(ValueError, match="constant_values must be a scalar"):
        hax.pad(a, {"embed": 1}, constant_values=hax.ones((B,)))
    sq = hax.named(_RNG.standard_normal((2, 3, 3)).astype(np.float32), ("h", "r", "c"))
    _assert_named(
        hax.trace(sq, "r", "c"), np.trace(np.asarray(sq.array), axis1=1, axis2=2), (Axis("h", 2),)
    )
    _assert_named(
        sq.trace("c", "h", offset=0),
        np.trace(np.asarray(sq.array), axis1=2, axis2=0),
        (Axis("r", 3),),
    )
    with pytest.raises(ValueError, match="trace needs two different axes"):
        hax.trace(sq, "r", "r")
    raw = np.asarray(sq.array)
    _assert_named(hax.tril(sq, "r", "c"), np.tril(raw), sq.axes)
    _assert_named(hax.triu(sq, "r", "c", k=1), np.triu(raw, 1), sq.axes)
    # As in Haliax the result is laid out (..., axis1, axis2): here (h, c, r)
    h_, r_, c_ = sq.axes
    _assert_named(hax.tril(sq, "c", "r"), np.tril(raw.transpose(0, 2, 1)), (h_, c_, r_))
    _assert_named(hax.tril(sq, "h", "c", k=-1), np.tril(raw.transpose(1, 0, 2), -1), (r_, h_, c_))
    _assert_named(hax.triu(sq, "h", "r"), np.triu(raw.transpose(2, 0, 1)), (c_, h_, r_))
    with pytest.raises(ValueError, match="tril needs two different axes"):
        hax.tril(sq, "r", "r")
    f = lambda x: (
        (
            hax.tril(hax.named(x, ("h", "r", "c")), "r", "c")
            + hax.trace(hax.named(x, ("h", "r", "c")), "r", "c")
        ).array
    )
    g = lambda x: jnp.tril(x) + jnp.trace(x, axis1=1, axis2=2)[:, None, None]
    np.testing.assert_allclose(jax.jit(f)(raw), g(raw), rtol=1e-6)
    np.testing.assert_allclose(
        jax.grad(lambda x: f(x).sum())(raw), jax.grad(lambda x: g(x).sum())(raw)
    )


def test_packbits_unpackbits():
    bits = _RNG.integers(0, 2, (3, 10)).astype(np.uint8)
    a = hax.named(bits, ("batch", "bits"))
    packed = hax.packbits(a, "bits")
    _assert_named(packed, np.packbits(bits, axis=1), (B, Axis("bits", 2)))
    _assert_named(
        hax.packbits(a, "bits", bitorder="little"),
        np.packbits(bits, axis=1, bitorder="little"),
        (B, Axis("bits", 2)),
    )
    _assert_named(
        hax.unpackbits(packed, "bits"),
        np.unpackbits(np.packbits(bits, axis=1), axis=1),
        (B, Axis("bits", 16)),
    )
    _assert_named(hax.unpackbits(packed, "bits", count=10), bits, (B, Axis("bits", 10)))
    with pytest.raises(ValueError, match="Axis 'nope' not found"):
        hax.packbits(a, "nope")


def test_polynomials():
    p = hax.named(np.array([1.0, -3.0, 2.0], np.float32), "coef")
    q = np.array([1.0, 1.0], np.float32)
    _assert_named(hax.polyadd(p, q), np.polyadd([1, -3, 2], q), (Axis("coef", 3),))
    _assert_named(hax.polysub(q, p), np.polysub(q, [1, -3, 2]), (Axis("coef", 3),))
    _assert_named(hax.polymul(p, q), np.polymul([1, -3, 2], q), (Axis("coef", 4),))
    quo, rem = hax.polydiv(p, q)
    rq, rr = np.polydiv([1.0, -3.0, 2.0], q)
    _assert_named(quo, rq, (Axis("coef", len(rq)),), atol=1e-5)
    np.testing.assert_allclose(np.asarray(rem.array)[-len(rr) :], rr, atol=1e-5)
    _assert_named(hax.polyint(p), np.polyint([1, -3, 2]), (Axis("coef", 4),))
    _assert_named(
        hax.polyint(p, m=2, k=jnp.array([1.0, 2.0])),
        np.polyint([1, -3, 2], m=2, k=[1.0, 2.0]),
        (Axis("coef", 5),),
    )
    _assert_named(hax.polyder(p), np.polyder([1, -3, 2]), (Axis("coef", 2),))
    x = hax.named(np.array([[0.0, 1.0], [2.0, 3.0]], np.float32), ("a", "b"))
    _assert_named(hax.polyval(p, x), np.polyval([1, -3, 2], [[0, 1], [2, 3]]), x.axes)
    np.testing.assert_allclose(hax.polyval(p, 4.0), 6.0)
    _assert_named(
        hax.poly(np.array([1.0, 2.0], np.float32)), np.poly([1.0, 2.0]), (Axis("degree", 3),)
    )
    r = hax.roots(p)
    assert r.axes == (Axis("coef", 2),)
    np.testing.assert_allclose(np.sort(np.asarray(r.array).real), [1.0, 2.0], rtol=1e-5)
    _assert_named(hax.trim_zeros(np.array([0.0, 1.0, 2.0, 0.0])), [1.0, 2.0], (Axis("degree", 2),))
    xs = hax.named(np.linspace(0, 1, 6).astype(np.float32), "t")
    ys = hax.named((2 * np.linspace(0, 1, 6) ** 2 + 1).astype(np.float32), "t")
    _assert_named(hax.polyfit(xs, ys, 2), [2.0, 0.0, 1.0], (Axis("t", 3),), atol=1e-4)
    coef, cov = hax.polyfit(
        xs, ys + hax.named(np.array([0, 0.01, -0.01, 0.02, 0, -0.02], np.float32), "t"), 1, cov=True
    )
    assert cov.axes == (Axis("t", 2), Axis("t_cov", 2))
    full = hax.polyfit(xs, ys, 2, full=True)
    assert full[0].axes == (Axis("t", 3),) and len(full) == 5
    V = hax.vander(xs, "pow")
    _assert_named(V, np.vander(np.linspace(0, 1, 6)), (Axis("t", 6), Axis("pow", 6)), atol=1e-6)
    _assert_named(
        hax.vander(xs, Axis("pow", 3)),
        np.vander(np.linspace(0, 1, 6), 3),
        (Axis("t", 6), Axis("pow", 3)),
    )
    with pytest.raises(ValueError, match="vander needs a one-dimensional array"):
        hax.vander(hax.zeros((B, E)), "pow")
    with pytest.raises(ValueError, match="degree axis must differ from the row axis 't'"):
        hax.vander(xs, "t")
    with pytest.raises(ValueError, match="coefficients must be one-dimensional"):
        hax.polyadd(hax.zeros((B, E)), q)
    f = jax.jit(lambda c, x: hax.polyval(hax.named(c, "coef"), hax.named(x, "t")).array)
    np.testing.assert_allclose(f(np.array([1.0, 0.0, -1.0]), np.array([2.0, 3.0])), [3.0, 8.0])


def test_misc_ops_under_jit_vmap_grad():
    K = Axis("k", 2)
    sorted_vals = np.array([0.0, 0.5, 1.0, 1.5], np.float32)

    def named_fn(x):
        a = hax.named(x, ("batch", "embed"))
        padded = hax.pad(a, {"embed": (1, 0)}, constant_values=0.5)
        vals, _ = hax.top_k(padded, "embed", 2, new_axis=K)
        pos = hax.searchsorted(hax.named(sorted_vals, ("embed",)), a)
        close = hax.isclose(a, a * 1.0000001)
        rows, _ = hax.nonzero(a > 0, size=Axis("n", 4), fill_value=0)
        return vals.array * 2 + pos.array.sum() + close.array.sum() + rows.array.sum()

    def pos_fn(x):
        padded = jnp.pad(x, ((0, 0), (1, 0)), constant_values=0.5)
        vals, _ = jax.lax.top_k(padded, 2)
        pos = jnp.searchsorted(sorted_vals, x)
        close = jnp.isclose(x, x * 1.0000001)
        rows, _ = jnp.nonzero(x > 0, size=4, fill_value=0)
        return vals * 2 + pos.sum() + close.sum() + rows.sum()

    x = _SIGNED
    np.testing.assert_allclose(jax.jit(named_fn)(x), pos_fn(x), rtol=1e-6)
    xs = np.stack([x, -x, x * 0.5])
    np.testing.assert_allclose(
        jax.jit(jax.vmap(named_fn))(xs), np.stack([pos_fn(r) for r in xs]), rtol=1e-6
    )
    np.testing.assert_allclose(
        jax.jit(jax.grad(lambda x: named_fn(x).sum()))(x),
        jax.grad(lambda x: pos_fn(x).sum())(x),
        rtol=1e-6,
    )
    bits = jax.jit(
        lambda b: (
            hax.unpackbits(
                hax.packbits(hax.named(b, ("batch", "bits")), "bits"), "bits", count=10
            ).array
        )
    )
    raw = _RNG.integers(0, 2, (3, 10)).astype(np.uint8)
    np.testing.assert_array_equal(bits(raw), raw)

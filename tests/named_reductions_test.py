"""jaxcore.named ops: reductions, arg-reductions and axis-wise ops (cumsum, sort, ...).

Each named op is compared with the positional ``jax.numpy`` op on the same data (with the
second operand stored in a different axis order, so name alignment is exercised), in
eager mode and under ``jit``, ``vmap`` and ``grad``; error paths must name the axis.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _named_test_util import BIG, INTS, SIGNED, UNIT, B, E, assert_named_op

import jaxcore.named as hax
from jaxcore.named import Axis, NamedArray


def _with_nan(base, name, at):
    """A copy of ``base``, with a NaN at index ``at`` for the ``nan*`` variant ``name``."""
    x = np.array(base)
    if name.startswith("nan"):
        x[at] = np.nan
    return x


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
    x = _with_nan(SIGNED, name, (0, 1))
    if name in ("all", "any"):
        x = x > 0
    a = hax.named(x, (B, E))
    fn = getattr(hax, name)
    assert_named_op(fn(a), _reduction_ref(name, x, None), ())
    assert_named_op(fn(a, "batch"), _reduction_ref(name, x, 0), (E,))
    # `where` is matched by name: give it in (embed, batch) order
    mask = np.array(UNIT > 0.3)
    mask[:, 0] = True
    got = fn(a, "embed", where=hax.named(mask.T, (E, B)))
    assert_named_op(got, _reduction_ref(name, x, 1, where=mask), (B,))
    if name in ("std", "var", "nanstd", "nanvar"):
        assert_named_op(fn(a, "batch", ddof=1), _reduction_ref(name, x, 0, ddof=1), (E,))
    if name in ("sum", "mean", "nanprod"):
        out = fn(a, "batch", dtype=jnp.float16)
        assert out.dtype == jnp.float16
        assert_named_op(
            out, _reduction_ref(name, x, 0, dtype=jnp.float16), (E,), rtol=1e-2, atol=1e-2
        )


def test_reduction_axis_forms():
    a = hax.named(SIGNED, (B, E))
    assert_named_op(hax.sum(a, E), SIGNED.sum(1), (B,))
    assert_named_op(hax.sum(a, {"batch": None}), SIGNED.sum(0), (E,))
    assert_named_op(hax.sum(a, {"batch": 3}), SIGNED.sum(0), (E,))
    assert_named_op(hax.sum(a, [B, "embed"]), SIGNED.sum(), ())
    assert_named_op(hax.prod(a, ("embed", "batch")), SIGNED.prod(), (), rtol=1e-4)
    assert_named_op(
        hax.max(hax.named(INTS, (B, E)), "batch", where=hax.named(INTS > 50, (B, E))),
        np.max(INTS, 0, where=INTS > 50, initial=np.iinfo(np.int32).min),
        (E,),
    )
    assert_named_op(
        hax.min(hax.named(INTS > 50, (B, E)), "batch", where=hax.named(INTS > 20, (B, E))),
        np.min(INTS > 50, 0, where=INTS > 20, initial=True),
        (E,),
    )


def test_reductions_methods_and_modes():
    x = SIGNED
    a = hax.named(x, (B, E))
    assert_named_op(a.sum("batch"), x.sum(0), (E,))
    assert_named_op(a.mean(), x.mean(), ())
    assert_named_op(a.max("embed"), x.max(1), (B,))
    assert_named_op(a.min("embed"), x.min(1), (B,))
    assert_named_op(a.prod("batch"), x.prod(0), (E,))
    assert_named_op(a.product("batch"), x.prod(0), (E,))
    assert_named_op(a.std("batch", ddof=1), x.std(0, ddof=1), (E,))
    assert_named_op(a.var("batch"), x.var(0), (E,))
    assert_named_op(a.ptp("embed"), np.ptp(x, 1), (B,))
    assert_named_op((a > 0).all("embed"), (x > 0).all(1), (B,))
    assert_named_op((a > 0).any("embed"), (x > 0).any(1), (B,))

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

    m = UNIT > 0.2
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
    x = _with_nan(SIGNED, name, (1, 2))
    a = hax.named(x, (B, E))
    fn, ref = getattr(hax, name), getattr(jnp, name)
    assert_named_op(fn(a, "embed"), ref(x, axis=1), (B,))
    assert_named_op(fn(a, "batch"), ref(x, axis=0), (E,))
    assert_named_op(fn(a, None), ref(x), ())
    with pytest.raises(TypeError, match=f"{name} takes a single axis"):
        fn(a, ("batch", "embed"))
    with pytest.raises(ValueError, match="Axis 'nope' not found"):
        fn(a, "nope")
    if name == "argmax":
        assert_named_op(a.argmax("embed"), ref(x, axis=1), (B,))
        jitted = jax.jit(lambda x: fn(hax.named(x, (B, E)), "batch").array)
        np.testing.assert_array_equal(jitted(x), ref(x, axis=0))
        vmapped = jax.vmap(lambda x: fn(hax.named(x, (B, E)), "embed").array)(np.stack([x, -x]))
        np.testing.assert_array_equal(
            vmapped, jax.vmap(lambda x: ref(x, axis=1))(np.stack([x, -x]))
        )
    if name == "argmin":
        assert_named_op(a.argmin("embed"), ref(x, axis=1), (B,))


# ----------------------------------------------------------------------------- axis-wise


@pytest.mark.parametrize("name", ["cumsum", "cumprod", "nancumsum", "nancumprod", "sort"])
def test_axiswise(name):
    x = _with_nan(BIG, name, (1, 1))
    a = hax.named(x, (B, E))
    fn, ref = getattr(hax, name), getattr(jnp, name)
    assert_named_op(fn(a, "embed"), ref(x, axis=1), (B, E))
    assert_named_op(fn(a, B), ref(x, axis=0), (B, E))
    if name != "sort":
        out = fn(a, "embed", dtype=jnp.float16)
        assert out.dtype == jnp.float16
    with pytest.raises(ValueError, match="Axis 'nope' not found"):
        fn(a, "nope")


def test_axiswise_methods_and_modes():
    x = SIGNED
    a = hax.named(x, (B, E))
    assert_named_op(a.cumsum("embed"), np.cumsum(x, 1), (B, E))
    assert_named_op(a.cumprod("batch"), np.cumprod(x, 0), (B, E), rtol=1e-5)
    assert_named_op(a.sort("embed"), np.sort(x, 1), (B, E))
    assert_named_op(a.argsort("embed"), np.argsort(x, 1), (B, E))
    assert_named_op(hax.argsort(a, "batch", stable=True), np.argsort(x, 0, kind="stable"), (B, E))
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

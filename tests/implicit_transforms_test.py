"""jaxcore.implicit under JAX transformations, each checked against the dense computation."""

import dataclasses

import implicit_test_util
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcore.implicit as ji
from jaxcore import _jax_internals
from jaxcore.implicit import ImplicitArray, implicit, register

pytestmark = pytest.mark.filterwarnings("ignore::jaxcore.implicit.MaterializationWarning")


Scaled = implicit_test_util.scaled_class()


@register("mul")
def _scaled_mul(x: Scaled, y: jax.Array, **params):
    return Scaled(x.value * y, scale=x.scale)


@register("mul")
def _mul_scaled(x: jax.Array, y: Scaled, **params):
    return Scaled(x * y.value, scale=y.scale)


@register("add")
def _scaled_add(x: Scaled, y: Scaled, **params):
    if x.scale == y.scale:
        return Scaled(x.value + y.value, scale=x.scale)
    return x.materialize() + y.materialize()


LowRank = implicit_test_util.lowrank_class()


@register("dot_general")
def _dot_lowrank(lhs: jax.Array, rhs: LowRank, *, dimension_numbers, **params):
    (lc, rc), (lb, rb) = dimension_numbers
    if tuple(rc) != (0,) or lb or rb:
        return jax.lax.dot_general(lhs, rhs.materialize(), dimension_numbers)
    return (lhs @ rhs.left) @ rhs.right


def dense(x):
    return ji.materialize_nested(x, full=True) if isinstance(x, ImplicitArray) else x


def dense_tree(tree):
    return ji.tree_map_with_implicit(dense, tree)


def assert_close(actual, expected, rtol=1e-5, atol=1e-5):
    actual, expected = dense_tree(actual), dense_tree(expected)
    jax.tree_util.tree_map(
        lambda a, e: np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=rtol, atol=atol),
        actual,
        expected,
    )


RNG = np.random.default_rng(0)
V = jnp.asarray(RNG.normal(size=(4, 3)), jnp.float32)
Y = jnp.asarray(RNG.normal(size=(4, 3)), jnp.float32)
S = Scaled(V, scale=2.0)
A = jnp.asarray(RNG.normal(size=(6, 2)), jnp.float32)
B = jnp.asarray(RNG.normal(size=(2, 5)), jnp.float32)
W = LowRank(A, B)
X = jnp.asarray(RNG.normal(size=(3, 6)), jnp.float32)


def fn(a, y):
    return (a * y + a * 2.0) * y


def check(f, *args, transform=lambda g: g):
    """f under implicit on the implicit args vs f on the dense args."""
    got = transform(implicit(f))(*args)
    want = transform(f)(*dense_tree(args))
    assert_close(got, want)
    return got


def test_eager_keeps_result_implicit():
    out = check(fn, S, Y)
    assert isinstance(out, Scaled)


def test_jit_outside_and_inside():
    out = check(fn, S, Y, transform=jax.jit)
    assert isinstance(out, Scaled)
    inner = implicit(jax.jit(lambda a, y: jax.jit(fn)(a, y) * y))(S, Y)
    assert isinstance(inner, Scaled)
    assert_close(inner, fn(dense(S), Y) * Y)


def test_jit_inside_implicit_inside_jit_stays_a_nested_jit():
    f = jax.jit(implicit(lambda a, y: jax.jit(fn)(a, y)))
    out = f(S, Y)
    assert isinstance(out, Scaled)
    assert_close(out, fn(dense(S), Y))
    jaxpr = jax.make_jaxpr(implicit(lambda a, y: jax.jit(fn)(a, y)))(S, Y)
    assert [e.primitive.name for e in jaxpr.jaxpr.eqns] == ["jit"]


def test_user_jit_handler_overrides_the_builtin_rule():
    @dataclasses.dataclass
    class Opaque(ImplicitArray):
        value: jax.Array

        def materialize(self):
            return self.value

    calls = []

    @register("jit")
    def _jit_on_opaque(primitive, x: Opaque, *, jaxpr, **params):
        calls.append(jaxpr)
        return [jnp.zeros(x.shape, x.dtype)]

    out = implicit(jnp.sin)(Opaque(jnp.ones(3)))
    assert len(calls) == 1
    np.testing.assert_array_equal(out, np.zeros(3))


def test_nested_implicit_calls():
    out = implicit(lambda a, y: implicit(fn)(a, y) * 2.0)(S, Y)
    assert isinstance(out, Scaled)
    assert_close(out, fn(dense(S), Y) * 2.0)


def test_lowrank_matmul_under_jit_grad_vmap():
    f = lambda x, w: jnp.tanh(x @ w)
    check(f, X, W)
    check(f, X, W, transform=jax.jit)
    g = jax.grad(lambda x: jnp.sum(implicit(f)(x, W)))(X)
    assert_close(g, jax.grad(lambda x: jnp.sum(f(x, dense(W))))(X))
    xs = jnp.stack([X, 2 * X])
    batched = jax.vmap(implicit(f), in_axes=(0, None))(xs, W)
    assert_close(batched, jax.vmap(f, in_axes=(0, None))(xs, dense(W)))


def test_grad_wrt_dense_input():
    loss = lambda y, a: jnp.sum(dense(implicit(fn)(a, y)) ** 2)
    g = jax.grad(loss)(Y, S)
    assert_close(g, jax.grad(lambda y: jnp.sum(fn(dense(S), y) ** 2))(Y))


def test_grad_wrt_implicit_children():
    g = jax.grad(lambda s: jnp.sum(implicit(lambda a: a * Y)(s).materialize()))(S)
    assert isinstance(g, Scaled) and g.scale == 2.0
    # d/dvalue sum(value * Y * 2) = 2 Y
    np.testing.assert_allclose(g.value, 2.0 * Y, rtol=1e-6)


def test_grad_inside_implicit():
    out = implicit(lambda a, y: jax.grad(lambda y: jnp.sum(fn(a, y)))(y))(S, Y)
    assert_close(out, jax.grad(lambda y: jnp.sum(fn(dense(S), y)))(Y))


def test_vjp_and_jvp():
    f = lambda y: dense(implicit(fn)(S, y))
    out, pullback = jax.vjp(f, Y)
    ct = jnp.asarray(RNG.normal(size=Y.shape), jnp.float32)
    ref_out, ref_pullback = jax.vjp(lambda y: fn(dense(S), y), Y)
    assert_close(out, ref_out)
    assert_close(pullback(ct), ref_pullback(ct))
    tangent = jnp.ones_like(Y)
    primal, tan = jax.jvp(f, (Y,), (tangent,))
    ref_primal, ref_tan = jax.jvp(lambda y: fn(dense(S), y), (Y,), (tangent,))
    assert_close((primal, tan), (ref_primal, ref_tan))


def test_vmap_over_dense_and_over_implicit_children():
    ys = jnp.stack([Y, -Y, 3 * Y])
    got = jax.vmap(implicit(fn), in_axes=(None, 0))(S, ys)
    assert isinstance(got, Scaled)
    assert_close(got, jax.vmap(fn, in_axes=(None, 0))(dense(S), ys))
    batched = Scaled(jnp.stack([V, 2 * V]), scale=2.0)
    got = jax.vmap(implicit(lambda a: jnp.sum(a * 1.0)))(batched)
    np.testing.assert_allclose(got, [jnp.sum(2 * V), jnp.sum(4 * V)], rtol=1e-5)
    got = implicit(jax.vmap(lambda a, y: a * y, in_axes=(None, 0)))(S, ys)
    assert_close(got, dense(S)[None] * ys)


def test_cond_keeps_implicit_when_branches_agree():
    f = lambda p, a, y: jax.lax.cond(p, lambda: a * y, lambda: a * 3.0)
    for p in (True, False):
        out = check(f, p, S, Y)
        assert isinstance(out, Scaled)
    check(f, True, S, Y, transform=jax.jit)


def test_cond_materializes_only_disagreeing_outputs():
    f = lambda p, a: jax.lax.cond(p, lambda: (a * 2.0, jnp.sin(a)), lambda: (a * 3.0, a * 1.0))
    for p in (True, False):
        first, second = check(f, p, S)
        assert isinstance(first, Scaled) and not isinstance(second, ImplicitArray)


def test_switch():
    f = lambda i, a: jax.lax.switch(i, [lambda x: x * 2.0, lambda x: x * 5.0, lambda x: x + x], a)
    for i in range(3):
        assert isinstance(check(f, i, S), Scaled)
    check(f, 1, S, transform=jax.jit)


def test_cond_with_implicit_predicate_operand():
    f = lambda a: jax.lax.cond(jnp.sum(a) > 0, lambda: a * 2.0, lambda: a * -1.0)
    check(f, S)


def test_while_loop_keeps_handled_carry_implicit():
    f = lambda a: jax.lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 2.0), (0, a))
    out = check(f, S)
    assert isinstance(out[1], Scaled)
    check(f, S, transform=jax.jit)


def test_while_loop_materializes_carry_the_body_does_not_handle():
    f = lambda a: jax.lax.while_loop(
        lambda c: jnp.sum(c) < 100.0, lambda c: c + jnp.abs(c) + 1.0, a
    )
    out = check(f, S)
    assert not isinstance(out, ImplicitArray)


def test_fori_loop():
    f = lambda a, y: jax.lax.fori_loop(0, 3, lambda i, c: c * y, a)
    out = check(f, S, Y)
    assert isinstance(out, Scaled)
    g = lambda a: jax.lax.fori_loop(0, 3, lambda i, c: jnp.sin(c), a)
    assert not isinstance(check(g, S), ImplicitArray)
    check(f, S, Y, transform=jax.jit)


def test_scan_carry_stays_implicit_and_implicit_xs_and_ys_are_scanned_leafwise():
    def f(a, xs):
        return jax.lax.scan(lambda c, x: (c * x, jnp.sum(c * 1.0) + jnp.sum(x)), a, xs)

    xs = jnp.asarray(RNG.normal(size=(5, 4, 3)), jnp.float32)
    carry, ys = check(f, S, xs)
    assert isinstance(carry, Scaled) and ys.shape == (5,)
    # An implicit xs is sliced like vmap batches it; Scaled * Scaled has no handler, so
    # the carry becomes dense and is materialized (correct either way).
    check(f, S, Scaled(xs, scale=0.5))
    check(f, S, xs, transform=jax.jit)
    rev = lambda a, xs: jax.lax.scan(lambda c, x: (c * x, c * 1.0), a, xs, reverse=True)
    carry, ys = check(rev, S, xs)
    assert isinstance(carry, Scaled) and isinstance(ys, Scaled) and ys.shape == (5, 4, 3)


def test_grad_through_scan_and_while_with_implicit_constants():
    def loss(y):
        f = lambda a, y: jax.lax.scan(lambda c, _: (c * y, None), a, None, length=3)[0]
        return jnp.sum(dense(implicit(f)(S, y)))

    ref = jax.grad(
        lambda y: jnp.sum(jax.lax.scan(lambda c, _: (c * y, None), dense(S), None, length=3)[0])
    )
    assert_close(jax.grad(loss)(Y), ref(Y))
    loss2 = lambda y: jnp.sum(
        dense(implicit(lambda a: jax.lax.fori_loop(0, 2, lambda i, c: c * y, a))(S))
    )
    ref2 = jax.grad(lambda y: jnp.sum(jax.lax.fori_loop(0, 2, lambda i, c: c * y, dense(S))))
    assert_close(jax.grad(loss2)(Y), ref2(Y))


def test_custom_jvp_function():
    f = lambda a: jax.nn.relu(a * Y)
    check(f, S)
    g = jax.grad(lambda y: jnp.sum(implicit(lambda a: jax.nn.relu(a * y))(S)))(Y)
    assert_close(g, jax.grad(lambda y: jnp.sum(jax.nn.relu(dense(S) * y)))(Y))


def test_custom_vjp_rule_is_honoured():
    @jax.custom_vjp
    def clip_grad(x):
        return jnp.sin(x)

    clip_grad.defvjp(lambda x: (jnp.sin(x), None), lambda _, g: (10.0 * g,))
    f = lambda a, y: jnp.sum(clip_grad(a * y))
    assert_close(implicit(f)(S, Y), f(dense(S), Y))
    g = jax.grad(lambda y: implicit(f)(S, y))(Y)
    np.testing.assert_allclose(g, 10.0 * dense(S), rtol=1e-6)


def test_checkpoint():
    f = lambda a, y: jax.checkpoint(lambda a: a * y * 2.0)(a)
    out = check(f, S, Y)
    assert isinstance(out, Scaled)
    g = jax.grad(lambda y: jnp.sum(dense(implicit(f)(S, y))))(Y)
    assert_close(g, jax.grad(lambda y: jnp.sum(f(dense(S), y)))(Y))
    remat = lambda a, y: jax.remat(
        lambda a: jnp.sin(a * y), policy=jax.checkpoint_policies.nothing_saveable
    )(a)
    check(remat, S, Y)


def test_make_jaxpr_contains_no_materialization_for_handled_ops():
    jaxpr = jax.make_jaxpr(implicit(lambda a, y: a * y * y))(S, Y)
    prims = [e.primitive.name for e in jaxpr.jaxpr.eqns]
    assert prims.count("mul") == 2, prims


def test_inline_jit_bodies_under_a_transformation_dispatch_without_tracers():
    """jax.numpy functions (inline jits) are re-evaluated equation by equation under jit/grad."""
    # Inlined while tracing, as jax.numpy's own jits (jax >= 0.11 spells it Inline.JAX_EARLY).
    early = _jax_internals.jit_inline_option(True)
    inner = jax.jit(lambda a, y: (a * y) * 2.0 + jnp.sin(a), inline=early)
    f = lambda a, y: inner(a, y) * y
    check(f, S, Y, transform=jax.jit)
    check(f, S, Y, transform=lambda g: jax.vmap(g, in_axes=(None, 0)))
    jaxpr = jax.make_jaxpr(implicit(lambda a: inner(a, Y)))(S)
    assert "jit" not in [e.primitive.name for e in jaxpr.jaxpr.eqns]
    g = jax.grad(lambda y: jnp.sum(dense(implicit(f)(S, y))))(Y)
    assert_close(g, jax.grad(lambda y: jnp.sum(f(dense(S), y)))(Y))


def test_inline_jit_holding_a_custom_jvp_runs_its_function_on_the_implicit_operands():
    inner = jax.jit(lambda a: jax.nn.relu(a) + 1.0, inline=True)
    # relu's own primitive (max) is reached with the Scaled operand: no handler, so it
    # is the one that materializes, not the custom_jvp_call around it.
    with pytest.warns(ji.MaterializationWarning, match="'max'"):
        ji.reset_materialization_warnings()
        got = jax.jit(implicit(inner))(S)
    assert_close(got, inner(dense(S)))
    g = jax.grad(lambda y: jnp.sum(implicit(lambda a: inner(a * y))(S)))(Y)
    assert_close(g, jax.grad(lambda y: jnp.sum(inner(dense(S) * y)))(Y))


def test_leaf_callables_and_pytree_callables_as_the_wrapped_function():
    # A jax.numpy ufunc object is a pytree leaf: the argument-only fast path applies.
    assert_close(implicit(jnp.sin)(S), jnp.sin(dense(S)))
    assert_close(implicit(jnp.multiply)(S, Y), dense(S) * Y)
    # A pytree callable holding an implicit array still has it intercepted.
    out = implicit(jax.tree_util.Partial(jnp.multiply, S))(Y)
    assert isinstance(out, Scaled)
    assert_close(out, dense(S) * Y)


def test_alternating_parent_traces_reuse_the_right_implicit_trace():
    f = implicit(lambda a, y: a * y)
    for _ in range(2):
        eager = f(S, Y)
        jitted = jax.jit(f)(S, Y)
        batched = jax.vmap(f, in_axes=(None, 0))(S, Y)
        assert_close(eager, dense(S) * Y)
        assert_close(jitted, dense(S) * Y)
        assert_close(batched, jax.vmap(lambda y: dense(S) * y)(Y))


@dataclasses.dataclass
class _Rows(ImplicitArray):
    """A stack of rows that a scan body reads in place (`scan_slice`), as a lazy `_Row`."""

    value: jax.Array

    def materialize(self):
        return self.value

    def scan_slice(self, index):
        return _Row(self.value, index)


@dataclasses.dataclass
class _Row(ImplicitArray):
    stack: jax.Array
    index: jax.Array

    def compute_shape(self):
        return tuple(self.stack.shape[1:])

    def compute_dtype(self):
        return self.stack.dtype

    def materialize(self):
        return jax.lax.dynamic_index_in_dim(self.stack, self.index, 0, keepdims=False)

    def on_return(self):
        return self.materialize() * 1.0  # returned dense, never as the view


_ROWS_SEEN: list = []


@register("mul")
def _row_mul(x: _Row, y: jax.Array, **params):
    _ROWS_SEEN.append(x.stack.shape)  # the whole stack reached the handler
    return x.materialize() * y


def test_scan_slice_hands_the_body_a_view_and_on_return_resolves_it():
    stack = np.arange(12.0, dtype=np.float32).reshape(4, 3)
    c0 = np.ones(3, np.float32)

    def f(c, rows):
        return jax.lax.scan(lambda c, r: (r * c, r), c, rows, reverse=True)

    _ROWS_SEEN.clear()
    carry, ys = jax.jit(implicit(f))(c0, _Rows(stack))
    want = c0.copy()
    for r in stack[::-1]:
        want = r * want
    np.testing.assert_allclose(carry, want)
    # ys = the scanned rows themselves: JAX forwards the input, which comes back as it went in.
    np.testing.assert_allclose(ji.materialize_nested(ys, full=True), stack)
    assert _ROWS_SEEN and all(shape == (4, 3) for shape in _ROWS_SEEN)
    # Returned from an implicit function, a view is what on_return makes of it.
    got = implicit(lambda rows: jax.lax.scan(lambda c, r: (r, None), c0, rows)[0])(_Rows(stack))
    assert isinstance(got, jax.Array)
    np.testing.assert_allclose(got, stack[-1])

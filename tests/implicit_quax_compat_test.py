"""jaxcore.implicit behaving as quax's value types do (issue 25), each against a dense reference.

Written from quax's and equinox's documented behaviour: ``dataclasses.replace`` and
``==`` on values, field converters and ``__check_init__``, ``aval()``, shapes computed
by properties, custom_jvp/custom_vjp functions seeing the values, control flow that
keeps them, one default rule per primitive, and dispatch by ``issubclass``.
"""

import abc
import dataclasses
import typing as tp

import implicit_test_util
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcore.implicit as ji
from jaxcore.implicit import ImplicitArray, aux_field, implicit, register

pytestmark = pytest.mark.filterwarnings("ignore::jaxcore.implicit.MaterializationWarning")

Scaled = implicit_test_util.scaled_class()
# Primitive names the Scaled handlers below were called for, with their operand types.
SEEN: list[tuple[str, tuple[str, ...]]] = []


def _record(name, *operands):
    SEEN.append((name, tuple(type(o).__name__ for o in operands)))


def saw(name):
    """Whether a handler ran for primitive ``name`` with a Scaled first operand."""
    return any(n == name and ops[0] == "Scaled" for n, ops in SEEN)


@register("mul")
def _scaled_mul(x: Scaled, y: jax.Array, **params):
    _record("mul", x, y)
    return Scaled(x.value * y, scale=x.scale)


@register("max")
def _scaled_max(x: Scaled, y: jax.Array, **params):
    _record("max", x, y)
    if x.scale > 0:  # max(v * s, y) = s * max(v, y / s) for s > 0: stays a Scaled
        return Scaled(jnp.maximum(x.value, y / x.scale), scale=x.scale)
    return jnp.maximum(x.materialize(), y)


LowRank = implicit_test_util.lowrank_class()


@dataclasses.dataclass
class Negated(ImplicitArray):
    """logical_not(value): a boolean value type, e.g. a loop predicate."""

    value: jax.Array

    def materialize(self):
        return jnp.logical_not(self.value)


@register("lt")
def _scaled_lt(x: Scaled, y: jax.Array, **params):
    return Negated(jnp.logical_not(x.value * x.scale < y))


def dense(x):
    return ji.materialize_nested(x, full=True)


def close(actual, expected, tol=1e-5):
    actual = ji.tree_map_with_implicit(dense, actual)
    jax.tree_util.tree_map(
        lambda a, e: np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=tol, atol=tol),
        actual,
        expected,
    )


V = jnp.asarray([[-1.5, 0.0, 2.0], [0.5, -0.25, 3.0]], jnp.float32)
S = Scaled(V, scale=2.0)
Y = jnp.asarray([[1.0, 2.0, -1.0], [0.5, 1.5, 2.0]], jnp.float32)


# ------------------------------------------------------------------ dataclasses.replace


def test_replace_recomputes_a_shape_and_dtype_that_were_not_given():
    s = Scaled(jnp.ones((2, 3), jnp.float16), scale=2.0)
    assert (s.shape, s.dtype) == ((2, 3), jnp.float16)
    r = dataclasses.replace(s, value=jnp.ones((4,), jnp.int32))
    assert (r.shape, r.dtype) == ((4,), jnp.float32)  # int32 * 2.0 is float32
    close(r, np.full((4,), 2.0))
    low = LowRank(jnp.ones((4, 2)), jnp.ones((2, 3)))
    assert dataclasses.replace(low, right=jnp.ones((2, 7))).shape == (4, 7)


def test_replace_keeps_explicit_values_and_takes_replaced_ones():
    @dataclasses.dataclass
    class Zeros(ImplicitArray):
        def materialize(self):
            return jnp.zeros(self.shape, self.dtype)

    z = Zeros(shape=(2, 3), dtype=jnp.float16)
    kept = dataclasses.replace(z)
    assert (kept.shape, kept.dtype) == ((2, 3), jnp.float16)
    changed = dataclasses.replace(z, shape=(5,))
    assert (changed.shape, changed.dtype) == ((5,), jnp.float16)
    # A shape read off another array and passed in is an explicit value like any other.
    like = Zeros(shape=S.shape, dtype=S.dtype)
    assert dataclasses.replace(like).shape == (2, 3)
    overridden = Scaled(jnp.ones((2, 3)), scale=1.0, dtype=jnp.bfloat16)
    r = dataclasses.replace(overridden, value=jnp.ones((3,)))
    assert (r.shape, r.dtype) == ((3,), jnp.bfloat16)


# ------------------------------------------------------- shape/dtype/aval of a subclass


@dataclasses.dataclass
class Unitful(ImplicitArray):
    """An array with a unit; shape and dtype are properties of its array."""

    array: jax.Array
    unit: str = aux_field(default="m")

    @property
    def shape(self):
        return tuple(self.array.shape)

    @property
    def dtype(self):
        return self.array.dtype

    def materialize(self):
        return self.array


def test_shape_and_dtype_as_properties_of_the_fields():
    u = Unitful(jnp.ones((2, 3), jnp.int32))
    assert (u.shape, u.dtype, u.ndim, u.size) == ((2, 3), jnp.int32, 2, 6)
    assert u.aval() == jax.core.ShapedArray((2, 3), jnp.int32)
    assert dataclasses.replace(u, array=jnp.ones((4,))).shape == (4,)
    assert jax.tree_util.tree_map(lambda a: a[0], u).shape == (3,)
    assert jax.vmap(lambda v: v.shape[0] * jnp.sum(dense(v)))(u).shape == (2,)
    close(implicit(lambda a: a * 2)(u), np.full((2, 3), 2))
    with pytest.raises(TypeError, match="computes shape"):
        Unitful(jnp.ones(3), shape=(3,))

    @dataclasses.dataclass
    class Ones(ImplicitArray):
        shape = (3,)  # class constants: not constructor arguments either
        dtype = jnp.float16

        def materialize(self):
            return jnp.ones(self.shape, self.dtype)

    ones = Ones()
    assert (ones.shape, ones.dtype) == ((3,), jnp.float16) and dataclasses.replace(ones).shape == (
        3,
    )


def test_an_aval_method_and_shape_dtype_fields_as_quax_writes_them():
    @dataclasses.dataclass
    class WithAval(ImplicitArray):
        array: jax.Array

        def aval(self):
            return jax.core.ShapedArray(self.array.shape, self.array.dtype)

        def materialize(self):
            return self.array

    w = WithAval(jnp.ones((3,), jnp.float16))
    assert (w.shape, w.dtype, w.aval().shape) == ((3,), jnp.float16, (3,))
    close(implicit(jnp.sin)(w), np.sin(np.ones(3, np.float16)), tol=1e-3)

    @dataclasses.dataclass
    class Zero(ImplicitArray):
        shape: tuple[int, ...] = aux_field()
        dtype: tp.Any = aux_field()

        def materialize(self):
            return jnp.zeros(self.shape, self.dtype)

    z = Zero((2,), jnp.int8)  # the fields are positional, as declared
    assert (z.shape, z.dtype) == ((2,), jnp.int8)
    z = jax.tree_util.tree_map(lambda a: a, z)
    assert (z.shape, z.dtype) == ((2,), jnp.int8)
    assert dataclasses.replace(z, shape=(4,)).shape == (4,)


def test_aval_is_both_an_attribute_and_a_call():
    expected = jax.core.ShapedArray((2, 3), jnp.float32)
    assert S.aval == expected and expected == S.aval
    assert S.aval() is expected  # the interned ShapedArray itself
    assert (S.aval.shape, S.aval.dtype, S.aval.ndim) == ((2, 3), jnp.float32, 2)
    assert hash(S.aval) == hash(expected)


# -------------------------------------------------------------------- value semantics


def test_equality_compares_values_like_equinox_modules():
    s = S
    assert s == Scaled(V + 0.0, scale=2.0)
    assert (s == Scaled(V + 1.0, scale=2.0)) is False
    assert s != Scaled(V, scale=3.0)  # static metadata differs
    assert s != Scaled(V[0], scale=2.0)  # shape differs
    assert s != Scaled(V.astype(jnp.float16), scale=2.0)
    assert s != LowRank(V, V.T) and s != V and s != 3
    assert [s] == [Scaled(V, scale=2.0)]  # inside containers, no "truth value ambiguous"
    traced = jax.jit(lambda a, b: a == b)(S, Scaled(V, scale=2.0))
    assert traced.dtype == jnp.bool_ and bool(traced)
    assert not bool(jax.jit(lambda a, b: a == b)(S, Scaled(-V, scale=2.0)))
    # Inside an implicit function, == is JAX's element-wise comparison.
    np.testing.assert_array_equal(implicit(lambda a, b: a == b)(S, dense(S)), np.ones((2, 3), bool))


def test_field_converters_and_check_init_run_after_init():
    calls = []

    @dataclasses.dataclass
    class Checked(ImplicitArray):
        array: jax.Array = ji.field(converter=jnp.asarray)
        scale: float = aux_field(converter=float, default=1)
        # equinox.field(converter=..., static=True) writes these metadata keys.
        tag: str = dataclasses.field(default="a", metadata={"static": True, "converter": str.upper})

        def __check_init__(self):
            calls.append(type(self.array).__name__)
            if self.array.ndim != 1:
                raise ValueError("Checked takes a 1-D array")

        def materialize(self):
            return self.array * self.scale

    c = Checked([1.0, 2.0], scale=3)
    assert isinstance(c.array, jax.Array) and type(c.scale) is float and c.tag == "A"
    assert calls == ["ArrayImpl"]  # after the converter, once
    close(c, np.array([3.0, 6.0]))
    assert jax.tree_util.tree_structure(c).num_leaves == 1  # tag and scale are static
    with pytest.raises(ValueError, match="1-D"):
        Checked([[1.0]])
    jax.tree_util.tree_map(lambda a: a[None], c)  # rebuilding from leaves skips both
    assert len(calls) == 2

    class Sub(Checked):
        def __check_init__(self):
            calls.append("sub")

    Sub([1.0])
    assert calls[-2:] == ["sub", "ArrayImpl"]  # every class's check, subclass first


# -------------------------------------------------------- custom_jvp / custom_vjp calls


def test_custom_jvp_functions_run_on_the_implicit_values():
    SEEN.clear()
    out = implicit(jax.nn.relu)(S)  # relu is a custom_jvp around max
    assert isinstance(out, Scaled) and saw("max")
    close(out, jax.nn.relu(dense(S)))
    assert isinstance(jax.jit(implicit(jax.nn.relu))(S), Scaled)
    ys = jnp.stack([Y, -Y])
    batched = jax.vmap(implicit(lambda a, y: jax.nn.relu(a * y)), in_axes=(None, 0))(S, ys)
    close(batched, jax.vmap(lambda y: jax.nn.relu(dense(S) * y))(ys))


@pytest.mark.parametrize(
    "fn",
    [
        jax.nn.relu,
        jnp.sinc,
        lambda a: jnp.logaddexp(a, 0.5),
        lambda a: jnp.linalg.pinv(a),
        lambda a: jnp.linalg.slogdet(a @ a.T + 3 * jnp.eye(2))[1],
    ],
    ids=["relu", "sinc", "logaddexp", "pinv", "slogdet"],
)
def test_custom_jvp_functions_keep_the_values_and_their_gradients(fn):
    close(implicit(fn)(S), fn(dense(S)), tol=1e-4)
    loss = lambda y: jnp.sum(dense(implicit(lambda a: fn(a * y))(S)))
    want = jax.grad(lambda y: jnp.sum(fn(dense(S) * y)))(Y)
    close(jax.grad(loss)(Y), want, tol=1e-4)
    close(jax.jit(jax.grad(loss))(Y), want, tol=1e-4)


def test_a_user_custom_jvp_rule_is_the_gradient_and_sees_dense_operands():
    @jax.custom_jvp
    def f(x):
        return jnp.sin(x)

    @f.defjvp
    def f_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return jnp.sin(x), 3.0 * t  # not sin's derivative: proves the rule is used

    SEEN.clear()
    out = implicit(lambda a, y: f(a * y))(S, Y)
    assert saw("mul")  # the function ran on the Scaled
    close(out, jnp.sin(dense(S) * Y))
    g = jax.grad(lambda y: jnp.sum(implicit(lambda a: f(a * y))(S)))(Y)
    close(g, 3.0 * dense(S))
    _, tangent = jax.jvp(lambda y: implicit(lambda a: f(a * y))(S), (Y,), (jnp.ones_like(Y),))
    close(tangent, 3.0 * dense(S))


def test_a_user_custom_vjp_rule_is_the_gradient():
    @jax.custom_vjp
    def f(x):
        return jnp.sin(x)

    f.defvjp(lambda x: (jnp.sin(x), None), lambda _, g: (10.0 * g,))
    loss = lambda y: jnp.sum(implicit(lambda a: f(a * y))(S))
    close(loss(Y), jnp.sum(jnp.sin(dense(S) * Y)))
    close(jax.grad(loss)(Y), 10.0 * dense(S))
    close(jax.jit(jax.grad(loss))(Y), 10.0 * dense(S))
    close(jax.vmap(jax.grad(loss))(jnp.stack([Y, 2 * Y])), jnp.stack([10.0 * dense(S)] * 2))


def test_an_implicit_result_of_a_custom_function_is_differentiated_through_its_handlers():
    @jax.custom_vjp
    def double(x):
        return x * 2.0

    double.defvjp(lambda x: (x * 2.0, None), lambda _, g: (2.0 * g,))
    out = implicit(double)(S)
    assert isinstance(out, Scaled)  # its rule gives tangents of a dense result, not of leaves
    g = jax.grad(lambda v: jnp.sum(dense(implicit(double)(Scaled(v, scale=2.0)))))(V)
    close(g, np.full((2, 3), 4.0))


# ----------------------------------------------------------------------- control flow


def test_scan_slices_and_stacks_implicit_arrays_leaf_by_leaf():
    xs = Scaled(jnp.arange(12.0).reshape(4, 3) - 5.5, scale=0.5)  # no ties at relu's kink

    def f(c, xs):
        return jax.lax.scan(lambda c, x: (c * 2.0, jax.nn.relu(x) * 3.0), c, xs)

    carry, ys = implicit(f)(Scaled(jnp.ones(2), scale=2.0), xs)
    assert isinstance(carry, Scaled) and isinstance(ys, Scaled) and ys.shape == (4, 3)
    close(ys, jax.nn.relu(dense(xs)) * 3.0)
    close(carry, np.full(2, 32.0))
    jaxpr = jax.make_jaxpr(implicit(f))(Scaled(jnp.ones(2), scale=2.0), xs)
    body = next(e for e in jaxpr.jaxpr.eqns if e.primitive.name == "scan").params["jaxpr"]
    # The scaled values are scanned and multiplied; nothing multiplies by the scale.
    assert [e.primitive.name for e in body.eqns].count("mul") == 2
    close(jax.jit(implicit(f))(Scaled(jnp.ones(2), scale=2.0), xs)[1], jax.nn.relu(dense(xs)) * 3.0)
    rev = lambda xs: jax.lax.scan(lambda c, x: (c + jnp.sum(x), x), 0.0, xs, reverse=True)
    total, same = implicit(rev)(xs)
    assert isinstance(same, Scaled)
    close((total, same), rev(dense(xs)))
    ones = Scaled(jnp.ones(2), scale=2.0)
    loss = lambda v: jnp.sum(dense(implicit(f)(ones, Scaled(v, scale=0.5))[1]))
    close(
        jax.grad(loss)(xs.value), jax.grad(lambda v: jnp.sum(jax.nn.relu(v * 0.5) * 3.0))(xs.value)
    )


def test_scan_materializes_what_slicing_leaves_would_not_slice():
    low = LowRank(jnp.arange(8.0).reshape(4, 2), jnp.ones((2, 3)))  # right has 2 rows, not 4
    f = lambda xs: jax.lax.scan(lambda c, x: (c + jnp.sum(x), x), 0.0, xs)
    total, ys = implicit(f)(low)
    close(total, jnp.sum(dense(low)))
    close(ys, dense(low))

    @dataclasses.dataclass
    class Fill(ImplicitArray):
        value: jax.Array  # a scalar: filled into an explicit shape

        def materialize(self):
            return jnp.full(self.shape, self.value, self.dtype)

    # A scalar leaf under an explicit shape: nothing to slice, so it is materialized.
    _, got = implicit(lambda xs: jax.lax.scan(lambda c, x: (c, x * 1.0), 0.0, xs))(
        Fill(jnp.float32(1.5), shape=(3, 2), dtype=jnp.float32)
    )
    close(got, np.full((3, 2), 1.5))


def test_cond_and_switch_materialize_only_outputs_whose_type_differs():
    def f(i, a, y):
        branches = (
            lambda: (a * y, a * 2.0),
            lambda: (a * 3.0, jnp.sin(a)),
            lambda: (a * 1.0, a * y),
        )
        return jax.lax.switch(i, branches)

    for i in range(3):
        first, second = implicit(f)(i, S, Y)
        assert isinstance(first, Scaled) and not isinstance(second, ImplicitArray)
        close((first, second), f(i, dense(S), Y))
    out = implicit(lambda p, a: jax.lax.cond(p, lambda: a * 2.0, lambda: a * 3.0))(True, S)
    assert isinstance(out, Scaled)
    close(out, dense(S) * 2.0)


def test_while_loop_with_an_implicit_predicate_also_under_vmap():
    def f(x, limit):
        # x < limit is a Negated: a value type that must be read through materialize.
        return jax.lax.while_loop(lambda c: c < limit, lambda c: c * 2.0, x)

    out = implicit(f)(Scaled(jnp.float32(1.0), scale=1.0), 10.0)
    assert isinstance(out, Scaled)
    close(out, 16.0)
    limits = jnp.asarray([3.0, 10.0, 40.0])
    batched = jax.vmap(implicit(f), in_axes=(None, 0))(Scaled(jnp.float32(1.0), scale=1.0), limits)
    close(batched, np.array([4.0, 16.0, 64.0]))
    inner = implicit(jax.vmap(f, in_axes=(None, 0)))(Scaled(jnp.float32(1.0), scale=1.0), limits)
    close(inner, np.array([4.0, 16.0, 64.0]))


# ------------------------------------------------------------------------ dispatching


def _default_owner(tag):
    @dataclasses.dataclass
    class Owner(ImplicitArray):
        value: jax.Array

        def materialize(self):
            return self.value

        @classmethod
        def default_handler(cls, primitive, *args, params=None):
            dense_args = [a.value if isinstance(a, ImplicitArray) else a for a in args]
            return cls(primitive.bind(*dense_args, **params))

    Owner.__name__ = Owner.__qualname__ = tag
    return Owner


def test_two_types_with_their_own_default_handler_meeting_is_a_type_error():
    first, second = _default_owner("FirstOwner"), _default_owner("SecondOwner")
    x, y = first(jnp.ones(2)), second(jnp.ones(2))
    out = implicit(lambda a, b: a + b)(x, jnp.ones(2))  # one owner: its default applies
    assert type(out) is first
    assert type(implicit(lambda a, b: a + b)(x, Scaled(jnp.ones(2), scale=1.0))) is first
    with pytest.raises(TypeError, match="FirstOwner, SecondOwner"):
        implicit(lambda a, b: a + b)(x, y)

    class Child(first):
        pass

    assert type(implicit(lambda a, b: a + b)(x, Child(jnp.ones(2)))) is first  # same default


def test_handlers_match_subclasses_and_virtual_subclasses():
    class Tagged(abc.ABC):  # noqa: B024 - an interface classes join by Tagged.register
        """An interface that implicit array classes join with Tagged.register."""

    @dataclasses.dataclass
    class Plain(ImplicitArray):
        value: jax.Array

        def materialize(self):
            return self.value

    class Sub(Plain):
        pass

    @register("sin")
    def _tagged_sin(x: Tagged, **params):
        return jnp.zeros(x.shape, x.dtype)

    p = Plain(jnp.ones(2))
    close(implicit(jnp.sin)(p), np.sin(np.ones(2)))  # not Tagged yet: materialized
    Tagged.register(Plain)  # after that dispatch was cached
    close(implicit(jnp.sin)(p), np.zeros(2))
    close(jax.jit(implicit(jnp.sin))(p), np.zeros(2))
    close(implicit(jnp.sin)(Sub(jnp.ones(2))), np.zeros(2))  # subclass of a virtual subclass


# ------------------------------------------- batched loops, values that do not materialize


def test_while_loop_under_vmap_freezes_each_example_once_its_predicate_fails():
    # quax runs a vmapped loop as JAX's lowering does: while any example's predicate
    # holds, each example's carry (here implicit, its leaves batched) frozen once its own
    # predicate fails. Dense reference: 1 doubled until >= limit, per example.
    def f(x, limit):
        return jax.lax.while_loop(lambda c: (c < limit).squeeze(), lambda c: c * 2.0, x)

    limits = jnp.asarray([3.0, 10.0, 40.0])
    x = Scaled(jnp.ones((3, 1), jnp.float32), scale=1.0)
    expected = np.array([[4.0], [16.0], [64.0]])
    out = implicit(jax.vmap(f, in_axes=(0, 0)))(x, limits)
    assert isinstance(out, Scaled)
    close(out, expected)
    close(jax.jit(implicit(jax.vmap(f, in_axes=(0, 0))))(x, limits), expected)
    # Batched only through the limit: the carry becomes batched inside the loop.
    one = Scaled(jnp.ones((1,), jnp.float32), scale=1.0)
    close(implicit(jax.vmap(f, in_axes=(None, 0)))(one, limits), expected)


@dataclasses.dataclass
class Shifted(ImplicitArray):
    """value + offset, with a scalar offset that broadcasting leaves as it is."""

    value: jax.Array
    offset: jax.Array

    def aval(self):
        return jax.core.ShapedArray(self.value.shape, self.value.dtype)

    def materialize(self):
        return self.value + self.offset


@register("broadcast_in_dim")
def _shifted_broadcast(x: Shifted, **params):
    return Shifted(jax.lax.broadcast_in_dim_p.bind(x.value, **params), x.offset)


@register("mul")
def _shifted_mul(x: Shifted, y: jax.Array, **params):
    return Shifted(x.value * y, x.offset * y)


def test_while_loop_under_vmap_materializes_a_carry_whose_leaves_are_not_batched_first():
    # Batching the loop broadcasts the Shifted carry through its handler, which keeps the
    # scalar offset unbatched: that carry cannot be frozen leaf by leaf, so it is
    # materialized (and the loop still gives the dense reference).
    def f(x, limit):
        return jax.lax.while_loop(lambda c: (c < limit).squeeze(), lambda c: c * 2.0, x)

    limits = jnp.asarray([3.0, 10.0, 40.0])
    x = Shifted(jnp.full((1,), 0.5, jnp.float32), jnp.float32(0.5))
    out = implicit(jax.vmap(f, in_axes=(None, 0)))(x, limits)
    close(out, np.array([[4.0], [16.0], [64.0]]))


@dataclasses.dataclass
class Opaque(ImplicitArray):
    """A value type that refuses to materialize (as some quax value types do)."""

    array: jax.Array

    def aval(self):
        return jax.core.ShapedArray(self.array.shape, self.array.dtype)

    def materialize(self):
        raise NotImplementedError("Opaque values are never materialized")


@register("lt")
def _opaque_lt(x: Opaque, y: jax.Array, **params):
    return Opaque(x.array < y)


@register("mul")
def _opaque_mul(x: Opaque, y: jax.Array, **params):
    return Opaque(x.array * y)


@register("convert_element_type")
def _opaque_convert(x: Opaque, *, new_dtype, **params):
    return Opaque(x.array.astype(new_dtype))


def test_a_predicate_or_index_that_cannot_materialize_is_read_through_its_one_leaf():
    # quax reads a value used as a loop predicate through its leaves; jaxcore materializes
    # it, and falls back to quax's reading for a type whose materialize is not
    # implemented and whose one leaf has the predicate's shape and dtype.
    out = implicit(lambda x: jax.lax.while_loop(lambda c: c < 10.0, lambda c: c * 2.0, x))(
        Opaque(jnp.float32(1.0))
    )
    assert isinstance(out, Opaque)
    np.testing.assert_allclose(out.array, 16.0)
    index = implicit(lambda i, x: jax.lax.cond(i, lambda: x * 2.0, lambda: x * 3.0))(
        Opaque(jnp.bool_(False)), jnp.float32(1.0)
    )
    np.testing.assert_allclose(index, 3.0)
    # A type that cannot materialize and has no such leaf still raises its own error.
    with pytest.raises(NotImplementedError, match="never materialized"):
        implicit(lambda p: jax.lax.cond(p, lambda: 1.0, lambda: 2.0))(
            OpaquePair(jnp.bool_(True), jnp.bool_(False))
        )


@dataclasses.dataclass
class OpaquePair(ImplicitArray):
    """Two boolean leaves standing for one boolean, never materialized."""

    first: jax.Array
    second: jax.Array

    def aval(self):
        return jax.core.ShapedArray((), jnp.bool_)

    def materialize(self):
        raise NotImplementedError("OpaquePair values are never materialized")


def _to_array(x: float | list) -> jax.Array:
    return jnp.asarray(x, jnp.float32)


@dataclasses.dataclass
class Converted(ImplicitArray):
    """A value whose field converts what the constructor is given."""

    array: jax.Array = ji.field(converter=_to_array)
    tag: str = aux_field(default="t", converter=str)
    plain: int = aux_field(default=0)

    def materialize(self):
        return self.array


def test_init_annotates_converter_fields_with_what_the_converter_takes():
    # As equinox does for quax's values: a runtime type checker wrapping __init__ (e.g.
    # jaxtyping's import hook, which quax's own test suite runs under) sees the
    # converter's input type, not the field's, for a field with a converter.
    hints = tp.get_type_hints(Converted.__init__)
    assert hints["array"] == (float | list)
    assert hints["tag"] is tp.Any  # str() has no annotated parameter
    assert hints["plain"] is int  # no converter: the field's own type
    value = Converted([1.0, 2.0], tag=3)
    assert isinstance(value.array, jax.Array) and value.tag == "3"
    close(implicit(lambda v: v * 2.0)(value), np.array([2.0, 4.0]))

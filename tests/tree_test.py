"""Tests for jaxcore.tree: pytree dataclasses, static fields and post-init control."""

import dataclasses
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tree_test_util import Point

from jaxcore import tree as jt

# ---------------------------------------------------------------------------
# dataclass / field
# ---------------------------------------------------------------------------


def test_dataclass_is_frozen_pytree_with_getattr_keys():
    p = Point(jnp.arange(3.0), jnp.ones(2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 1.0
    pairs, treedef = jax.tree_util.tree_flatten_with_path(p)
    assert [path for path, _ in pairs] == [
        (jax.tree_util.GetAttrKey("x"),),
        (jax.tree_util.GetAttrKey("y"),),
    ]
    assert treedef.num_leaves == 2
    rebuilt = jax.tree_util.tree_unflatten(treedef, [leaf for _, leaf in pairs])
    assert type(rebuilt) is Point and rebuilt.tag == "p"
    np.testing.assert_array_equal(rebuilt.x, np.arange(3.0))


def test_dataclass_with_arguments_passes_them_through():
    @jt.dataclass(frozen=False, order=True, kw_only=True)
    class Mutable:
        a: int
        b: int = 0

    m = Mutable(a=1, b=2)
    m.a = 5
    assert m.a == 5
    assert Mutable(a=1) < Mutable(a=2)
    with pytest.raises(TypeError):
        Mutable(1, 2)  # kw_only
    assert jax.tree_util.tree_leaves(m) == [5, 2]


@pytest.mark.parametrize("weakref_slot", [False, True])
def test_slots_dataclass_round_trips(weakref_slot):
    @jt.dataclass(slots=True, weakref_slot=weakref_slot)
    class Slotted:
        a: jax.Array
        n: int = jt.field(default=2, static=True)

    s = Slotted(jnp.ones(3))
    assert not hasattr(s, "__dict__")
    leaves, treedef = jax.tree_util.tree_flatten(s)
    back = treedef.unflatten([leaves[0] * 4])
    assert type(back) is Slotted and back.n == 2
    np.testing.assert_array_equal(back.a, 4 * np.ones(3))


def test_static_field_goes_to_treedef_and_controls_retracing():
    traces = []

    @jax.jit
    def scale(p):
        traces.append(p.tag)
        return p.x * len(p.tag)

    np.testing.assert_allclose(scale(Point(jnp.ones(2), jnp.ones(2), tag="ab")), [2.0, 2.0])
    scale(Point(jnp.zeros(2), jnp.ones(2), tag="ab"))
    np.testing.assert_allclose(scale(Point(jnp.ones(2), jnp.ones(2), tag="abc")), [3.0, 3.0])
    assert traces == ["ab", "abc"]
    assert jax.tree_util.tree_leaves(Point(1.0, 2.0, tag="zz")) == [1.0, 2.0]
    assert jax.tree_util.tree_structure(Point(1.0, 2.0, "a")) != jax.tree_util.tree_structure(
        Point(1.0, 2.0, "b")
    )


def test_grad_and_vmap_through_dataclass():
    p = Point(jnp.array([1.0, 2.0]), jnp.array([3.0, -1.0]))
    g = jax.grad(lambda q: jnp.sum(q.x**2 * q.y))(p)
    assert isinstance(g, Point)
    np.testing.assert_allclose(g.x, 2 * np.array([1.0, 2.0]) * np.array([3.0, -1.0]))
    np.testing.assert_allclose(g.y, np.array([1.0, 4.0]))
    batched = Point(jnp.arange(6.0).reshape(3, 2), jnp.ones((3, 2)))
    out = jax.vmap(lambda q: jnp.dot(q.x, q.y))(batched)
    np.testing.assert_allclose(out, np.arange(6.0).reshape(3, 2).sum(1))


@dataclasses.dataclass(frozen=True)
class _Frozen:
    """A frozen (plain) dataclass holding an array: unhashable, == raises on arrays."""

    table: np.ndarray
    name: str = "t"


def _static_values():
    return {
        "dict": ({"a": 1, "b": (2, 3)}, {"b": (2, 3), "a": 1}, {"a": 2, "b": (2, 3)}),
        "list": ([1, 2], [1, 2], [1, 3]),
        "numpy tuple": (
            (np.arange(3), np.ones((2, 2))),
            (np.arange(3), np.ones((2, 2))),
            (np.arange(3), np.full((2, 2), 2.0)),
        ),
        "frozen dataclass": (
            _Frozen(np.arange(4)),
            _Frozen(np.arange(4)),
            _Frozen(np.arange(4) * 2),
        ),
        "jax array": (jnp.arange(3.0), jnp.arange(3.0), jnp.arange(3.0) + 1),
        "numpy dtype change": (
            np.zeros(2, np.float32),
            np.zeros(2, np.float32),
            np.zeros(2, np.float64),
        ),
    }


@pytest.mark.parametrize("kind", list(_static_values()))
def test_static_field_accepts_unhashable_values_and_caches_by_content(kind):
    value, equal, different = _static_values()[kind]
    p = Point(jnp.ones(2), jnp.ones(2), tag=value)
    leaves, treedef = jax.tree_util.tree_flatten(p)
    back = treedef.unflatten(leaves)
    assert back.tag is value  # the object itself travels through the treedef
    traces = []

    @jax.jit
    def f(q):
        traces.append(1)
        return q.x * 2

    f(p)
    f(Point(jnp.zeros(2), jnp.ones(2), tag=value))
    f(Point(jnp.zeros(2), jnp.ones(2), tag=equal))  # a new object, equal content: no retrace
    assert len(traces) == 1
    f(Point(jnp.zeros(2), jnp.ones(2), tag=different))
    assert len(traces) == 2
    assert jax.tree_util.tree_structure(p) == jax.tree_util.tree_structure(
        Point(1.0, 1.0, tag=equal)
    )
    assert jax.tree_util.tree_structure(p) != jax.tree_util.tree_structure(
        Point(1.0, 1.0, tag=different)
    )


def test_static_value_mutated_in_place_retraces_instead_of_reusing_a_stale_program():
    table = np.array([1.0, 2.0])
    seen = []

    @jax.jit
    def f(q):
        seen.append(float(q.tag.sum()))  # the static table is baked into the program
        return q.x * float(q.tag.sum())

    np.testing.assert_allclose(f(Point(jnp.ones(1), jnp.ones(1), tag=table)), [3.0])
    table[0] = 10.0
    np.testing.assert_allclose(f(Point(jnp.ones(1), jnp.ones(1), tag=table)), [12.0])
    assert seen == [3.0, 12.0]


def test_unhashable_static_value_without_content_rule_compares_by_identity():
    class Handle:
        __hash__ = None  # unhashable, no content rule: identity

    h = Handle()
    same = jax.tree_util.tree_structure(Point(1.0, 1.0, tag=h))
    assert same == jax.tree_util.tree_structure(Point(2.0, 2.0, tag=h))
    assert same != jax.tree_util.tree_structure(Point(1.0, 1.0, tag=Handle()))


def test_static_field_holding_a_dict_scatter_args():
    """jaxcore's own ScatterArgs (a dict) fits in a static field."""

    @jt.dataclass
    class Buffer:
        data: jax.Array
        scatter_args: dict = jt.field(default_factory=lambda: {"mode": "drop"}, static=True)

    b = Buffer(jnp.zeros(3))
    out = jax.jit(lambda b: jt.tree_scatter_set(b, Buffer(jnp.ones(1)), jnp.array([5]), {}))(b)
    np.testing.assert_array_equal(out.data, [0.0, 0.0, 0.0])  # index 5 dropped


def test_static_field_rejects_tracer_under_jit():
    with pytest.raises(TypeError, match=r"Point\.tag is a static field .* holds a JAX tracer"):
        jax.jit(lambda v: Point(v, v, tag=v))(1.0)
    with pytest.raises(TypeError, match=r"Point\.tag is a static field .* holds a JAX tracer"):
        jax.jit(lambda v: jax.tree_util.tree_flatten(Point(v, v, tag=(1, v))))(1.0)


def test_static_field_defaults():
    with pytest.raises(
        TypeError, match=r"default of this field\(static=True\) is a static field .* tracer"
    ):
        jax.jit(lambda v: jt.field(default=v, static=True))(1.0)

    @jt.dataclass
    class Nested:
        n: tuple = dataclasses.field(default=([1],), metadata={"static": True})

    assert jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(Nested()), []).n == ([1],)


def test_dataclass_marker_and_idempotence():
    assert Point._jax_dataclass is True
    assert jt.dataclass(Point) is Point  # already registered: returned unchanged

    @dataclasses.dataclass
    class Plain:
        a: jax.Array

    assert not hasattr(Plain, "_jax_dataclass")

    @jt.dataclass
    class Sub(Point):
        z: jax.Array = 0.0

    assert "_jax_dataclass" in Sub.__dict__
    assert len(jax.tree_util.tree_leaves(Sub(1.0, 2.0, z=3.0))) == 3


def test_field_errors_and_metadata():
    with pytest.raises(ValueError, match="both default and default_factory"):
        jt.field(default=1, default_factory=list)
    with pytest.raises(TypeError, match=r"metadata\['static'\]=True contradicts static=False"):
        jt.field(metadata={"static": True})
    f = jt.field(default=1, metadata={"unit": "m"}, static=True)
    assert f.metadata == {"unit": "m", "static": True}
    lf = jt.lens_field(default=0.0)
    assert lf.metadata["jaxcore_lens"] is True and lf.metadata["static"] is False


def test_field_default_factory_and_init_false_fields_are_children():
    @jt.dataclass
    class WithDerived:
        a: jax.Array = jt.field(default_factory=lambda: jnp.zeros(2))
        b: jax.Array = jt.field(init=False)

        def __post_init__(self):
            object.__setattr__(self, "b", self.a + 1)

    w = WithDerived()
    np.testing.assert_array_equal(w.b, [1.0, 1.0])
    doubled = jax.tree_util.tree_map(lambda v: v * 2, w)
    np.testing.assert_array_equal(doubled.b, [2.0, 2.0])


def test_dataclass_rejects_non_class():
    with pytest.raises(TypeError, match="expects a class"):
        jt.dataclass(lambda: None)


def test_unflatten_bypasses_init_and_post_init():
    calls = []

    @jt.dataclass
    class Checked:
        x: jax.Array

        def __post_init__(self):
            calls.append("post_init")
            if jnp.ndim(self.x) != 1:
                raise ValueError("x must be 1-D")

    c = Checked(jnp.ones(3))
    assert calls == ["post_init"]
    # tree_map to scalars would violate the invariant; unflatten must not check.
    reduced = jax.tree_util.tree_map(jnp.sum, c)
    assert calls == ["post_init"] and float(reduced.x) == 3.0
    jax.jit(lambda v: v)(c)
    assert calls == ["post_init"]


# ---------------------------------------------------------------------------
# no_post_init / skip_post_init_if_disabled
# ---------------------------------------------------------------------------


@jt.dataclass
class Positive:
    x: float

    @jt.skip_post_init_if_disabled
    def __post_init__(self):
        if self.x <= 0:
            raise ValueError(f"x must be positive, got {self.x}")


def test_no_post_init_suppresses_opted_in_validation_and_nests():
    with pytest.raises(ValueError, match="x must be positive, got -1"):
        Positive(-1)
    with jt.no_post_init():
        assert Positive(-1).x == -1
        with jt.no_post_init():
            assert Positive(-2).x == -2
        assert Positive(-3).x == -3  # still disabled after the inner block
    with pytest.raises(ValueError, match="x must be positive"):
        Positive(-1)


def test_no_post_init_is_scoped_to_the_current_thread():
    errors = []

    def build():
        try:
            Positive(-1)
        except ValueError as err:
            errors.append(str(err))

    with jt.no_post_init():
        worker = threading.Thread(target=build)
        worker.start()
        worker.join()
    assert errors == ["x must be positive, got -1"]


def test_no_post_init_restores_state_after_exception():
    with pytest.raises(RuntimeError), jt.no_post_init():
        raise RuntimeError("boom")
    with pytest.raises(ValueError):
        Positive(-1)


def test_no_post_init_does_not_skip_undecorated_post_init_or_static_checks():
    @jt.dataclass
    class Strict:
        x: float
        n: object = jt.field(default=1, static=True)

        def __post_init__(self):
            raise ValueError("always validated")

    with jt.no_post_init():
        with pytest.raises(ValueError, match="always validated"):
            Strict(1.0)
        with pytest.raises(TypeError, match="static field"):
            jax.jit(lambda v: Point(v, v, tag=v))(1.0)


def test_skip_post_init_if_disabled_rejects_non_callable():
    with pytest.raises(TypeError, match="expects a __post_init__ method, got int"):
        jt.skip_post_init_if_disabled(3)

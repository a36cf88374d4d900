"""Cached interpreter traces ("plans") of jax.numpy calls on implicit arrays under jit.

A plan must stage exactly what the interpreter would, and must never be replayed
after something it depended on changed: the handler or kernel registries, the
fallback-warning switches, JAX's configuration.
"""

import dataclasses
import warnings

import implicit_test_util
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcore.implicit as ji
from jaxcore import kernels
from jaxcore.implicit import ImplicitArray, aux_field, implicit, register
from jaxcore.quant import ArrayNF4


def _x(shape=(4, 8), seed=0):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


def test_staged_program_equals_plain_jnp_and_handlers_run_once_per_signature():
    Scaled = implicit_test_util.scaled_class()
    calls = []

    @register("mul")
    def _mul(x: Scaled, y: jax.Array, **params):
        calls.append(1)
        return Scaled(x.value * y, scale=x.scale)

    s = Scaled(_x(), scale=2.0)

    def chain(a):
        for factor in (1.5, 2.0, 0.5):
            a = a * factor
        return a

    # Fresh functions, so JAX's own tracing caches cannot hide a re-run.
    first = jax.make_jaxpr(implicit(lambda a: chain(a)))(s)
    second = jax.make_jaxpr(implicit(lambda a: chain(a)))(s)
    reference = jax.make_jaxpr(lambda v: chain(v))(s.value)
    assert str(first) == str(reference)
    assert str(second) == str(reference)
    # Three multiplications of the same signature: the handler ran once, for the plan.
    assert len(calls) == 1

    out = jax.jit(implicit(lambda a: chain(a)))(s)
    assert type(out) is Scaled and out.scale == 2.0
    np.testing.assert_allclose(
        np.asarray(out.materialize()), np.asarray(s.value) * 2.0 * 1.5 * 2.0 * 0.5, rtol=1e-6
    )


def test_a_new_handler_replaces_the_fallback_in_traced_and_eager_code():
    Scaled = implicit_test_util.scaled_class()
    s = Scaled(_x(), scale=3.0)
    expected = -np.asarray(s.value) * 3.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ji.MaterializationWarning)
        before_jit = jax.jit(implicit(lambda a: -a))(s)
        before_eager = implicit(lambda a: -a)(s)
    assert not isinstance(before_jit, ImplicitArray)
    assert not isinstance(before_eager, ImplicitArray)
    np.testing.assert_allclose(np.asarray(before_jit), expected, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(before_eager), expected, rtol=1e-6)

    @register("neg")
    def _neg(x: Scaled):
        return Scaled(-x.value, scale=x.scale)

    after_jit = jax.jit(implicit(lambda a: -a))(s)
    after_eager = implicit(lambda a: -a)(s)
    for out in (after_jit, after_eager):
        assert type(out) is Scaled
        np.testing.assert_allclose(np.asarray(out.materialize()), expected, rtol=1e-6)


def test_a_newly_registered_kernel_is_used_by_the_next_trace():
    w = _x((128, 16), seed=1)
    x = _x((4, 128), seed=2)
    q = ArrayNF4.quantize(w, block_size=64)
    dense = np.asarray(x) @ np.asarray(q.materialize())
    original = kernels.registered_kernels("quantized_matmul")["cpu"]

    def doubled(*args, **kwargs):
        return 2 * original(*args, **kwargs)

    np.testing.assert_allclose(
        np.asarray(jax.jit(implicit(lambda a, b: a @ b))(x, q)), dense, rtol=1e-4, atol=1e-4
    )
    kernels.register_kernel("quantized_matmul", "cpu", doubled)
    try:
        out = jax.jit(implicit(lambda a, b: a @ b))(x, q)
        np.testing.assert_allclose(np.asarray(out), 2 * dense, rtol=1e-4, atol=1e-4)
    finally:
        kernels.register_kernel("quantized_matmul", "cpu", original)
    out = jax.jit(implicit(lambda a, b: a @ b))(x, q)
    np.testing.assert_allclose(np.asarray(out), dense, rtol=1e-4, atol=1e-4)


def test_fallback_warnings_follow_the_switches_and_resets_under_jit():
    Scaled = implicit_test_util.scaled_class()
    s = Scaled(_x(), scale=2.0)

    def trace_sin():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            jax.make_jaxpr(implicit(lambda a: jnp.sin(a)))(s)
        return [w for w in caught if issubclass(w.category, ji.MaterializationWarning)]

    with ji.materialization_warnings(False):
        assert trace_sin() == []
    # Switched back on: the cached trace made while they were off must not be replayed.
    assert len(trace_sin()) == 1
    assert trace_sin() == []  # once per (primitive, type)
    ji.reset_materialization_warnings()
    assert len(trace_sin()) == 1


def test_handlers_run_under_the_callers_jax_configuration():
    Scaled = implicit_test_util.scaled_class()

    @register("add")
    def _add(x: Scaled, y: jax.Array, **params):
        # Mixes float32 with int32: allowed by standard promotion, an error under strict.
        return Scaled(x.value + y + jnp.int32(1), scale=x.scale)

    s = Scaled(_x(), scale=2.0)
    y = _x(seed=3)
    jax.make_jaxpr(implicit(lambda a, b: a + b))(s, y)
    with (
        jax.numpy_dtype_promotion("strict"),
        pytest.raises(jax.dtypes.TypePromotionError, match="strict"),
    ):
        jax.make_jaxpr(implicit(lambda a, b: a + b))(s, y)


def test_handlers_needing_concrete_children_still_work_under_jit():
    @dataclasses.dataclass
    class Shifted(ImplicitArray):
        value: jax.Array
        shift: np.ndarray  # a concrete child the handler reads as a Python number

        def materialize(self):
            return self.value + self.shift

    @register("mul")
    def _mul(x: Shifted, y: jax.Array, **params):
        shift = float(x.shift)  # needs the concrete value: no plan can be traced for it
        return (x.value + shift) * y

    value = _x()
    sh = Shifted(value, np.asarray(0.5, np.float32))
    out = jax.jit(lambda v: implicit(lambda a: a * 2.0)(Shifted(v, sh.shift)))(value)
    np.testing.assert_allclose(np.asarray(out), (np.asarray(value) + 0.5) * 2.0, rtol=1e-6)


def test_unhashable_metadata_falls_back_to_the_interpreter():
    @dataclasses.dataclass
    class Tagged(ImplicitArray):
        value: jax.Array
        tags: list = aux_field()  # unhashable: no cache key can hold it

        def materialize(self):
            return self.value

    @register("mul")
    def _mul(x: Tagged, y: jax.Array, **params):
        return Tagged(x.value * y, tags=x.tags + ["mul"])

    t = Tagged(_x(), tags=[])
    out = jax.jit(implicit(lambda a: a * 3.0 * 2.0))(t)
    assert type(out) is Tagged and out.tags == ["mul", "mul"]
    np.testing.assert_allclose(np.asarray(out.value), np.asarray(t.value) * 6.0, rtol=1e-6)

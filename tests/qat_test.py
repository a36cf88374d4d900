"""Quantization-aware training: `ste` around a function that returns a quantized array.

The reference everywhere is the dense straight-through estimator written out by hand,
``x @ (w + stop_gradient(dequantize(quantize(w)) - w))``, evaluated with ordinary JAX
on the materialized weight; the code under test never materializes it.
"""

import re

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcore.implicit import StraightThrough, implicit, ste
from jaxcore.quant import ArrayInt4, ArrayInt8, ArrayNF4

K, N, M = 128, 64, 8

FORMATS = {
    "int8": lambda w: ArrayInt8.quantize(w),
    "int4": lambda w: ArrayInt4.quantize(w, 32),
    "nf4": lambda w: ArrayNF4.quantize(w, 64),
    "nf4_double_quant": lambda w: ArrayNF4.quantize(w, 64, True),
}


def _heads(a):
    return a.reshape(1, M, 4, N // 4)


# Ways a (K, N) weight ``q`` is used; each maps (x: (M, K), q) to an (M, N) array.
USES = {
    "x @ q": lambda x, q: x @ q,
    "q.T @ x": lambda x, q: (q.T @ x.T).T,
    "einsum": lambda x, q: jnp.einsum("bmk,kn->bmn", x.reshape(2, M // 2, K), q).reshape(M, N),
    "jax.nn layer": lambda x, q: jax.nn.gelu(jax.nn.standardize(x, axis=-1) @ q),
    "jax.nn attention": lambda x, q: jax.nn.dot_product_attention(
        _heads(x @ q), _heads(jnp.tanh(x) @ q), _heads(x @ q)
    ).reshape(M, N),
}


def _operands(seed=0):
    rng = np.random.default_rng(seed)
    w = jnp.asarray(rng.normal(size=(K, N)).astype(np.float32) / 8)
    x = jnp.asarray(rng.normal(size=(M, K)).astype(np.float32))
    return w, x


def _dense_straight_through(quantize, w):
    """The textbook straight-through weight: the dequantized value, w's gradient."""
    return w + jax.lax.stop_gradient(quantize(w).materialize() - w)


def _losses(quantize):
    """(loss under test, dense reference loss), both summed over every use."""

    def under_test(w, x):
        q = ste(quantize)(w)
        return sum(jnp.sum(jnp.sin(implicit(use)(x, q))) for use in USES.values())

    def reference(w, x):
        wq = _dense_straight_through(quantize, w)
        return sum(jnp.sum(jnp.sin(use(x, wq))) for use in USES.values())

    return under_test, reference


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_gradients_equal_the_dense_straight_through_ones(fmt):
    quantize = FORMATS[fmt]
    w, x = _operands()
    under_test, reference = _losses(quantize)
    value, grads = jax.jit(jax.value_and_grad(under_test, argnums=(0, 1)))(w, x)
    ref_value, ref_grads = jax.value_and_grad(reference, argnums=(0, 1))(w, x)
    np.testing.assert_allclose(value, ref_value, rtol=1e-5)
    for got, want in zip(grads, ref_grads):  # master weight, then activations
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(jnp.abs(want).max()))


@pytest.mark.parametrize("use", sorted(USES))
def test_each_use_alone_eagerly(use):
    quantize = FORMATS["nf4"]
    w, x = _operands(1)
    fn = USES[use]
    got = jax.grad(lambda w, x: jnp.sum(implicit(fn)(x, ste(quantize)(w)) ** 2), (0, 1))(w, x)
    want = jax.grad(lambda w, x: jnp.sum(fn(x, _dense_straight_through(quantize, w)) ** 2), (0, 1))(
        w, x
    )
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * float(jnp.abs(b).max()))


def _is_weight_shaped(aval):
    return tuple(aval.shape) in ((K, N), (N, K)) and jnp.issubdtype(aval.dtype, jnp.floating)


def _sub_jaxprs(eqn):
    for param in eqn.params.values():
        for sub in param if isinstance(param, (tuple, list)) else (param,):
            inner = getattr(sub, "jaxpr", sub)
            if hasattr(inner, "eqns"):
                yield inner


def _dequantized(jaxpr, tainted, top=True):
    """Float (K, N) or (N, K) values computed from quantized codes, in ``jaxpr`` and below.

    A value is tainted when it is an integer array made at the top level (the codes a
    quantizer returns; its own integer intermediates do not count) or is computed from
    one; taint follows operands into nested jaxprs (jit, custom_jvp...). Primitives
    without a nested jaxpr, such as the quantized-matmul kernel, are opaque: what a
    kernel does inside is its own business, what counts is that nothing around it
    dequantizes the weight.
    """
    found = []
    for eqn in jaxpr.eqns:
        hit = [not isinstance(v, jax.extend.core.Literal) and v in tainted for v in eqn.invars]
        subs = list(_sub_jaxprs(eqn))
        out_tainted = [False] * len(eqn.outvars)
        for sub in subs:
            if len(sub.invars) == len(eqn.invars):
                inner = {v for v, t in zip(sub.invars, hit) if t}
            else:  # operands do not map one to one: taint conservatively
                inner = set(sub.invars) if any(hit) else set()
            inner_found, inner_out = _dequantized(sub, inner, top=False)
            found += inner_found
            if len(inner_out) == len(eqn.outvars):
                out_tainted = [a or b for a, b in zip(out_tainted, inner_out)]
        if not subs and any(hit):
            out_tainted = [True] * len(eqn.outvars)
        for var, t in zip(eqn.outvars, out_tainted):
            if t or (top and jnp.issubdtype(var.aval.dtype, jnp.integer)):
                tainted.add(var)
                if t and _is_weight_shaped(var.aval):
                    found.append(eqn.primitive.name)
    return found, [v in tainted for v in jaxpr.outvars]


def _weight_shaped_in_hlo(fn, *args):
    """How many float32 (K, N) or (N, K) arrays the compiled ``fn`` computes."""
    hlo = jax.jit(fn).lower(*args).compile().as_text()
    return len(re.findall(rf"= f32\[(?:{K},{N}|{N},{K})\]", hlo))


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_forward_pass_runs_the_kernel_and_forms_no_dense_weight(fmt):
    quantize = FORMATS[fmt]
    w, x = _operands()
    uses = lambda x, q: jax.nn.relu(x @ q) + (q.T @ x.T).T + jnp.einsum("mk,kn->mn", x, q)
    forward = lambda w, x: implicit(uses)(x, ste(quantize)(w))
    jaxpr = jax.make_jaxpr(forward)(w, x).jaxpr
    names = {eqn.primitive.name for eqn in jaxpr.eqns} | {
        eqn.primitive.name for e in jaxpr.eqns for sub in _sub_jaxprs(e) for eqn in sub.eqns
    }
    # (quantized_matmul_dq: double-quantized scales, where a kernel reads them compressed)
    assert {"quantized_matmul", "quantized_matmul_dq"} & names
    assert _dequantized(jaxpr, set())[0] == [], "the forward pass dequantized the weight"
    # The check has teeth: ste of the materialized weight dequantizes it.
    through_dense = ste(lambda v: quantize(v).materialize())
    dense_jaxpr = jax.make_jaxpr(lambda w, x: uses(x, through_dense(w)))(w, x).jaxpr
    assert _dequantized(dense_jaxpr, set())[0] != []
    wq = quantize(w).materialize()
    np.testing.assert_allclose(forward(w, x), uses(x, wq), rtol=1e-5, atol=1e-4)
    # In the compiled program too, ste adds no (K, N) array to what the quantized array
    # alone costs (the kernel's own work included: the portable reference dequantizes
    # slab by slab, and XLA may give a slab the whole weight's shape).
    plain = lambda w, x: implicit(uses)(x, quantize(w))
    assert _weight_shaped_in_hlo(forward, w, x) == _weight_shaped_in_hlo(plain, w, x)


def test_scan_over_layers_and_vmap():
    rng = np.random.default_rng(2)
    layers = jnp.asarray(rng.normal(size=(3, K, K)).astype(np.float32) / np.sqrt(K))
    x = jnp.asarray(rng.normal(size=(M, K)).astype(np.float32))
    quantize = FORMATS["nf4"]

    def network(layers, x, straight_through):
        def body(h, w):
            q = ste(quantize)(w) if straight_through else _dense_straight_through(quantize, w)
            return implicit(lambda h, q: jnp.tanh(h @ q))(h, q), None

        return jnp.sum(jax.lax.scan(body, x, layers)[0] ** 2)

    loss = jax.jit(jax.value_and_grad(network, argnums=(0, 1)), static_argnums=2)
    (value, grads), (ref_value, ref_grads) = loss(layers, x, True), loss(layers, x, False)
    np.testing.assert_allclose(value, ref_value, rtol=1e-5)
    # Gradients are O(1): compare to float32 rounding of the kernel's summation order.
    close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    for a, b in zip(grads, ref_grads):
        close(a, b)
    assert "quantized_matmul" in str(jax.make_jaxpr(network, static_argnums=2)(layers, x, True))

    # Per-example gradients (vmap over the batch) and a batch of models (vmap over weights).
    per_example = jax.jit(jax.vmap(jax.grad(network), in_axes=(None, 0, None)), static_argnums=2)
    close(per_example(layers, x[:, None], True), per_example(layers, x[:, None], False))
    per_model = jax.jit(jax.vmap(jax.grad(network), in_axes=(0, None, None)), static_argnums=2)
    models = jnp.stack([layers, 0.5 * layers])
    close(per_model(models, x, True), per_model(models, x, False))


def test_extra_arguments_get_no_gradient_and_keywords_pass_through():
    w, x = _operands()

    @ste
    def quantize_scaled(w, scale, block_size=64):
        return ArrayNF4.quantize(w * scale, block_size=block_size)

    def loss(w, scale):
        q = quantize_scaled(w, scale, block_size=32)
        assert isinstance(q, StraightThrough) and q.value.block_size == 32
        return jnp.sum(x @ q)

    grad_w, grad_scale = jax.grad(loss, argnums=(0, 1))(w, 2.0)
    assert float(grad_scale) == 0.0
    np.testing.assert_allclose(grad_w, jnp.broadcast_to(x.sum(0)[:, None], (K, N)), rtol=1e-6)


def test_forward_mode_and_the_seed_example():
    w, x = _operands()

    @ste
    def quantize_nf4(weights, block_size=64):
        return ArrayNF4.quantize(weights, block_size)

    quantized = quantize_nf4(w)  # forward: the quantized weight, as it is
    assert isinstance(quantized.value, ArrayNF4)
    np.testing.assert_array_equal(quantized.materialize(), ArrayNF4.quantize(w, 64).materialize())
    tangent = jnp.ones_like(w)
    _, got = jax.jvp(lambda w: jnp.sum(x @ quantize_nf4(w)), (w,), (tangent,))
    _, want = jax.jvp(
        lambda w: jnp.sum(x @ _dense_straight_through(FORMATS["nf4"], w)), (w,), (tangent,)
    )
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_errors_name_the_problem():
    w, _ = _operands()
    with pytest.raises(
        ValueError, match=r"returned shape \(64, 128\) for an input of shape \(128, 64\)"
    ):
        ste(lambda v: ArrayNF4.quantize(v.T, 64))(w)
    with pytest.raises(TypeError, match=r"ste\(<lambda>\) returned a tuple"):
        ste(lambda v: (v, v))(w)


# --------------------------------------------------------------------------- QAT


D_IN, HIDDEN, D_OUT, BATCH, STEPS, NOISE = 64, 128, 16, 128, 300, 0.3


def _gelu(x):  # jax.nn.gelu's tanh approximation, in NumPy
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def _dataset(seed, n):
    """Inputs and noisy targets from a fixed random teacher MLP of the student's shape."""
    teacher = np.random.default_rng(0)
    t1 = teacher.normal(size=(D_IN, HIDDEN)) / np.sqrt(D_IN)
    t2 = teacher.normal(size=(HIDDEN, D_OUT)) / np.sqrt(HIDDEN)
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, D_IN))
    y = _gelu(x @ t1) @ t2 + NOISE * rng.normal(size=(n, D_OUT))
    return x.astype(np.float32), y.astype(np.float32)


@ste
def _nf4(w, block_size=64):
    return ArrayNF4.quantize(w, block_size)


def _mlp(params, x):
    return jax.nn.gelu(x @ params["w1"]) @ params["w2"]


def _loss(params, x, y, quantized):
    if quantized:  # NF4 weights in the forward pass, gradients to the float32 masters
        params = {name: _nf4(w) for name, w in params.items()}
    return jnp.mean((implicit(_mlp)(params, x) - y) ** 2)


def _adam(grads, state, params, lr=1e-2, b1=0.9, b2=0.999, eps=1e-8):
    m, v, t = state
    t = t + 1
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
    v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
    params = jax.tree.map(
        lambda p, m, v: p - lr * (m / (1 - b1**t)) / (jnp.sqrt(v / (1 - b2**t)) + eps), params, m, v
    )
    return params, (m, v, t)


def _train(quantized, train_set, test_set):
    """Trains the MLP for STEPS Adam steps on minibatches; returns (test loss, traces)."""
    rng = np.random.default_rng(1)
    params = {
        "w1": jnp.asarray(rng.normal(size=(D_IN, HIDDEN)).astype(np.float32) / np.sqrt(D_IN)),
        "w2": jnp.asarray(rng.normal(size=(HIDDEN, D_OUT)).astype(np.float32) / np.sqrt(HIDDEN)),
    }
    zeros = jax.tree.map(jnp.zeros_like, params)
    state = (zeros, zeros, jnp.zeros((), jnp.int32))
    traces = []

    @jax.jit
    def step(params, state, x, y):
        traces.append(None)  # runs once per trace
        loss, grads = jax.value_and_grad(_loss)(params, x, y, quantized)
        params, state = _adam(grads, state, params)
        return params, state, loss

    x, y = train_set
    for i in range(STEPS):
        batch = slice((i * BATCH) % len(x), (i * BATCH) % len(x) + BATCH)
        params, state, _ = step(params, state, x[batch], y[batch])
    return float(jax.jit(_loss, static_argnums=3)(params, *test_set, quantized)), len(traces)


def test_two_layer_mlp_trained_with_nf4_weights_reaches_the_float32_loss():
    train_set, test_set = _dataset(1, 64 * BATCH), _dataset(2, 2048)
    float32_loss, float32_traces = _train(False, train_set, test_set)
    nf4_loss, nf4_traces = _train(True, train_set, test_set)
    assert float32_traces == nf4_traces == 1  # each step function is traced (jitted) once
    assert float32_loss < 0.5 * float(np.mean(test_set[1] ** 2))  # it learned something
    assert nf4_loss <= 1.1 * float32_loss, (nf4_loss, float32_loss)

"""Indexing a stack of quantized weights under implicit: stays quantized, matches NumPy."""

import jax
import jax.extend.core as jax_core
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxcore import kernels
from jaxcore.implicit import implicit
from jaxcore.kernels import plugin_api  # noqa: F401  (kernels.plugin_api below)
from jaxcore.quant import ArrayInt4, ArrayInt8, ArrayNF4

K, N = 64, 32

FORMATS = {
    "int8": lambda w: ArrayInt8.quantize(w),
    "int8-b16-axis1": lambda w: ArrayInt8.quantize(w, axis=1, block_size=16),
    "int4": lambda w: ArrayInt4.quantize(w, 16),
    "nf4": lambda w: ArrayNF4.quantize(w, 16),
    "nf4-dq": lambda w: ArrayNF4.quantize(w, 16, double_quant=True),
}


@pytest.fixture(autouse=True)
def reference_kernel_only(monkeypatch):
    """Runs against the portable reference alone (plugin kernels have their own tests)."""
    monkeypatch.delenv(kernels.INTERPRET_ENV_VAR, raising=False)
    saved = kernels.registered_kernels("quantized_matmul")
    for platform in saved:
        if platform != "cpu":
            kernels.unregister_kernel("quantized_matmul", platform)
    yield
    for platform, impl in saved.items():
        kernels.register_kernel("quantized_matmul", platform, impl)


def stack(fmt, lead=(4,), seed=0):
    """A stack of quantized (K, N) weights, leading shape ``lead``, and its dense float64 twin."""
    w = np.random.default_rng(seed).standard_normal((*lead, K, N)).astype(np.float32)
    quantize = FORMATS[fmt]
    for _ in lead:
        quantize = jax.vmap(quantize)
    q = quantize(w)
    return q, np.asarray(q.materialize(), np.float64)


def primitives(fn, *args):
    """Names of the primitives in ``fn``'s jaxpr, nested jaxprs included."""
    names = set()

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            names.add(eqn.primitive.name)
            for sub in jax_core.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return names


def assert_runs_kernel(fn, *args):
    names = primitives(fn, *args)
    assert "dot_general" not in names, sorted(names)
    kernels = {"quantized_matmul", "quantized_matmul_transposed", "quantized_matmul_dq"}
    assert names & (kernels | {"quantized_matmul_stacked"})


def assert_same_kind(got, q, shape, expected):
    """``got`` is ``q``'s kind of quantized array, of ``shape``, materializing to ``expected``."""
    assert type(got) is type(q)
    assert (got.block_size, got.axis) == (q.block_size, q.axis)
    assert got.shape == shape
    np.testing.assert_allclose(np.asarray(got.materialize(), np.float64), expected, rtol=1e-6)


INDEXINGS = {
    "q[1]": (lambda q: q[1], lambda d: d[1]),
    "q[-1]": (lambda q: q[-1], lambda d: d[-1]),
    "q[1:3]": (lambda q: q[1:3], lambda d: d[1:3]),
    "q[::2]": (lambda q: q[::2], lambda d: d[::2]),
    "q[idx]": (lambda q: q[jnp.array([3, 0, 3])], lambda d: d[[3, 0, 3]]),
    "take": (lambda q: jnp.take(q, jnp.array([[2], [1]]), axis=0), lambda d: d[[[2], [1]]]),
    "reshape": (lambda q: jnp.reshape(q, (2, 2, K, N)), lambda d: d.reshape(2, 2, K, N)),
}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", INDEXINGS)
def test_indexing_the_stack_keeps_the_weights_quantized(fmt, case):
    q, dense = stack(fmt)
    index, index_np = INDEXINGS[case]
    expected = index_np(dense)
    for fn in (implicit(index), jax.jit(implicit(index))):
        assert_same_kind(fn(q), q, expected.shape, expected)


@pytest.mark.parametrize("fmt", FORMATS)
def test_traced_index_and_two_leading_dimensions(fmt):
    q, dense = stack(fmt, lead=(2, 3))

    @jax.jit
    @implicit
    def pick(q, i, j):
        row = lax.dynamic_index_in_dim(q, i, keepdims=False)
        return lax.dynamic_slice_in_dim(row, j, 2), row[j], q[i, j]

    span, one, both = pick(q, 1, 1)
    assert_same_kind(span, q, (2, K, N), dense[1, 1:3])
    assert_same_kind(one, q, (K, N), dense[1, 1])
    assert_same_kind(both, q, (K, N), dense[1, 1])
    # An out-of-range start is clamped, as for a dense array.
    span, _, _ = pick(q, 5, 2)
    assert_same_kind(span, q, (2, K, N), dense[1, 1:3])


@pytest.mark.parametrize("fmt", FORMATS)
def test_fori_loop_over_stacked_layers_runs_the_kernel(fmt):
    q, dense = stack(fmt)
    h = np.random.default_rng(1).standard_normal((3, K)).astype(np.float32)
    square = q.shape[-1] == q.shape[-2]

    def model(h, q):
        # A (K, N) layer maps K to N; pad back to K so the loop carries one shape.
        def layer(i, h):
            y = jnp.tanh(h @ q[i])
            return y if square else jnp.pad(y, ((0, 0), (0, K - N)))

        return lax.fori_loop(0, q.shape[0], layer, h)

    expected = h.astype(np.float64)
    for w in dense:
        expected = np.pad(np.tanh(expected @ w), ((0, 0), (0, K - N)))
    np.testing.assert_allclose(jax.jit(implicit(model))(h, q), expected, rtol=1e-4, atol=1e-4)
    assert_runs_kernel(implicit(model), h, q)


@pytest.mark.parametrize("fmt", ["int8", "nf4-dq"])
def test_grad_through_an_indexed_layer(fmt):
    q, dense = stack(fmt)
    x = np.random.default_rng(2).standard_normal((5, K)).astype(np.float32)

    def loss(x, q, i):
        return jnp.sum(jnp.sin(x @ q[i]))

    got = jax.jit(jax.grad(implicit(loss)))(x, q, 2)
    expected = np.cos(x @ dense[2]) @ dense[2].T
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert_runs_kernel(jax.grad(implicit(loss)), x, q, 2)


@pytest.mark.parametrize("fmt", ["int4", "nf4-dq"])
def test_vmap_over_the_index_and_free_stacking_dimensions(fmt):
    q, dense = stack(fmt)
    x = np.random.default_rng(3).standard_normal((3, K)).astype(np.float32)
    y = np.random.default_rng(4).standard_normal((5, N)).astype(np.float32)
    cases = {
        "vmap index": (
            lambda q: jax.vmap(lambda i: x @ q[i])(jnp.array([0, 3])),
            np.stack([x @ dense[0], x @ dense[3]]),
        ),
        "mk,ekn->emn": (
            lambda q: jnp.einsum("mk,ekn->emn", x, q),
            np.einsum("mk,ekn->emn", x, dense),
        ),
        "mk,ekn->men": (
            lambda q: jnp.einsum("mk,ekn->men", x, q),
            np.einsum("mk,ekn->men", x, dense),
        ),
        "ekn,mn->ekm": (
            lambda q: jnp.einsum("ekn,mn->ekm", q, y),
            np.einsum("ekn,mn->ekm", dense, y),
        ),
        "ekn,mn->mek": (
            lambda q: jnp.einsum("ekn,mn->mek", q, y),
            np.einsum("ekn,mn->mek", dense, y),
        ),
    }
    for label, (fn, expected) in cases.items():
        np.testing.assert_allclose(
            jax.jit(implicit(fn))(q), expected, rtol=1e-5, atol=1e-5, err_msg=label
        )
        assert_runs_kernel(implicit(fn), q)


def test_two_stacking_dimensions_one_batch_one_free():
    q, dense = stack("int8", lead=(2, 3))
    x = np.random.default_rng(5).standard_normal((2, 4, K)).astype(np.float32)
    fn = implicit(lambda x, q: jnp.einsum("bmk,bekn->bemn", x, q))
    np.testing.assert_allclose(
        jax.jit(fn)(x, q), np.einsum("bmk,bekn->bemn", x, dense), rtol=1e-5, atol=1e-5
    )
    assert_runs_kernel(fn, x, q)


# Logical slices of a (K, N) = (64, 32) weight; blocks of 16 rows (of 16 columns for
# "int8-b16-axis1"), per-channel "int8" one block of all 64 rows.
MATRIX_SLICES = {
    "columns": np.s_[:, 8:24],
    "strided columns": np.s_[:, 1:30:3],
    "whole row blocks": np.s_[16:48],
    "row blocks and columns": np.s_[32:64, :5],
    "rows inside a block": np.s_[3:20],
    "strided rows": np.s_[::2],
}
KEPT = {
    "int8": {"columns", "strided columns"},
    "int8-b16-axis1": {"whole row blocks", "rows inside a block", "strided rows"},
}
KEPT_BLOCKS_OF_16_ROWS = {
    "columns",
    "strided columns",
    "whole row blocks",
    "row blocks and columns",
}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", MATRIX_SLICES)
def test_slicing_the_matrix_keeps_whole_blocks_quantized(fmt, case):
    """A fused QKV / gate-up weight split by columns (or by whole blocks) stays quantized."""
    q, dense = stack(fmt)
    index = MATRIX_SLICES[case]
    kept = case in KEPT.get(fmt, KEPT_BLOCKS_OF_16_ROWS)
    got = jax.jit(implicit(lambda q: q[1][index]))(q)
    expected = dense[1][index]
    if kept:
        assert_same_kind(got, q, expected.shape, expected)
        if fmt == "nf4-dq":
            assert not got.double_quant  # its scales' groups span columns: kept as float32
    else:
        assert isinstance(got, jax.Array)
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    x = np.random.default_rng(6).standard_normal((3, expected.shape[0])).astype(np.float32)
    fn = implicit(lambda x, q: x @ q[1][index])
    np.testing.assert_allclose(jax.jit(fn)(x, q), x @ expected, rtol=1e-5, atol=1e-5)
    if kept:
        assert_runs_kernel(fn, x, q)


@pytest.mark.parametrize("fmt", ["int8", "int8-b16-axis1", "int4", "nf4-dq"])
def test_indexing_into_the_matrix_axes_is_dense_and_right(fmt):
    q, dense = stack(fmt)
    single, single_dense = q, dense  # a stack of 4; [0] below is one matrix
    cases = {
        "rows of one matrix": (lambda q: q[0][jnp.array([5, 1, 63])], lambda d: d[0][[5, 1, 63]]),
        "a traced column": (lambda q: q[:, :, jnp.int32(5)], lambda d: d[:, :, 5]),
        "an element row": (lambda q: q[2, 7], lambda d: d[2, 7]),
        "a traced row": (lambda q: q[1][jnp.int32(9)], lambda d: d[1][9]),
        "a fill of 2": (
            lambda q: q.at[jnp.array([0, 9])].get(mode="fill", fill_value=2.0),
            lambda d: np.stack([d[0], np.full((K, N), 2.0)]),
        ),
    }
    for label, (fn, fn_np) in cases.items():
        got = jax.jit(implicit(fn))(single)
        assert isinstance(got, jax.Array), label
        np.testing.assert_allclose(got, fn_np(single_dense), rtol=1e-6, err_msg=label)


@pytest.mark.parametrize("fmt", FORMATS)
def test_out_of_range_picks_in_fill_mode(fmt):
    q, dense = stack(fmt)
    idx = jnp.array([1, 7, -9])
    nan = jax.jit(implicit(lambda q: q.at[idx].get(mode="fill")))(q)
    zero = jax.jit(implicit(lambda q: q.at[idx].get(mode="fill", fill_value=0)))(q)
    assert type(nan) is type(q) and type(zero) is type(q)
    got_nan = np.asarray(nan.materialize())
    np.testing.assert_allclose(got_nan[0], dense[1], rtol=1e-6)
    assert np.isnan(got_nan[1:]).all()
    expected = np.stack([dense[1], np.zeros((K, N)), np.zeros((K, N))])
    np.testing.assert_allclose(np.asarray(zero.materialize()), expected, rtol=1e-6)


# ---------------------------------------------------------------- a stack read in place


@pytest.fixture
def stacked_kernel():
    """A stacked kernel for "cpu" that records its calls and runs jaxcore's sliced product."""
    name = kernels.plugin_api.STACKED_KERNEL_NAME
    saved = kernels.registered_kernels(name)
    calls = []

    def impl(x2d, qvalue, *operands, fmt, block_size, out_dtype, transposed, fallback):
        calls.append((qvalue.shape, transposed, len(operands)))
        return fallback(x2d, qvalue, *operands)

    kernels.register_kernel(name, "cpu", impl)
    yield calls
    kernels.unregister_kernel(name, "cpu")
    for platform, saved_impl in saved.items():
        kernels.register_kernel(name, platform, saved_impl)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.filterwarnings("ignore::jaxcore.implicit.MaterializationWarning")  # jnp.sum(w)
def test_scan_and_loops_hand_the_kernel_the_whole_stack(fmt, stacked_kernel):
    q, dense = stack(fmt)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, K)).astype(np.float32)
    back = rng.standard_normal((N, K)).astype(np.float32) / np.sqrt(N)

    def step(h, w):
        return jnp.tanh(h @ w) @ back + jnp.sum(w[:16, :4]) * 1e-3  # a slice on the side

    def python_loop(x, q):
        for i in range(q.shape[0]):
            x = step(x, q[i])
        return x

    models = {
        "scan": lambda x, q: lax.scan(lambda h, w: (step(h, w), None), x, q)[0],
        "reverse": lambda x, q: lax.scan(lambda h, w: (step(h, w), None), x, q, reverse=True)[0],
        "fori_loop": lambda x, q: lax.fori_loop(0, q.shape[0], lambda i, h: step(h, q[i]), x),
        "python loop": python_loop,
    }
    for label, model in models.items():
        want = x.astype(np.float64)
        for w in dense[::-1] if label == "reverse" else dense:
            want = np.tanh(want @ w) @ back + np.sum(w[:16, :4]) * 1e-3
        stacked_kernel.clear()
        got = jax.jit(implicit(model))(x, q)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=label)
        assert stacked_kernel, label
        assert all(shape == q.qvalue.shape for shape, _, _ in stacked_kernel), label


def test_gradients_and_transposes_of_a_layer_in_place(stacked_kernel):
    q, dense = stack("int8")
    x = np.random.default_rng(8).standard_normal((2, K)).astype(np.float32)
    back = np.random.default_rng(9).standard_normal((K, K)).astype(np.float32) / K

    def loss(x, q):
        def body(h, w):
            return jnp.tanh((h @ w) @ w.T @ back), None  # x @ W, then x @ W.T

        return jnp.sum(lax.scan(body, x, q)[0] ** 2)

    def loss_dense(x, scale):
        h = x
        for i in range(4):
            w = q.qvalue[i].astype(jnp.float32) * scale[i]
            h = jnp.tanh((h @ w) @ w.T @ back)
        return jnp.sum(h**2)

    gx, gq = jax.jit(jax.grad(implicit(loss), argnums=(0, 1), allow_int=True))(x, q)
    want = jax.grad(loss_dense, argnums=(0, 1))(x, q.scale)
    for g, w in zip((gx, gq.scale), want):  # float32 sums of terms up to ~1e4: atol from the max
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-5 * float(np.abs(w).max()))
    assert {t for _, t, _ in stacked_kernel} == {False, True}


def test_an_indexed_layer_is_returned_as_the_sliced_array(stacked_kernel):
    q, dense = stack("nf4-dq")
    for fn in (lambda q: q[2], lambda q: lax.dynamic_index_in_dim(q, 2, keepdims=False)):
        got = jax.jit(implicit(fn))(q)
        assert_same_kind(got, q, (K, N), dense[2])
    # A scan body's layer leaving as ys (here transposed, so not the input forwarded) is
    # stacked as the sliced arrays it stands for.
    ys = jax.jit(implicit(lambda q: lax.scan(lambda c, w: (c, w.T), 0.0, q)[1]))(q)
    assert_same_kind(ys, q.T, (4, N, K), np.swapaxes(dense, 1, 2))

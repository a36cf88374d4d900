"""jaxcore_cpu's stacked product: one matrix of a stack of quantized weights, read in place.

``jaxcore.kernels.quantized_matmul_stacked`` (FFI targets ``jaxcore_cpu_quantized_matmul_
stacked`` and ``..._dq_stacked``) is what a scan over stacked quantized layers, a
``fori_loop`` with ``W[i]`` or a Python loop over ``W[i]`` run on CPU once the plugin is
loaded. The stack reaches the kernel whole (no ``dynamic-slice`` copy of a layer in the
compiled program), and the result must equal the per-matrix native product of the sliced
layer, bit for bit, on every format, precision, M and both products; the index clamps as
``dynamic_slice`` does; gradients and ``vmap`` work; bad operands at the FFI are refused
with errors that name them.

Needs ``libjaxcore_cpu_kernels.so`` as ``cpu_kernels_test`` does.
"""

import re

import jax
import jax.numpy as jnp
import kernel_test_util
import numpy as np
import pytest

import jaxcore_cpu
from jaxcore import kernels, quant
from jaxcore.implicit import implicit
from jaxcore.kernels import plugin_api

kernel_test_util.require_native_cpu_kernels()

KERNELS = (
    "quantized_matmul",
    plugin_api.DQ_KERNEL_NAME,
    plugin_api.TRANSPOSED_KERNEL_NAME,
    plugin_api.STACKED_KERNEL_NAME,
)
L, K, N = 3, 128, 96
FORMATS = {
    "int8": lambda w: quant.ArrayInt8.quantize(w),
    "int8-b32": lambda w: quant.ArrayInt8.quantize(w, block_size=32),
    "int4": lambda w: quant.ArrayInt4.quantize(w, 32),
    "nf4": lambda w: quant.ArrayNF4.quantize(w, 64),
    "nf4-dq": lambda w: quant.ArrayNF4.quantize(w, 64, double_quant=True),
    "int8-axis1": lambda w: quant.ArrayInt8.quantize(w, axis=1, block_size=32),
}


@pytest.fixture(autouse=True)
def native_cpu_kernels(monkeypatch):
    """The plugin's kernels serve CPU; the registry is restored afterwards."""
    monkeypatch.delenv(kernels.INTERPRET_ENV_VAR, raising=False)
    with kernel_test_util.registry_restored(*KERNELS):
        jaxcore_cpu.initialize()
        yield


def stack(fmt, seed=0):
    w = np.random.default_rng(seed).standard_normal((L, K, N)).astype(np.float32)
    return jax.vmap(FORMATS[fmt])(w)


def layer(q, i):
    return jax.tree_util.tree_map(lambda leaf: leaf[i], q)


def compiled(fn, *args) -> str:
    return jax.jit(fn).lower(*args).compile().as_text()


def stacked_targets(hlo: str) -> list[str]:
    return re.findall(r'custom_call_target="(jaxcore_cpu_[a-z_]*)"', hlo)


def no_layer_copy(hlo: str, q) -> bool:
    """Whether no dynamic-slice in ``hlo`` cuts one layer's codes ([1,]rows, cols) out."""
    rows, cols = q.qvalue.shape[1:]
    layer_shape = re.compile(rf"\[(1,)?{rows},{cols}\]")
    return not any(
        ("dynamic-slice" in line or "dynamic_slice" in line) and layer_shape.search(line)
        for line in hlo.splitlines()
    )


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("precision", ["float32", "int8"])
def test_equals_the_per_matrix_product_bit_for_bit(fmt, precision):
    q = stack(fmt)
    rng = np.random.default_rng(1)
    with jaxcore_cpu.set_precision(precision):
        for m in (1, 5, 40):
            for transposed in (False, True):
                x = rng.standard_normal((m, N if transposed else K)).astype(np.float32)
                product = (
                    kernels.quantized_matmul_transposed if transposed else kernels.quantized_matmul
                )

                def both(x, q, i, transposed=transposed, product=product):
                    got = kernels.quantized_matmul_stacked(x, q, i, transposed=transposed)
                    want = product(x, jax.tree_util.tree_map(lambda a: a[i], q))
                    return got, want

                for i in (0, 2):
                    got, want = jax.jit(both)(x, q, i)
                    np.testing.assert_array_equal(got, want)
                hlo = compiled(
                    lambda x, q, t=transposed: kernels.quantized_matmul_stacked(
                        x, q, 1, transposed=t
                    ),
                    x,
                    q,
                )
                targets = stacked_targets(hlo)
                assert any(t.endswith("_stacked") for t in targets) or (
                    transposed and fmt == "nf4-dq"  # no transposed kernel reads dq scales
                ), (m, transposed, targets)


@pytest.mark.parametrize("fmt", ["int8", "nf4-dq"])
def test_the_index_clamps_as_dynamic_slice_does(fmt):
    q = stack(fmt)
    x = np.random.default_rng(2).standard_normal((2, K)).astype(np.float32)
    f = jax.jit(lambda x, q, i: kernels.quantized_matmul_stacked(x, q, i))
    np.testing.assert_array_equal(f(x, q, -5), f(x, q, 0))
    np.testing.assert_array_equal(f(x, q, 9), f(x, q, L - 1))


@pytest.mark.parametrize("fmt", ["int8", "int4", "nf4-dq", "int8-axis1"])
def test_scan_fori_loop_and_python_loop_read_the_stack_in_place(fmt):
    q = stack(fmt)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, K)).astype(np.float32)
    dense = np.asarray(q.materialize(), np.float64)
    proj = rng.standard_normal((N, K)).astype(np.float32) / np.sqrt(N)

    def step(h, w):
        return jnp.tanh(h @ w) @ proj

    models = {
        "scan": lambda x, q: jax.lax.scan(lambda h, w: (step(h, w), None), x, q)[0],
        "reverse scan": lambda x, q: jax.lax.scan(
            lambda h, w: (step(h, w), None), x, q, reverse=True
        )[0],
        "fori_loop": lambda x, q: jax.lax.fori_loop(0, L, lambda i, h: step(h, q[i]), x),
        "python loop": python_loop(step),
    }
    for label, model in models.items():
        order = range(L - 1, -1, -1) if label == "reverse scan" else range(L)
        want = x.astype(np.float64)
        for i in order:
            want = np.tanh(want @ dense[i]) @ proj
        got = jax.jit(implicit(model))(x, q)
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4, err_msg=label)
        hlo = compiled(implicit(model), x, q)
        assert any(t.endswith("_stacked") for t in stacked_targets(hlo)), label
        assert no_layer_copy(hlo, q), label
    # The control: without the stacked kernel the scan copies each layer out.
    kernels.unregister_kernel(plugin_api.STACKED_KERNEL_NAME, "cpu")
    hlo = compiled(implicit(models["scan"]), x, q)
    assert not no_layer_copy(hlo, q)
    assert not any(t.endswith("_stacked") for t in stacked_targets(hlo))


def python_loop(step):
    def model(x, q):
        for i in range(L):
            x = step(x, q[i])
        return x

    return model


def test_gradients_through_a_scan_of_stacked_layers():
    q = stack("nf4-dq")
    dense = np.asarray(q.materialize(), np.float64)
    x = np.random.default_rng(4).standard_normal((3, K)).astype(np.float32)
    proj = np.random.default_rng(5).standard_normal((N, K)).astype(np.float32) / np.sqrt(N)

    def loss(x, q):
        h = jax.lax.scan(lambda h, w: (jnp.tanh(h @ w) @ proj, None), x, q)[0]
        return jnp.sum(h**2)

    def loss_dense(x):
        h = x
        for w in dense:
            h = jnp.tanh(h @ w) @ proj
        return jnp.sum(h**2)

    got = jax.jit(jax.grad(implicit(loss)))(x, q)
    np.testing.assert_allclose(got, jax.grad(loss_dense)(x), rtol=1e-3, atol=1e-3)


def test_vmap_over_activations_and_over_stacks():
    q = stack("int8-b32")
    qs = jax.tree_util.tree_map(lambda a: jnp.stack([a, a[::-1]]), q)  # two stacks
    x = np.random.default_rng(6).standard_normal((2, 3, K)).astype(np.float32)

    def f(x, q):
        return kernels.quantized_matmul_stacked(x, q, 1)

    over_x = jax.jit(jax.vmap(f, in_axes=(0, None)))(x, q)
    over_q = jax.jit(jax.vmap(f, in_axes=(0, 0)))(x, qs)
    d = np.asarray(q.materialize(), np.float64)
    np.testing.assert_allclose(over_x, x @ d[1], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(over_q[0], x[0] @ d[1], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(over_q[1], x[1] @ d[1], rtol=1e-5, atol=1e-4)  # [::-1] keeps 1


def _ffi(target, x, index, *operands, out_cols, **attrs):
    shape = jax.ShapeDtypeStruct((x.shape[0], out_cols), jnp.float32)
    attrs = {
        "fmt": np.int32(0),
        "block_size": np.int64(K),
        **{k: np.int32(v) if isinstance(v, int) else v for k, v in attrs.items()},
    }
    return jax.jit(lambda *a: jax.ffi.ffi_call(target, shape)(*a, **attrs))(x, index, *operands)


def test_ffi_refuses_bad_stacks():
    q = stack("int8")
    x = np.ones((2, K), np.float32)
    target = "jaxcore_cpu_quantized_matmul_stacked"
    good = _ffi(target, x, np.int32(1), q.qvalue, q.scale, out_cols=N)
    np.testing.assert_array_equal(good, kernels.quantized_matmul(x, layer(q, 1)))
    cases = [
        ((np.float32(1), q.qvalue, q.scale), "the layer index must be one int32"),
        ((np.int32(1), q.qvalue, q.scale[:2]), "different numbers of matrices \\(3 and 2\\)"),
        ((np.int32(0), q.qvalue[:0], q.scale[:0]), "the stack holds no matrices"),
        ((np.int32(0), q.qvalue, q.scale[:, :, :5]), "scale must have shape"),
    ]
    for operands, message in cases:
        with pytest.raises(Exception, match=message):
            _ffi(target, x, *operands, out_cols=N)

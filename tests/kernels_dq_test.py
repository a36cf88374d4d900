"""jaxcore.kernels' double-quant product: NF4 weights whose scales stay compressed.

A platform's kernel registered as ``quantized_matmul_dq`` receives the int8 scale codes,
group scales and offset of an ``ArrayNF4.quantize(..., double_quant=True)`` weight as they
are stored; platforms without one expand the scales and run ``quantized_matmul``. Checked
here with a stand-in kernel written in ``jax.numpy`` (so without any plugin): which path a
product takes, its values against a float64 NumPy reference, and ``grad``/``jvp``/``vmap``
through it (the gradient of the group scales and offset included) against the same
functions of the dense weight.
"""

import dataclasses

import jax
import jax.numpy as jnp
import kernel_test_util
import numpy as np
import pytest

from jaxcore import kernels, quant
from jaxcore.kernels import plugin_api

DQ = plugin_api.DQ_KERNEL_NAME


_dense64 = kernel_test_util.dq_dense64


@pytest.fixture
def stand_in(monkeypatch):
    """A jnp kernel for ``quantized_matmul_dq`` on cpu recording each trace's shapes."""
    with kernel_test_util.dq_stand_in(
        monkeypatch, lambda x2d, codes, group_scale: (x2d.shape, codes.dtype, group_scale.shape)
    ) as calls:
        yield calls


def _weight(rng, k=256, n=300):
    w = jnp.asarray(rng.standard_normal((k, n)), jnp.float32)
    return quant.ArrayNF4.quantize(w, 64, double_quant=True)


def test_the_dq_kernel_gets_the_compressed_scales(stand_in):
    rng = np.random.default_rng(0)
    q = _weight(rng)
    x = jnp.asarray(rng.standard_normal((3, 256)), jnp.float32)
    got = jax.jit(lambda x, q: x @ q)(x, q)
    want = np.asarray(x, np.float64) @ _dense64(q)
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    assert stand_in and stand_in[-1] == ((3, 256), jnp.int8, (q.scale_group_scale.size,))
    # Eager too, and with leading batch axes folded into M.
    x3 = jnp.asarray(rng.standard_normal((2, 5, 256)), jnp.float32)
    got3 = x3 @ q
    np.testing.assert_allclose(
        np.asarray(got3), np.asarray(x3, np.float64) @ _dense64(q), rtol=2e-5, atol=1e-3
    )


def test_without_a_dq_kernel_the_scales_are_expanded(stand_in):
    kernels.unregister_kernel(DQ, "cpu")
    rng = np.random.default_rng(1)
    q = _weight(rng)
    x = jnp.asarray(rng.standard_normal((4, 256)), jnp.float32)
    got = jax.jit(lambda x, q: x @ q)(x, q)
    assert stand_in == []
    want = np.asarray(x, np.float64) @ _dense64(q)
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_transposed_products_keep_the_expanded_path(stand_in):
    rng = np.random.default_rng(2)
    q = _weight(rng, k=256, n=128)
    y = jnp.asarray(rng.standard_normal((3, 128)), jnp.float32)
    got = kernels.quantized_matmul_transposed(y, q)
    assert stand_in == []
    want = np.asarray(y, np.float64) @ _dense64(q).T
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def _with(q, **fields):
    return dataclasses.replace(q, **fields)


def test_grad_and_jvp_through_the_compressed_scales(stand_in):
    rng = np.random.default_rng(3)
    q = _weight(rng)
    x = jnp.asarray(rng.standard_normal((3, 256)), jnp.float32)
    ct = jnp.asarray(rng.standard_normal((3, 300)), jnp.float32)

    def loss(x, group_scale, offset):
        return jnp.sum(ct * (x @ _with(q, scale_group_scale=group_scale, scale_offset=offset)))

    def dense_loss(x, group_scale, offset):
        w = _with(q, scale_group_scale=group_scale, scale_offset=offset).materialize()
        return jnp.sum(ct * (x @ w))

    args = (x, q.scale_group_scale, q.scale_offset)
    got = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(*args)
    want = jax.grad(dense_loss, argnums=(0, 1, 2))(*args)
    assert stand_in  # the dq kernel served the forward product
    for g, w in zip(got, want):
        np.testing.assert_allclose(
            np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-4 * (np.abs(w).max() + 1)
        )
    tangents = tuple(jnp.asarray(rng.standard_normal(np.shape(a)), jnp.float32) for a in args)
    _, got_t = jax.jvp(loss, args, tangents)
    _, want_t = jax.jvp(dense_loss, args, tangents)
    np.testing.assert_allclose(float(got_t), float(want_t), rtol=1e-4)


def test_vmap_over_activations_and_over_stacked_weights(stand_in):
    rng = np.random.default_rng(4)
    qs = [_weight(rng, k=128, n=96) for _ in range(3)]
    x = jnp.asarray(rng.standard_normal((3, 2, 128)), jnp.float32)
    one = jax.vmap(lambda x: x @ qs[0])(x)
    np.testing.assert_allclose(
        np.asarray(one), np.asarray(x, np.float64) @ _dense64(qs[0]), rtol=2e-5, atol=1e-3
    )
    stacked = jax.tree.map(lambda *a: jnp.stack(a), *qs)
    many = jax.jit(jax.vmap(lambda x, q: x @ q))(x, stacked)
    for i, q in enumerate(qs):
        np.testing.assert_allclose(
            np.asarray(many[i]), np.asarray(x[i], np.float64) @ _dense64(q), rtol=2e-5, atol=1e-3
        )


def test_nan_group_scales_poison_their_columns(stand_in):
    rng = np.random.default_rng(5)
    q = _weight(rng, k=128, n=256)  # 2 x 256 codes: group g is scale row g
    q = _with(q, scale_group_scale=q.scale_group_scale.at[1].set(jnp.nan))
    x = jnp.asarray(rng.standard_normal((2, 128)), jnp.float32)
    got = np.asarray(jax.jit(lambda x, q: x @ q)(x, q))
    want = np.asarray(x, np.float64) @ _dense64(q)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got).all()  # every column has a block in the NaN group

"""NF4 double-quantized scales on sharded weights: each device decodes its own slice.

A weight split over devices (plain ``jit``, GSPMD/Shardy) runs the ``quantized_matmul_dq``
kernel on each device's shard. Where that shard's scale codes hold whole groups of 256
(their group scales are then a slice of the stored ones), the kernel gets the compressed
slice, as on one device; otherwise each device expands the scales and runs the plain kernel,
as before. Checked with a stand-in dq kernel in ``jax.numpy`` that records the shapes it is
given, against a float64 NumPy product of the stored codes, on 8 fake CPU devices.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import kernel_test_util
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxcore import quant
from jaxcore.implicit import implicit
from jaxcore.kernels import plugin_api
from jaxcore.quant._sharding import shard_like_logical

pytestmark = pytest.mark.multiaccelerator

DQ = plugin_api.DQ_KERNEL_NAME
K, M, BLOCK = 512, 8, 64


AXIS_TYPES = {"auto": jax.sharding.AxisType.Auto, "explicit": jax.sharding.AxisType.Explicit}


def _mesh(kind: str = "auto"):
    if jax.device_count() < 8:
        pytest.skip(f"needs 8 devices, found {jax.device_count()}")
    return jax.make_mesh((2, 4), ("dp", "tp"), axis_types=(AXIS_TYPES[kind],) * 2)


_dense64 = kernel_test_util.dq_dense64


@pytest.fixture
def stand_in(monkeypatch):
    """A jnp ``quantized_matmul_dq`` kernel on cpu recording the (x, codes, group scales)
    shapes of each trace."""
    with kernel_test_util.dq_stand_in(
        monkeypatch, lambda x2d, codes, group_scale: (x2d.shape, codes.shape, group_scale.shape)
    ) as calls:
        yield calls


def _run(n: int, wspec, seed=0, kind="auto"):
    """(result, float64 reference, compiled text) of ``x @ W`` with W (K, n) split by wspec."""
    mesh = _mesh(kind)
    rng = np.random.default_rng(seed)
    w = jnp.asarray(rng.standard_normal((K, n)), jnp.float32)
    q = quant.ArrayNF4.quantize(w, BLOCK, double_quant=True)
    x = rng.standard_normal((M, K)).astype(np.float32)
    qs = shard_like_logical(q, NamedSharding(mesh, wspec))
    xs = jax.device_put(jnp.asarray(x), NamedSharding(mesh, P("dp", None)))
    f = jax.jit(implicit(lambda x, w: x @ w))
    compiled = f.lower(xs, qs).compile().as_text()
    return f(xs, qs), np.asarray(x, np.float64) @ _dense64(q), compiled


def _close(got, want):
    np.testing.assert_allclose(
        np.asarray(got, np.float64), want, rtol=1e-4, atol=1e-4 * np.abs(want).max()
    )


@pytest.mark.parametrize(
    "n, wspec, x_local, codes, groups",
    [
        # N split over tp (4): 256 columns per device, whole groups per scale row; x keeps
        # its rows split over dp.
        (1024, P(None, "tp"), (M // 2, K), (K // BLOCK, 256), (K // BLOCK,)),
        # K split over tp: 2 of the 8 scale rows per device, 512 codes = 2 groups.
        (256, P("tp", None), (M // 2, K // 4), (2, 256), (2,)),
        # K over dp and N over tp: 4 scale rows of 256 columns per device.
        (1024, P("dp", "tp"), (M, K // 2), (4, 256), (4,)),
    ],
    ids=["split-n", "split-k", "split-k-and-n"],
)
@pytest.mark.parametrize("kind", sorted(AXIS_TYPES))
def test_each_device_decodes_its_own_slice_of_the_compressed_scales(
    stand_in, n, wspec, x_local, codes, groups, kind
):
    got, want, compiled = _run(n, wspec, kind=kind)
    _close(got, want)
    # The whole product is also traced once on the unsplit shapes (what an unsplit program
    # runs); on the shards the kernel gets only its own slice.
    whole = ((M, K), (K // BLOCK, n), (K // BLOCK * n // 256,))
    assert set(stand_in) == {whole, (x_local, codes, groups)}
    # Neither the weight's codes (u8) nor the scale codes (s8) are gathered; the activations
    # may be, to split them like the weight.
    gathered = [
        line for line in compiled.splitlines() if re.search(r"= \(?[su]8\[.*all-gather", line)
    ]
    assert not gathered, gathered


@pytest.mark.parametrize(
    "n, wspec",
    [
        (256, P(None, "tp")),  # 64 columns per device: a group spans four devices
        (96, P("tp", None)),  # 2 scale rows x 96 columns = 192 codes: groups straddle devices
    ],
    ids=["split-n", "split-k"],
)
def test_slices_that_cut_a_group_expand_the_scales_on_each_device(stand_in, n, wspec):
    got, want, _ = _run(n, wspec, seed=1)
    _close(got, want)
    # Only the unsplit trace: on the shards the plain kernel ran on expanded scales.
    assert {c[1] for c in stand_in} == {(K // BLOCK, n)}


def test_gradient_through_shard_local_scales(stand_in):
    """``grad`` in the activations of the split-N product (its transpose is ``x @ W.T``)."""
    mesh = _mesh()
    rng = np.random.default_rng(2)
    w = jnp.asarray(rng.standard_normal((K, 1024)), jnp.float32)
    q = quant.ArrayNF4.quantize(w, BLOCK, double_quant=True)
    qs = shard_like_logical(q, NamedSharding(mesh, P(None, "tp")))
    x = rng.standard_normal((M, K)).astype(np.float32)
    xs = jax.device_put(jnp.asarray(x), NamedSharding(mesh, P("dp", None)))
    c = rng.standard_normal((M, 1024)).astype(np.float32)
    dense = jnp.asarray(_dense64(q), jnp.float32)

    def loss(x, w):
        return jnp.sum(jnp.tanh(x @ w) * c)

    got = jax.jit(jax.grad(implicit(loss)))(xs, qs)
    want = jax.grad(loss)(jnp.asarray(x), dense)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-3, atol=1e-3)
    assert ((M // 2, K), (K // BLOCK, 256), (K // BLOCK,)) in stand_in

"""The quantized-matmul primitives' JVP rule when every tangent is symbolically zero.

JAX skips a rule whose tangents are all zero, but another transformation may call it with
``Zero`` tangents; the rule must then return a ``Zero`` of the output's tangent type (it used
``Zero.from_primal_value``, which jax 0.10 does not have).
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad

from jaxcore.kernels import _matmul
from jaxcore.quant import ArrayInt8


def test_all_zero_tangents_give_a_zero_of_the_output_aval():
    w = jax.random.normal(jax.random.key(0), (8, 4), jnp.float32)
    x = jax.random.normal(jax.random.key(1), (3, 8), jnp.float32)
    q = ArrayInt8.quantize(w)
    qvalue, scale = q.qvalue, q.block_scales()
    cfg = _matmul._Config("int8", q.block_size, np.dtype("float32"), (), None)
    primals = (x, qvalue, scale)
    zeros = tuple(ad.Zero(jax.typeof(p).to_tangent_aval()) for p in primals)
    out, tangent = _matmul._jvp(_matmul._matmul_p, primals, zeros, cfg=cfg)
    # The primal is the product itself (the dense reference on the dequantized weight).
    np.testing.assert_allclose(out, x @ q.materialize(), rtol=1e-5, atol=1e-5)
    assert type(tangent) is ad.Zero
    assert tangent.aval.shape == (3, 4) and tangent.aval.dtype == jnp.float32


def test_a_nonzero_tangent_is_the_product_of_that_tangent():
    w = jax.random.normal(jax.random.key(2), (8, 4), jnp.float32)
    x = jax.random.normal(jax.random.key(3), (2, 8), jnp.float32)
    dx = jax.random.normal(jax.random.key(4), (2, 8), jnp.float32)
    q = ArrayInt8.quantize(w)
    primals = (x, q.qvalue, q.block_scales())
    zeros = [ad.Zero(jax.typeof(p).to_tangent_aval()) for p in primals]
    cfg = _matmul._Config("int8", q.block_size, np.dtype("float32"), (), None)
    _, tangent = _matmul._jvp(_matmul._matmul_p, primals, (dx, zeros[1], zeros[2]), cfg=cfg)
    np.testing.assert_allclose(tangent, dx @ q.materialize(), rtol=1e-5, atol=1e-5)

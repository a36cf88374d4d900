"""Axes, inputs and checks the jaxcore.named core and op tests share.

Core tests (named_array, named_broadcasting, named_indexing): the axes B, E, H, ``rand``,
``assert_named`` and ``check_all_modes``. Op tests (named_elementwise, named_reductions,
named_misc_ops): the inputs per domain, drawn in a fixed order from one generator (so every
file sees the same values), and ``assert_named_op``.
"""

import jax
import jax.numpy as jnp
import numpy as np

import jaxcore.named as hax
from jaxcore.named import NamedArray

B, E, H = hax.make_axes(batch=3, embed=4, head=2)

# The axes the hypothesis tests of binary alignment and of basic indexing draw from.
PROP_AXES = hax.make_axes(p=2, q=3, r=1, s=4)


def rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def assert_named(out, ref, axes, rtol=1e-6, atol=1e-6):
    assert isinstance(out, NamedArray), type(out)
    assert out.axes == tuple(axes), (out.axes, axes)
    np.testing.assert_allclose(np.asarray(out.array), np.asarray(ref), rtol=rtol, atol=atol)


def assert_named_op(out, ref, axes, rtol=1e-5, atol=1e-6):
    """``assert_named`` with the op tests' default ``rtol`` (1e-5)."""
    assert_named(out, ref, axes, rtol=rtol, atol=atol)


def check_all_modes(named_fn, pos_fn, *arrays, grad=True):
    """named_fn/pos_fn take positional arrays and return a positional array.

    Compares them eagerly, under jit, under vmap (over a new leading dim) and, for float
    outputs, the gradient of their sum.
    """
    ref = pos_fn(*arrays)
    np.testing.assert_allclose(named_fn(*arrays), ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(jax.jit(named_fn)(*arrays), ref, rtol=1e-5, atol=1e-6)
    stacked = [np.stack([a, a * 2 + 1]) for a in arrays]
    np.testing.assert_allclose(
        jax.jit(jax.vmap(named_fn))(*stacked), jax.vmap(pos_fn)(*stacked), rtol=1e-5, atol=1e-5
    )
    if grad:
        g_named = jax.jit(
            jax.grad(lambda *xs: jnp.sum(named_fn(*xs)), argnums=tuple(range(len(arrays))))
        )(*arrays)
        g_pos = jax.grad(lambda *xs: jnp.sum(pos_fn(*xs)), argnums=tuple(range(len(arrays))))(
            *arrays
        )
        for gn, gp in zip(g_named, g_pos):
            np.testing.assert_allclose(gn, gp, rtol=1e-5, atol=1e-6)


# Op-test inputs per domain. RNG is shared: a few tests draw more from it.
RNG = np.random.default_rng(0)
UNIT = RNG.uniform(0.1, 0.9, (3, 4)).astype(np.float32)  # safe for every float op
SIGNED = RNG.uniform(-2.0, 2.0, (3, 4)).astype(np.float32)
BIG = RNG.uniform(1.5, 3.0, (3, 4)).astype(np.float32)
INTS = RNG.integers(0, 100, (3, 4)).astype(np.int32)
COMPLEX = (SIGNED + 1j * UNIT).astype(np.complex64)
# The binary-op operands (float and integer pairs).
F1 = RNG.uniform(0.5, 2.0, (3, 4)).astype(np.float32)
F2 = RNG.uniform(0.5, 2.0, (3, 4)).astype(np.float32)
I1 = RNG.integers(0, 64, (3, 4)).astype(np.int32)
I2 = RNG.integers(0, 5, (3, 4)).astype(np.int32)

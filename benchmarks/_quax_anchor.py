"""quax versions of implicit_overheads.py's measurements, for a side-by-side anchor.

quax is optional (``benchmarks/anchors_lock.txt``). This module has no
``from __future__ import annotations``: quax's dispatcher resolves the handler's
annotations at registration, and string annotations naming a class defined here would
not resolve.
"""

import jax
import jax.numpy as jnp

try:
    import equinox as eqx
    import quax
except ImportError:  # the benchmark prints how to install it
    quax = None


def available() -> bool:
    """Whether quax is importable."""
    return quax is not None


if quax is not None:

    class QuaxScaled(quax.ArrayValue):
        """value * scale, the quax twin of the benchmark's ``Scaled``."""

        value: jax.Array
        scale: float = eqx.field(static=True)

        def aval(self):
            return jax.core.ShapedArray(self.value.shape, self.value.dtype)

        def materialise(self):
            return self.value * self.scale

    @quax.register(jax.lax.mul_p)
    def _mul(x: QuaxScaled, y: jax.Array | float, **params):
        return QuaxScaled(x.value * y, x.scale)


def sides(x, fifty_ops):
    """Zero-argument callables for the eager handled op, the fallback and tracing 50 ops.

    Args:
        x: the dense 8x8 operand the other sides use.
        fifty_ops: the benchmark's function applying 50 handled multiplications.

    Returns:
        ``{"handled", "fallback", "tracing": callable, "version": str}``.
    """
    q = QuaxScaled(x, 2.0)
    handled = quax.quaxify(lambda a: a * 3.0)
    fallback = quax.quaxify(jnp.sin)
    return {
        "handled": lambda: handled(q),
        "fallback": lambda: fallback(q),
        "tracing": lambda: jax.make_jaxpr(quax.quaxify(lambda a: fifty_ops(a)))(q),
        "version": getattr(quax, "__version__", "unknown"),
    }

"""The small implicit arrays the jaxcore.implicit tests share."""

import dataclasses

import jax
import jax.numpy as jnp

from jaxcore.implicit import ImplicitArray, aux_field


def scaled_class() -> type:
    """Returns a new ``Scaled`` class: ``value * scale``, with a static ``scale``.

    A new class per call, so the handlers one test file (or test) registers for it
    cannot change what another sees: dispatch is global per class.
    """

    @dataclasses.dataclass
    class Scaled(ImplicitArray):
        """value * scale, with a static scale."""

        value: jax.Array
        scale: float = aux_field()

        def materialize(self):
            return self.value * self.scale

    return Scaled


def lowrank_class() -> type:
    """Returns a new ``LowRank`` class: ``left @ right``, its shape read off the factors.

    Its leaves do not share the matrix's leading axis (``right`` has the rank as
    rows), which makes it the example of an array that slicing leaves would not slice.
    A new class per call, for the reason given in :func:`scaled_class`.
    """

    @dataclasses.dataclass
    class LowRank(ImplicitArray):
        """left @ right."""

        left: jax.Array
        right: jax.Array

        def compute_shape(self):
            return (self.left.shape[0], self.right.shape[1])

        def compute_dtype(self):
            return jnp.result_type(self.left, self.right)

        def materialize(self):
            return self.left @ self.right

    return LowRank

"""The small implicit array the jaxcore.implicit tests share."""

import dataclasses

import jax

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

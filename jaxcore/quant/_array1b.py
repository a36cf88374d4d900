"""`Array1B`: ternary weights {-1, 0, +1} packed four to a byte (eformer's "1-bit" format).

The name follows eformer: each value takes two bits (ternary needs more than one), with no
scale. ``quantize`` takes values that are already ternary (eformer's binary/ternary
quantizers produce them with ``sign`` or a threshold first); ``materialize`` returns them
as ``dtype``.

Layout (eformer's, so weights packed by either library read the same): the first axis, of
size K (a multiple of 4), is cut into four contiguous quarters; byte ``i`` of ``weight``
holds rows ``i``, ``i + K/4``, ``i + 2K/4`` and ``i + 3K/4`` at bit offsets 0, 2, 4 and 6,
each stored as ``value + 1`` (0, 1 or 2).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from jaxcore.implicit import ImplicitArray
from jaxcore.quant import _sharding

_SHIFTS = (0, 2, 4, 6)


@jax.jit
def pack_ternary(values: jax.Array) -> jax.Array:
    """Packs ternary values (K, ...) into uint8 (K // 4, ...) in the layout above."""
    codes = (jnp.clip(jnp.round(values), -1, 1) + 1).astype(jnp.uint8)
    quarters = codes.reshape((4, codes.shape[0] // 4) + codes.shape[1:])
    out = jnp.zeros(quarters.shape[1:], jnp.uint8)
    for j, shift in enumerate(_SHIFTS):
        out = out | (quarters[j] << jnp.uint8(shift))
    return out


def unpack_ternary(weight: jax.Array, dtype) -> jax.Array:
    """Inverse of `pack_ternary`: uint8 (K // 4, ...) -> values in {-1, 0, 1} as ``dtype``."""
    quarters = [(weight >> jnp.uint8(shift)) & jnp.uint8(3) for shift in _SHIFTS]
    codes = jnp.concatenate(quarters, axis=0)
    return (codes.astype(jnp.int8) - 1).astype(dtype)


def _check_ternary(array, what: str) -> jax.Array:
    array = jnp.asarray(array)
    if array.ndim == 0:
        raise ValueError(f"{what}: expected an array with a first axis to pack, got a scalar")
    if array.shape[0] % 4:
        raise ValueError(
            f"{what}: the first axis (size {array.shape[0]} of shape {array.shape}) must be a "
            "multiple of 4: four values are packed per byte along it"
        )
    if not (jnp.issubdtype(array.dtype, jnp.integer) or jnp.issubdtype(array.dtype, jnp.floating)):
        raise TypeError(f"{what}: expected integer or float values, got dtype {array.dtype}")
    if not isinstance(array, jax.core.Tracer):
        host = np.asarray(array)
        bad = ~np.isin(host, (-1, 0, 1))
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(
                f"{what}: values must be -1, 0 or +1 (ternary); {int(bad.sum())} entries of the "
                f"{array.shape} array are not, first at index {first}: {host[first].item()!r}. "
                "Quantize first, e.g. jnp.sign(w) (binary) or a threshold (ternary)."
            )
    return array


@dataclasses.dataclass
class Array1B(ImplicitArray, warn_on_materialize=False):
    """Ternary {-1, 0, +1} weights, four per byte (eformer's ``Array1B``).

    Fields:
      weight: uint8 (K // 4, ...) packed values (see the module docstring for the layout).

    The logical shape is ``(4 * weight.shape[0], *weight.shape[1:])``; the logical dtype is
    the ``dtype`` given to `quantize` (by default the input's). Operations without a
    handler materialize it, without a materialization warning since that is the
    format's only path (there is no packed kernel): ``x @ w`` under
    `jaxcore.implicit.implicit` multiplies by the dense ternary matrix.
    """

    weight: jax.Array
    # Makes ``numpy_array @ w`` defer to the implicit-array machinery instead of NumPy.
    __array_ufunc__: ClassVar = None

    @classmethod
    def quantize(cls, array, dtype=None, axis=None) -> Array1B:
        """Packs an array of ternary values.

        Args:
          array: values in {-1, 0, +1} (integer or float), with a first axis that is a
            multiple of 4. Checked when the values are known; inside ``jit`` values are
            rounded and clipped to [-1, 1].
          dtype: the logical dtype ``materialize`` returns (default: ``array``'s dtype).
          axis: accepted for eformer compatibility: ``None`` or 0 (values are always
            packed along the first axis).

        Returns:
          The packed array.

        Raises:
          ValueError: for a scalar, a first axis that is not a multiple of 4, values other
            than -1, 0, +1, or another ``axis``.
          TypeError: for a non-numeric dtype.
        """
        if axis not in (None, 0, (0,)):
            raise ValueError(
                f"Array1B.quantize: values are packed along axis 0; axis={axis!r} is not supported"
            )
        array = _check_ternary(array, "Array1B.quantize")
        return cls(pack_ternary(array), dtype=array.dtype if dtype is None else dtype)

    def compute_shape(self) -> tuple[int, ...]:
        """The logical shape, read off ``weight``."""
        return (4 * self.weight.shape[0],) + tuple(self.weight.shape[1:])

    def materialize(self) -> jax.Array:
        """The ternary values as ``self.dtype``."""
        return unpack_ternary(self.weight, self.dtype)

    def dequantize(self) -> jax.Array:
        """Alias of `materialize` (eformer's name)."""
        return self.materialize()

    @property
    def storage_nbytes(self) -> int:
        """Bytes held by the packed representation."""
        return int(np.prod(self.weight.shape))

    def with_sharding(self, sharding) -> Array1B:
        """Returns the same array with ``weight`` placed by a sharding of the logical shape.

        See `jaxcore.quant.ArrayNF4.with_sharding`; the packed first axis is split like
        the logical one (its size K // 4 must divide by the mesh axes).
        """
        return _sharding.shard_like_logical(self, sharding)

    def with_mesh_and_axis(self, mesh_and_axis) -> Array1B:
        """eformer's shorthand: ``(mesh, spec)`` -> `with_sharding` of a ``NamedSharding``."""
        return self.with_sharding(_sharding.named_sharding(mesh_and_axis, "Array1B"))

    def reshard(self, sharding) -> Array1B:
        """Alias of `with_sharding` (eformer's name)."""
        return self.with_sharding(sharding)

    def _stored_partition(self, name: str, leaf, logical: tuple) -> tuple:
        # ``weight`` has the logical axes in order (the first one packed by 4).
        return tuple(logical[: leaf.ndim])

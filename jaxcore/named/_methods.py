"""Binds ``NamedArray``'s operators and method forms of the named functions.

The type (`_array`) sits at the bottom of the package; the functions its methods forward
to (`_ops`, `_shape`, `_dot`, `_broadcast`, `_indexing`) import it. Binding the methods
here, when ``jaxcore.named`` is assembled, keeps every import pointing down (the way JAX
attaches ``jax.Array``'s methods in ``array_methods``). Nothing here is public: import the
package, not this module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import jax.numpy as jnp

from jaxcore.named import _dot, _ops, _shape
from jaxcore.named._array import NamedArray
from jaxcore.named._axis import Axis, AxisSelection, AxisSelector, AxisSpec
from jaxcore.named._broadcast import broadcast_axis, broadcast_to, elementwise_binary
from jaxcore.named._indexing import (
    NamedIndexUpdateHelper,
    index,
    normalize_index_arg,
    take,
)
from jaxcore.named._slicing import slice, updated_slice

if TYPE_CHECKING:
    # For the checker only: `self` is a NamedArray, and each method is checked against the
    # declaration of the same name in `NamedArray`. At run time this is a plain namespace.
    _Base = NamedArray
else:
    _Base = object


class _Methods(_Base):
    """The methods bound onto ``NamedArray`` (a namespace; never instantiated)."""

    @property
    def at(self) -> NamedIndexUpdateHelper:
        """Named analogue of ``jax.Array.at``: ``x.at[{"batch": 0}].set(y)`` and friends.

        The index uses the same forms as ``x[...]`` (a dict or ``"name", idx`` pairs).
        Updates are functional: a new array is returned. Writes through a ``dslice`` that
        reach past the end of an axis are dropped.
        """
        return NamedIndexUpdateHelper(self)

    def __getitem__(self, idx) -> NamedArray:
        return index(self, normalize_index_arg(idx))

    # -- methods that forward to the named functions ----------------------------------
    def rename(self, renames: Mapping[AxisSelector, AxisSelector]) -> NamedArray:
        return _shape.rename(self, renames)

    def rearrange(self, *args, **kwargs) -> NamedArray:
        return _shape.rearrange(self, *args, **kwargs)

    def broadcast_to(
        self, axes: AxisSpec, ensure_order: bool = True, enforce_no_extra_axes: bool = True
    ) -> NamedArray:
        return broadcast_to(
            self, axes, ensure_order=ensure_order, enforce_no_extra_axes=enforce_no_extra_axes
        )

    def broadcast_axis(self, axis: AxisSpec) -> NamedArray:
        return broadcast_axis(self, axis)

    def split(self, axis: AxisSelector, new_axes: Sequence[Axis]) -> list[NamedArray]:
        return _shape.split(self, axis, new_axes)

    def flatten_axes(self, old_axes: AxisSelection, new_axis: AxisSelector) -> NamedArray:
        return _shape.flatten_axes(self, old_axes, new_axis)

    def unflatten_axis(self, axis: AxisSelector, new_axes: AxisSpec) -> NamedArray:
        return _shape.unflatten_axis(self, axis, new_axes)

    def ravel(self, new_axis_name: AxisSelector) -> NamedArray:
        return _shape.ravel(self, new_axis_name)

    def flatten(self, new_axis_name: AxisSelector) -> NamedArray:
        return _shape.ravel(self, new_axis_name)

    def unbind(self, axis: AxisSelector) -> list[NamedArray]:
        return _shape.unbind(self, axis)

    def slice(self, *args, **kwargs) -> NamedArray:
        return slice(self, *args, **kwargs)

    def updated_slice(self, start, update) -> NamedArray:
        return updated_slice(self, start, update)

    def take(self, axis: AxisSelector, index, *, mode=None, fill_value=None) -> NamedArray:
        return take(self, axis, index, mode=mode, fill_value=fill_value)

    def dot(self, *args, **kwargs) -> NamedArray:
        return _dot.dot(self, *args, **kwargs)

    def all(self, axis=None, *, where=None) -> NamedArray:
        return _ops.all(self, axis, where=where)

    def any(self, axis=None, *, where=None) -> NamedArray:
        return _ops.any(self, axis, where=where)

    def max(self, axis=None, *, where=None) -> NamedArray:
        return _ops.max(self, axis, where=where)

    def min(self, axis=None, *, where=None) -> NamedArray:
        return _ops.min(self, axis, where=where)

    def sum(self, axis=None, *, dtype=None, where=None) -> NamedArray:
        return _ops.sum(self, axis, where=where, dtype=dtype)

    def prod(self, axis=None, *, dtype=None, where=None) -> NamedArray:
        return _ops.prod(self, axis, where=where, dtype=dtype)

    product = prod

    def mean(self, axis=None, *, dtype=None, where=None) -> NamedArray:
        return _ops.mean(self, axis, where=where, dtype=dtype)

    def std(self, axis=None, *, dtype=None, ddof=0, where=None) -> NamedArray:
        return _ops.std(self, axis, where=where, ddof=ddof, dtype=dtype)

    def var(self, axis=None, dtype=None, ddof=0, *, where=None) -> NamedArray:
        return _ops.var(self, axis, where=where, ddof=ddof, dtype=dtype)

    def ptp(self, axis=None, *, where=None) -> NamedArray:
        return _ops.ptp(self, axis, where=where)

    def argmax(self, axis=None) -> NamedArray:
        return _ops.argmax(self, axis)

    def argmin(self, axis=None) -> NamedArray:
        return _ops.argmin(self, axis)

    def argsort(self, axis, *, stable: bool = False) -> NamedArray:
        return _ops.argsort(self, axis, stable=stable)

    def sort(self, axis) -> NamedArray:
        return _ops.sort(self, axis)

    def cumsum(self, axis, *, dtype=None) -> NamedArray:
        return _ops.cumsum(self, axis, dtype=dtype)

    def cumprod(self, axis, *, dtype=None) -> NamedArray:
        return _ops.cumprod(self, axis, dtype=dtype)

    def clip(self, a_min=None, a_max=None) -> NamedArray:
        return _ops.clip(self, a_min, a_max)

    def conj(self) -> NamedArray:
        return _ops.conj(self)

    def conjugate(self) -> NamedArray:
        return _ops.conjugate(self)

    def copy(self) -> NamedArray:
        return _ops.copy(self)

    def round(self, decimals=0) -> NamedArray:
        return _ops.round(self, decimals)

    def trace(self, axis1, axis2, offset=0, dtype=None) -> NamedArray:
        return _ops.trace(self, axis1, axis2, offset=offset, dtype=dtype)

    # -- operators: names are matched, not positions ----------------------------------
    def __add__(self, other) -> NamedArray:
        return elementwise_binary(jnp.add, self, other)

    def __radd__(self, other) -> NamedArray:
        return elementwise_binary(jnp.add, other, self)

    def __sub__(self, other) -> NamedArray:
        return elementwise_binary(jnp.subtract, self, other)

    def __rsub__(self, other) -> NamedArray:
        return elementwise_binary(jnp.subtract, other, self)

    def __mul__(self, other) -> NamedArray:
        return elementwise_binary(jnp.multiply, self, other)

    def __rmul__(self, other) -> NamedArray:
        return elementwise_binary(jnp.multiply, other, self)

    def __truediv__(self, other) -> NamedArray:
        return elementwise_binary(jnp.true_divide, self, other)

    def __rtruediv__(self, other) -> NamedArray:
        return elementwise_binary(jnp.true_divide, other, self)

    def __floordiv__(self, other) -> NamedArray:
        return elementwise_binary(jnp.floor_divide, self, other)

    def __rfloordiv__(self, other) -> NamedArray:
        return elementwise_binary(jnp.floor_divide, other, self)

    def __mod__(self, other) -> NamedArray:
        return elementwise_binary(jnp.mod, self, other)

    def __rmod__(self, other) -> NamedArray:
        return elementwise_binary(jnp.mod, other, self)

    def __divmod__(self, other) -> tuple[NamedArray, NamedArray]:
        return elementwise_binary(jnp.divmod, self, other)

    def __rdivmod__(self, other) -> tuple[NamedArray, NamedArray]:
        return elementwise_binary(jnp.divmod, other, self)

    def __pow__(self, other) -> NamedArray:
        return elementwise_binary(jnp.power, self, other)

    def __rpow__(self, other) -> NamedArray:
        return elementwise_binary(jnp.power, other, self)

    def __and__(self, other) -> NamedArray:
        return elementwise_binary(jnp.bitwise_and, self, other)

    def __rand__(self, other) -> NamedArray:
        return elementwise_binary(jnp.bitwise_and, other, self)

    def __or__(self, other) -> NamedArray:
        return elementwise_binary(jnp.bitwise_or, self, other)

    def __ror__(self, other) -> NamedArray:
        return elementwise_binary(jnp.bitwise_or, other, self)

    def __xor__(self, other) -> NamedArray:
        return elementwise_binary(jnp.bitwise_xor, self, other)

    def __rxor__(self, other) -> NamedArray:
        return elementwise_binary(jnp.bitwise_xor, other, self)

    def __lshift__(self, other) -> NamedArray:
        return elementwise_binary(jnp.left_shift, self, other)

    def __rlshift__(self, other) -> NamedArray:
        return elementwise_binary(jnp.left_shift, other, self)

    def __rshift__(self, other) -> NamedArray:
        return elementwise_binary(jnp.right_shift, self, other)

    def __rrshift__(self, other) -> NamedArray:
        return elementwise_binary(jnp.right_shift, other, self)

    def __lt__(self, other) -> NamedArray:
        return elementwise_binary(jnp.less, self, other)

    def __le__(self, other) -> NamedArray:
        return elementwise_binary(jnp.less_equal, self, other)

    def __gt__(self, other) -> NamedArray:
        return elementwise_binary(jnp.greater, self, other)

    def __ge__(self, other) -> NamedArray:
        return elementwise_binary(jnp.greater_equal, self, other)

    def __eq__(self, other) -> NamedArray:  # type: ignore[override]  # element-wise, like jax.Array
        return elementwise_binary(jnp.equal, self, other)

    def __ne__(self, other) -> NamedArray:  # type: ignore[override]  # element-wise, like jax.Array
        return elementwise_binary(jnp.not_equal, self, other)

    def __neg__(self) -> NamedArray:
        return NamedArray._new(jnp.negative(self.array), self.axes, self._names)

    def __pos__(self) -> NamedArray:
        return NamedArray._new(jnp.positive(self.array), self.axes, self._names)

    def __abs__(self) -> NamedArray:
        return NamedArray._new(jnp.abs(self.array), self.axes, self._names)

    def __invert__(self) -> NamedArray:
        return NamedArray._new(jnp.invert(self.array), self.axes, self._names)


_FORWARDING_METHODS = (
    "rename", "rearrange", "broadcast_to", "broadcast_axis", "split", "flatten_axes", "unflatten_axis",
    "ravel", "flatten", "unbind", "slice", "updated_slice", "take", "dot", "all", "any", "max", "min",
    "sum", "prod", "product", "mean", "std", "var", "ptp", "argmax", "argmin", "argsort", "sort",
    "cumsum", "cumprod", "clip", "conj", "conjugate", "copy", "round", "trace",
)  # fmt: skip


_CLASS_MACHINERY = frozenset(
    {
        "__module__",
        "__qualname__",
        "__doc__",
        "__dict__",
        "__weakref__",
        "__hash__",
        "__firstlineno__",
        "__static_attributes__",
    }
)


def _bind() -> None:
    for name, value in vars(_Methods).items():
        # Class machinery (Python 3.13 adds __firstlineno__ and __static_attributes__), and
        # the __hash__ = None Python adds for the __eq__ below (NamedArray already sets it).
        if name in _CLASS_MACHINERY:
            continue
        target = value.fget if isinstance(value, property) else value
        assert target is not None  # every bound property has a getter
        target.__qualname__ = f"NamedArray.{name}"
        setattr(NamedArray, name, value)
    for name in _FORWARDING_METHODS:
        function = {"flatten": "ravel", "product": "prod"}.get(name, name)
        getattr(
            NamedArray, name
        ).__doc__ = (
            f"Method form of ``jaxcore.named.{function}`` with this array as the first argument."
        )


_bind()

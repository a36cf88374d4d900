"""`StackLayer`: one matrix of a stack of quantized weights, standing in for its slice.

A model that keeps its layers as one stack multiplies by ``W[i]``: in a ``lax.scan`` over
the stack, in a ``fori_loop`` with ``W[i]``, or in a Python loop. Sliced as an ordinary
operand, on CPU XLA copies ``W[i]`` into a buffer of its own before the kernel reads it.
Where a plugin registers a kernel that reads one matrix of a stack in place
(``plugin_api.STACKED_KERNEL_NAME``), the scan rule (`QuantizedArray.scan_slice`) and the
indexing handlers of a stack with one leading axis give a `StackLayer` instead: the whole
stack and the index. Its matmuls run `jaxcore.kernels.quantized_matmul_stacked`; every
other primitive slices the matrix out (`StackLayer.resolve`) and goes on as for the sliced
array, so a program computes exactly what it computes with the slice. An ``implicit``
function returns the slice in its place (`StackLayer.on_return`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar

import jax
from jax import lax

from jaxcore.implicit import ImplicitArray, aux_field, implicit, register
from jaxcore.kernels import registered_kernels
from jaxcore.kernels._stacked import STACKED_KERNEL_NAME
from jaxcore.quant._arrays import QuantizedArray


@dataclasses.dataclass
class StackLayer(ImplicitArray, warn_on_materialize=False):
    """Matrix ``index`` of ``stack`` (L, K, N), not sliced out.

    Fields:
      stack: the stacked quantized weight.
      index: integer scalar, the matrix's position along the stack's first axis (clamped
        into range, as ``dynamic_slice`` clamps).
      keepdims: stand for ``stack[index:index + 1]`` (1, K, N) rather than ``stack[index]``
        (indexing emits the slice first, then squeezes it).
    """

    stack: QuantizedArray
    index: jax.Array
    keepdims: bool = aux_field(default=False)
    # Its handlers read the stack's fields themselves; the stack is not dispatched on.
    handles_implicit_children: ClassVar[bool] = True

    def compute_shape(self) -> tuple[int, ...]:
        return (1,) * self.keepdims + tuple(self.stack.shape[1:])

    def compute_dtype(self):
        return self.stack.dtype

    def resolve(self) -> QuantizedArray:
        """The matrix sliced out of the stack: a quantized array of the stack's kind."""
        return jax.tree_util.tree_map(
            lambda leaf: lax.dynamic_index_in_dim(leaf, self.index, 0, keepdims=self.keepdims),
            self.stack,
        )

    def materialize(self) -> jax.Array:
        return self.resolve().materialize()

    def on_return(self) -> QuantizedArray:
        """Returned from an ``implicit`` function as the sliced quantized array."""
        return self.resolve()

    @classmethod
    def default_handler(cls, primitive, *args, params=None):
        """Any other primitive: on the sliced matrix, dispatched anew."""
        resolved = [a.resolve() if type(a) is cls else a for a in args]
        return implicit(functools.partial(_bind, primitive, params or {}))(*resolved)


def _bind(primitive, params, *args):
    return primitive.bind(*args, **params)


def layer_of(stack: QuantizedArray, index, *, keepdims: bool = False) -> StackLayer | None:
    """A `StackLayer` of ``stack`` where a kernel reads it in place, else ``None``.

    Only for a stack with one leading axis, and only while some platform has a stacked
    kernel registered (elsewhere the slice is what the product would take anyway).
    """
    if stack.qvalue.ndim != 3 or not registered_kernels(STACKED_KERNEL_NAME):
        return None
    return StackLayer(stack, index, keepdims=keepdims)


@register("transpose")
def _transpose(primitive, operand: StackLayer, *, permutation):
    if operand.keepdims:
        return StackLayer.default_handler(primitive, operand, params={"permutation": permutation})
    if tuple(permutation) == (0, 1):
        return operand
    # Swapping the matrix axes flips the blocked axis of the whole stack.
    return StackLayer(operand.stack.with_axis(1 - operand.stack.axis), operand.index)


@register("squeeze")
def _squeeze(primitive, operand: StackLayer, *, dimensions):
    if operand.keepdims and tuple(dimensions) == (0,):
        return StackLayer(operand.stack, operand.index)
    return StackLayer.default_handler(primitive, operand, params={"dimensions": dimensions})


@register("reshape")
def _reshape(primitive, operand: StackLayer, *, new_sizes, dimensions=None, **params):
    if operand.keepdims and dimensions is None and tuple(new_sizes) == operand.shape[1:]:
        return StackLayer(operand.stack, operand.index)
    params = dict(params, new_sizes=new_sizes, dimensions=dimensions)
    return StackLayer.default_handler(primitive, operand, params=params)

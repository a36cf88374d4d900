"""jaxcore.quant: int8 / int4 / NF4 weights as implicit arrays.

`ArrayInt8`, `ArrayInt4` and `ArrayNF4` hold a 2-D weight in the packed layout of
`jaxcore.kernels` and materialize it on demand. Inside a function wrapped with
`jaxcore.implicit.implicit`, ``x @ w`` (and ``w @ x``, ``einsum``, ``w.T``) with a quantized
``w`` runs `jaxcore.kernels.quantized_matmul`, which dequantizes one block of rows at a time
and never builds the dense weight. `fake_quantize` is the straight-through quantizer for
quantization-aware training.

For eformer users: `Array1B` (ternary weights four to a byte), `nf4xf32_to_f32`, eformer's
names ``ArrayNF4.packed``/``.absmax`` and ``ArrayInt8.weight``, ``quantize(..., axis=(0, 1))``
and ``with_mesh_and_axis`` (see docs/compat.md).
"""

from jaxcore.quant import (
    _arrays,
    _handlers,  # noqa: F401  (registers the dot_general/transpose handlers)
    _layer,
    _stacking,  # noqa: F401  (registers the handlers that index a stack)
)
from jaxcore.quant._array1b import Array1B
from jaxcore.quant._arrays import ArrayInt4, ArrayInt8, ArrayNF4
from jaxcore.quant._nf4_values import nf4xf32_to_f32
from jaxcore.quant._qat import fake_quantize

# Assembly: a stack's layer in a scan body is a `_layer.StackLayer`, which builds on `_arrays`.
_arrays.install_scan_view(_layer.layer_of)

__all__ = ["Array1B", "ArrayInt4", "ArrayInt8", "ArrayNF4", "fake_quantize", "nf4xf32_to_f32"]

"""jaxcore.kernels: a registry of kernels by (name, platform) and the portable references.

`quantized_matmul` turns the implementations registered under ``"quantized_matmul"`` into
the branches of one `jax.lax.platform_dependent` (the portable reference is the default and
is registered for ``"cpu"``), so one jitted program runs unchanged on cpu, cuda, rocm and
tpu. Backend plugins register their fused kernels with `register_kernel` at import.

`jaxcore.kernels.plugin_api` (imported on its own, by the plugins) holds the backend-neutral
machinery the plugins build those kernels on: operand checks, tile overrides, dequantization
helpers, the per-platform primitive and the registration boilerplate.
"""

from jaxcore.kernels._formats import FORMATS, dequantize, pack_nibbles, unpack_nibbles
from jaxcore.kernels._interpret import ENV_VAR as INTERPRET_ENV_VAR
from jaxcore.kernels._matmul import quantized_matmul, quantized_matmul_transposed
from jaxcore.kernels._nf4 import NF4_CODE
from jaxcore.kernels._reference import (
    reference_quantized_matmul,
    reference_quantized_matmul_transposed,
    reference_scale_gradient,
)
from jaxcore.kernels._registry import (
    PLATFORMS,
    register_kernel,
    registered_kernels,
    unregister_kernel,
)
from jaxcore.kernels._stacked import quantized_matmul_stacked

register_kernel("quantized_matmul", "cpu", reference_quantized_matmul)

__all__ = [
    "FORMATS",
    "INTERPRET_ENV_VAR",
    "NF4_CODE",
    "PLATFORMS",
    "dequantize",
    "pack_nibbles",
    "quantized_matmul",
    "quantized_matmul_stacked",
    "quantized_matmul_transposed",
    "reference_quantized_matmul",
    "reference_quantized_matmul_transposed",
    "reference_scale_gradient",
    "register_kernel",
    "registered_kernels",
    "unpack_nibbles",
    "unregister_kernel",
]

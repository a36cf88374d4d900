"""What jaxcore's backend plugins build their kernels on.

The plugin packages (``jaxcore_gpu``, shipped as ``jaxcore_cuda12`` / ``jaxcore_rocm6``,
and ``jaxcore_tpu``) import their own modules relatively, because a wheel may rename the
package, and import this module absolutely: every plugin wheel requires
``jaxcore==<its own version>``, so the plugin-support code lives here once instead of in
each plugin. A plugin keeps only what is specific to its backend: its Pallas kernel, its
tile dataclass and table, and its in-kernel decoding.

Operand contract:
  * :class:`Problem`, :func:`check_problem`, :func:`prepare_operands`: the shapes of one
    quantized matmul, the checks every plugin kernel applies to its operands (same
    errors everywhere) and the defaults it resolves.
  * :data:`KERNEL_DTYPES`: activation dtypes the fused kernels compute in.

Kernel building blocks:
  * :class:`TileOverrides`: the ``with plugin.block_config(...)`` overrides of a tile table.
  * :func:`nibbles`, :func:`codebook_lookup`, :func:`nf4_code`, :func:`split_activations`:
    gather-free decoding of packed tiles, traceable by the Triton and Mosaic lowerings.
  * :func:`xla_quantized_matmul`: the dequantize-then-dot path for calls no fused kernel
    serves.

Double-quantized scales (NF4's QLoRA layout):
  * :data:`DQ_KERNEL_NAME`, :data:`DQ_GROUP_SIZE`, :func:`expand_dq_scales`: the kernel
    name a plugin registers to read the compressed scales itself, their group size and the
    reference expansion.

The transposed product:
  * :data:`TRANSPOSED_KERNEL_NAME`: the kernel name a plugin registers for ``x @ W.T`` of a
    weight stored (K, N) (the gradient of ``x @ W`` in ``x``); without one, the reference.

One matrix of a stack, read in place:
  * :data:`STACKED_KERNEL_NAME`: the kernel name a plugin registers to multiply by matrix
    ``i`` of a stack of weights (a scan over stacked layers) without XLA copying it out;
    without one, the matrix is sliced out and the other kernels run.

Registration:
  * :func:`quantized_matmul_impls`: the per-platform ``jaxcore.kernels`` entry points,
    binding a primitive that lowers the kernel only for the plugin's platforms
    (:func:`platform_primitive`), so one program can be exported for several platforms.
  * :func:`plugin_initializer`: the plugin's ``initialize(platforms=None)``.

Nothing here imports Pallas; plugins import it inside their kernels, at first trace, so
``import jaxcore`` stays cheap.
"""

from jaxcore.kernels._dq_scales import GROUP_SIZE as DQ_GROUP_SIZE
from jaxcore.kernels._dq_scales import expand_scales as expand_dq_scales
from jaxcore.kernels._matmul import DQ_KERNEL_NAME, TRANSPOSED_KERNEL_NAME
from jaxcore.kernels._plugin_checks import (
    KERNEL_DTYPES,
    Problem,
    check_problem,
    prepare_operands,
)
from jaxcore.kernels._plugin_dequant import (
    codebook_lookup,
    nf4_code,
    nibbles,
    split_activations,
    xla_quantized_matmul,
)
from jaxcore.kernels._plugin_primitive import platform_primitive
from jaxcore.kernels._plugin_registration import plugin_initializer, quantized_matmul_impls
from jaxcore.kernels._plugin_tiles import TileOverrides
from jaxcore.kernels._stacked import STACKED_KERNEL_NAME

__all__ = [
    "DQ_GROUP_SIZE",
    "DQ_KERNEL_NAME",
    "KERNEL_DTYPES",
    "Problem",
    "STACKED_KERNEL_NAME",
    "TRANSPOSED_KERNEL_NAME",
    "TileOverrides",
    "check_problem",
    "codebook_lookup",
    "expand_dq_scales",
    "nf4_code",
    "nibbles",
    "platform_primitive",
    "plugin_initializer",
    "prepare_operands",
    "quantized_matmul_impls",
    "split_activations",
    "xla_quantized_matmul",
]

"""``hax.nn``: activations, losses, attention and layers on named arrays.

Layers (``Linear``, ``Embedding``, ``LayerNorm``, ``RmsNorm``, ``Dropout``, ``MLP``,
``Conv``, ``ConvTranspose``, ``MoELinear``, ``Stacked``, ``BlockSeq``) are frozen
``jaxcore.tree`` dataclasses rather than equinox modules: they are pytrees (arrays are
leaves, axes and hyper-parameters static), so ``jax.jit``/``jax.grad`` and equinox's
``filter_jit``/``filter_grad`` all accept them, and jaxcore needs no extra dependency.
They are built with ``.init(...)`` and applied by calling, as in Haliax.

Haliax's submodules are here under the same names: ``hax.nn.attention``, ``hax.nn.scan``
(``Stacked``, ``BlockSeq``, ``ScanCheckpointPolicy``), ``hax.nn.conv``, ``hax.nn.pool`` and
``hax.nn.mup`` (muP rules for ``Linear.init(..., reparam_cls=...)``).
"""

from jaxcore.named._checkpoint import ScanCheckpointPolicy
from jaxcore.named.nn import _activations as activations
from jaxcore.named.nn import _attention as attention
from jaxcore.named.nn import _conv as conv
from jaxcore.named.nn import _mup as mup
from jaxcore.named.nn import _pool as pool
from jaxcore.named.nn import _scan as scan
from jaxcore.named.nn._activations import (
    celu,
    elu,
    gelu,
    glu,
    hard_sigmoid,
    hard_silu,
    hard_swish,
    hard_tanh,
    leaky_relu,
    log_sigmoid,
    log_softmax,
    logsumexp,
    one_hot,
    quick_gelu,
    relu,
    relu6,
    relu_squared,
    selu,
    sigmoid,
    silu,
    soft_sign,
    softmax,
    softplus,
    sparse_plus,
    squareplus,
    standardize,
    swish,
)
from jaxcore.named.nn._attention import (
    alibi_attention_bias,
    causal_mask,
    combine_masks_and,
    combine_masks_or,
    dot_product_attention,
    dot_product_attention_weights,
    dropout_mask,
    forgetful_causal_mask,
    mask_to_bias,
    prefix_lm_mask,
)
from jaxcore.named.nn._conv import Conv, ConvTranspose
from jaxcore.named.nn._layers import MLP, Dropout, Embedding, LayerNorm, RMSNorm, RmsNorm, dropout
from jaxcore.named.nn._linear import Linear
from jaxcore.named.nn._loss import (
    binary_cross_entropy_loss,
    cross_entropy_loss,
    cross_entropy_loss_and_log_normalizers,
    maybe_reduce_loss,
)
from jaxcore.named.nn._moe_linear import MoELinear
from jaxcore.named.nn._pool import max_pool, mean_pool, min_pool
from jaxcore.named.nn._scan import BlockSeq, Stacked

__all__ = [
    "attention",
    "binary_cross_entropy_loss",
    "BlockSeq",
    "activations",
    "alibi_attention_bias",
    "causal_mask",
    "celu",
    "combine_masks_and",
    "combine_masks_or",
    "Conv",
    "conv",
    "ConvTranspose",
    "cross_entropy_loss",
    "cross_entropy_loss_and_log_normalizers",
    "dot_product_attention",
    "dot_product_attention_weights",
    "Dropout",
    "dropout",
    "dropout_mask",
    "forgetful_causal_mask",
    "elu",
    "Embedding",
    "gelu",
    "glu",
    "hard_sigmoid",
    "hard_silu",
    "hard_swish",
    "hard_tanh",
    "LayerNorm",
    "leaky_relu",
    "Linear",
    "log_sigmoid",
    "log_softmax",
    "logsumexp",
    "mask_to_bias",
    "max_pool",
    "maybe_reduce_loss",
    "mean_pool",
    "min_pool",
    "MLP",
    "MoELinear",
    "mup",
    "one_hot",
    "pool",
    "prefix_lm_mask",
    "quick_gelu",
    "relu",
    "relu6",
    "relu_squared",
    "RMSNorm",
    "RmsNorm",
    "scan",
    "ScanCheckpointPolicy",
    "selu",
    "sigmoid",
    "silu",
    "soft_sign",
    "softmax",
    "softplus",
    "sparse_plus",
    "squareplus",
    "Stacked",
    "standardize",
    "swish",
]

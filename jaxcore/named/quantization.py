"""Quantized training of named layers: int8 / fp8 ``dot_general`` ops (``hax.quantization``).

A layer with a ``dot_general`` field (``hax.nn.Linear``) calls that op instead of
``jax.lax.dot_general``. ``Int8DotGeneralOp`` and ``Fp8DotGeneralOp`` run the forward
contraction on quantized operands and pass gradients straight through to the float
weights (the weights stay float; only the matmul sees the low-precision values), which is
quantization-aware training. ``quantize_linear_layers`` swaps the op into every matching
layer of a model, selected by ``QuantizationConfig.targets``.

Both ops scale per tensor, from the current values (no amax history): the largest
magnitude maps to the format's largest value (127 for int8, 448 for fp8 e4m3). In the
backward pass the int8 op computes exact float gradients of the float contraction; the
fp8 op rounds the incoming gradient to fp8 e5m2 (the wider-range format) first, as fp8
training recipes do. Rounding here is plain symmetric rounding rather than
``jaxcore.quant``'s block-wise weight formats: those pack 2-D weights for inference
kernels, while a training op must quantize both operands of any ``dot_general``.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Sequence
from typing import Any, Protocol

import jax
import jax.numpy as jnp
from jax import lax

from jaxcore.named.state_dict import with_prefix
from jaxcore.named.util import replace_fields

__all__ = [
    "DefaultDotGeneralOp",
    "DotGeneralOp",
    "Fp8DotGeneralOp",
    "Int8DotGeneralOp",
    "QuantizationConfig",
    "quantize_linear_layers",
]

_INT8_MAX = 127.0
_E4M3_MAX = float(jnp.finfo(jnp.float8_e4m3fn).max)
_E5M2_MAX = float(jnp.finfo(jnp.float8_e5m2).max)


class DotGeneralOp(Protocol):
    """What a layer's ``dot_general`` field holds: ``jax.lax.dot_general``'s signature."""

    def __call__(
        self,
        lhs: jax.Array,
        rhs: jax.Array,
        dimension_numbers: Any,
        precision: Any = None,
        preferred_element_type: Any = None,
    ) -> jax.Array: ...


def _dims_key(dimension_numbers: Any) -> tuple:
    """``dimension_numbers`` as nested tuples (hashable, for ``custom_vjp``'s static args)."""
    (lc, rc), (lb, rb) = dimension_numbers
    return ((tuple(lc), tuple(rc)), (tuple(lb), tuple(rb)))


def _out_dtype(lhs: jax.Array, rhs: jax.Array, preferred: Any) -> Any:
    return jnp.dtype(preferred) if preferred is not None else jnp.result_type(lhs, rhs)


@dataclasses.dataclass(frozen=True)
class DefaultDotGeneralOp:
    """``jax.lax.dot_general`` itself (a hashable stand-in for "not quantized")."""

    @classmethod
    def init(cls) -> DefaultDotGeneralOp:
        """A new op (Haliax's constructor spelling: ``DefaultDotGeneralOp.init()``)."""
        return cls()

    def __call__(
        self, lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None
    ) -> jax.Array:
        return lax.dot_general(
            lhs,
            rhs,
            dimension_numbers,
            precision=precision,
            preferred_element_type=preferred_element_type,
        )


def _scale(x: jax.Array, limit: float) -> jax.Array:
    amax = jnp.max(jnp.abs(x.astype(jnp.float32)))
    return jnp.where(amax > 0, amax / limit, 1.0)


def _int8(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    scale = _scale(x, _INT8_MAX)
    q = jnp.clip(jnp.round(x.astype(jnp.float32) / scale), -_INT8_MAX, _INT8_MAX)
    return q.astype(jnp.int8), scale


def _fp8(x: jax.Array, dtype: Any, limit: float) -> tuple[jax.Array, jax.Array]:
    scale = _scale(x, limit)
    return (x.astype(jnp.float32) / scale).astype(dtype), scale


def _float_vjp(lhs, rhs, dims, g):
    _, vjp = jax.vjp(
        lambda a, b: lax.dot_general(a, b, dims, preferred_element_type=jnp.float32),
        lhs.astype(jnp.float32),
        rhs.astype(jnp.float32),
    )
    dl, dr = vjp(g.astype(jnp.float32))
    return dl.astype(lhs.dtype), dr.astype(rhs.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _int8_dot(lhs, rhs, dims, out_dtype):
    ql, sl = _int8(lhs)
    qr, sr = _int8(rhs)
    acc = lax.dot_general(ql, qr, dims, preferred_element_type=jnp.int32)
    return (acc.astype(jnp.float32) * (sl * sr)).astype(out_dtype)


def _int8_fwd(lhs, rhs, dims, out_dtype):
    return _int8_dot(lhs, rhs, dims, out_dtype), (lhs, rhs)


def _int8_bwd(dims, out_dtype, res, g):
    lhs, rhs = res
    return _float_vjp(lhs, rhs, dims, g)


_int8_dot.defvjp(_int8_fwd, _int8_bwd)


@dataclasses.dataclass(frozen=True)
class Int8DotGeneralOp:
    """``dot_general`` on int8-rounded operands (int32 accumulation), straight-through grads.

    Each operand is scaled per tensor so its largest magnitude is 127 and rounded to int8;
    the int32 product is rescaled to float. Gradients are those of the float contraction.
    """

    @classmethod
    def init(cls) -> Int8DotGeneralOp:
        """A new op (Haliax's constructor spelling: ``Int8DotGeneralOp.init()``)."""
        return cls()

    def __call__(
        self, lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None
    ) -> jax.Array:
        del precision  # integer arithmetic is exact
        out_dtype = _out_dtype(lhs, rhs, preferred_element_type)
        return _int8_dot(lhs, rhs, _dims_key(dimension_numbers), out_dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _fp8_dot(lhs, rhs, dims, out_dtype):
    ql, sl = _fp8(lhs, jnp.float8_e4m3fn, _E4M3_MAX)
    qr, sr = _fp8(rhs, jnp.float8_e4m3fn, _E4M3_MAX)
    acc = lax.dot_general(ql, qr, dims, preferred_element_type=jnp.float32)
    return (acc * (sl * sr)).astype(out_dtype)


def _fp8_fwd(lhs, rhs, dims, out_dtype):
    return _fp8_dot(lhs, rhs, dims, out_dtype), (lhs, rhs)


def _fp8_bwd(dims, out_dtype, res, g):
    lhs, rhs = res
    qg, sg = _fp8(g, jnp.float8_e5m2, _E5M2_MAX)
    return _float_vjp(lhs, rhs, dims, qg.astype(jnp.float32) * sg)


_fp8_dot.defvjp(_fp8_fwd, _fp8_bwd)


@dataclasses.dataclass(frozen=True)
class Fp8DotGeneralOp:
    """``dot_general`` on fp8 (e4m3) operands with float32 accumulation.

    Operands are scaled per tensor so the largest magnitude is 448 and cast to
    ``float8_e4m3fn``; in the backward pass the incoming gradient is rounded to
    ``float8_e5m2`` and the float contraction's gradients are taken through it.
    """

    @classmethod
    def init(cls, amax_history_length: int = 1024, compute_dtype: Any = None) -> Fp8DotGeneralOp:
        """A new op (Haliax's constructor spelling).

        Args:
            amax_history_length: Accepted for Haliax's signature; unused, since this op
                scales by the current tensor's maximum (no delayed-scaling history).
            compute_dtype: Accepted for Haliax's signature; unused (accumulation is float32).

        Returns:
            The op.
        """
        del amax_history_length, compute_dtype
        return cls()

    def __call__(
        self, lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None
    ) -> jax.Array:
        del precision
        out_dtype = _out_dtype(lhs, rhs, preferred_element_type)
        return _fp8_dot(lhs, rhs, _dims_key(dimension_numbers), out_dtype)


@dataclasses.dataclass(frozen=True)
class QuantizationConfig:
    """Which layers to quantize, and how.

    Attributes:
        targets: Regular expressions matched (``re.fullmatch``) against each layer's dotted
            path (``"layers.0.mlp.up"``, as ``to_state_dict`` names it); a layer also
            matches if its path ends with ``"." + target``. ``None`` selects every layer.
        int8: Use ``Int8DotGeneralOp``.
        fp8: Use ``Fp8DotGeneralOp``.
    """

    targets: Sequence[str] | str | None = None
    int8: bool = False
    fp8: bool = False

    def __post_init__(self) -> None:
        if self.int8 == self.fp8:
            raise ValueError(
                "QuantizationConfig needs exactly one of int8=True and fp8=True, got "
                f"int8={self.int8}, fp8={self.fp8}"
            )

    def op(self) -> DotGeneralOp:
        """The ``dot_general`` op this config installs."""
        return Int8DotGeneralOp() if self.int8 else Fp8DotGeneralOp()


def _matches(path: str, targets: Sequence[str]) -> str | None:
    for t in targets:
        if re.fullmatch(t, path) or path.endswith("." + t) or path == t:
            return t
    return None


def quantize_linear_layers(tree: Any, config: QuantizationConfig) -> Any:
    """``tree`` with the ``dot_general`` of every selected layer set to the config's op.

    A layer is any dataclass module with a ``dot_general`` field (``hax.nn.Linear``);
    stacked layers are one layer (their path has no layer index).

    Args:
        tree: The model.
        config: Which layers (``targets``) and which op (``int8``/``fp8``).

    Returns:
        The model with the op installed; everything else is shared with ``tree``.

    Raises:
        ValueError: if a target matches no layer (a typo would otherwise train in float).
    """
    targets = [config.targets] if isinstance(config.targets, str) else config.targets
    op = config.op()
    used: set[str] = set()

    def visit(node: Any, path: str | None) -> Any:
        if isinstance(node, dict):
            return {k: visit(v, with_prefix(path, k)) for k, v in node.items()}
        if isinstance(node, (list, tuple)) and not hasattr(node, "_fields"):
            return type(node)(visit(v, with_prefix(path, i)) for i, v in enumerate(node))
        if not dataclasses.is_dataclass(node) or isinstance(node, type):
            return node
        names = [f.name for f in dataclasses.fields(node)]
        updates = {}
        if "dot_general" in names:
            hit = None if targets is None else _matches(path or "", targets)
            if targets is None or hit is not None:
                updates["dot_general"] = op
                if hit is not None:
                    used.add(hit)
        for name in names:
            if name in ("dot_general", "stacked"):
                continue
            value = getattr(node, name)
            new = visit(value, with_prefix(path, name))
            if new is not value:
                updates[name] = new
        if "stacked" in names:  # a stacked module: its layer has the stack's own path
            value = getattr(node, "stacked")  # noqa: B009 - any dataclass with the field
            new = visit(value, path)
            if new is not value:
                updates["stacked"] = new
        return replace_fields(node, updates) if updates else node

    out = visit(tree, None)
    if targets is not None:
        unused = [t for t in targets if t not in used]
        if unused:
            raise ValueError(f"quantize_linear_layers: targets {unused} match no layer")
    return out

"""Quantization-aware training: quantize in the forward pass, pass gradients straight through."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence

import jax

from jaxcore.implicit import ste
from jaxcore.quant import _checks
from jaxcore.quant._arrays import ArrayInt4, ArrayInt8, ArrayNF4

_CLASSES: dict[str, type[ArrayInt8] | type[ArrayInt4] | type[ArrayNF4]] = {
    "int8": ArrayInt8,
    "int4": ArrayInt4,
    "nf4": ArrayNF4,
}


@functools.cache
def _straight_through(fmt: str, options: tuple) -> Callable[[jax.Array], jax.Array]:
    """One `ste`-wrapped quantize-dequantize function per (format, options), reused across calls."""
    cls = _CLASSES[fmt]
    kwargs = dict(options)
    return ste(lambda w: cls.quantize(w, **kwargs).materialize())


def fake_quantize(w: jax.Array, fmt: str = "nf4", **options) -> jax.Array:
    """Rounds ``w`` to the values format ``fmt`` can store, with a straight-through gradient.

    The forward value is exactly what the quantized weight materializes to, so a model
    trained through it sees the quantization error; the gradient is the identity
    (`jaxcore.implicit.ste`), so it reaches the float master weights ``w`` unchanged.
    To keep the quantized weight itself in the forward pass (so that matmuls run the
    quantized kernel), wrap the quantizer instead: ``ste(ArrayNF4.quantize)(w)`` under
    `jaxcore.implicit.implicit` gives the same gradient.

    Args:
      w: float (K, N) master weight.
      fmt: ``"int8"``, ``"int4"`` or ``"nf4"``.
      **options: keyword options of that format's ``quantize`` (``block_size``, ``axis``,
        ``double_quant``, ``check_finite``, ``scale_dtype``), e.g.
        ``fake_quantize(w, "int4", block_size=32)``.
        ``block_size`` may also be given as a one-element sequence (``[32]``, ``(32,)``).

    Returns:
      The dequantized weight, shaped and typed like ``w``.

    Raises:
      ValueError: for an unknown format, and any error of that format's ``quantize``.
    """
    if fmt not in _CLASSES:
        raise ValueError(
            f"fake_quantize: unknown format {fmt!r}; expected one of {sorted(_CLASSES)}"
        )
    if options.pop("check_finite", False):
        # Checked here, on the caller's value: `ste` traces the function it wraps.
        _checks.check_weight(w, f"fake_quantize({fmt!r})", check_finite=True)
    block_size = options.get("block_size")
    if isinstance(block_size, Sequence) and not isinstance(block_size, str):
        if len(block_size) != 1:
            raise ValueError(
                f"fake_quantize: block_size={block_size!r}: a sequence must hold exactly one "
                "block size (the blocks run along one axis; pick it with axis=)"
            )
        (options["block_size"],) = block_size
    try:
        fn = _straight_through(fmt, tuple(sorted(options.items(), key=operator.itemgetter(0))))
    except TypeError:  # an unhashable option value: let quantize() judge it, uncached
        fn = _straight_through.__wrapped__(fmt, tuple(options.items()))
    return fn(w)

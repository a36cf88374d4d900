"""Quantisation-aware training: quantise in the forward pass, pass gradients straight through."""

from __future__ import annotations

import functools

import jax

from jaxcore.implicit import ste

_CLASSES = {}


def _class_for(fmt: str):
    if not _CLASSES:
        from jaxcore.quant._arrays import ArrayInt4, ArrayInt8, ArrayNF4

        _CLASSES.update(int8=ArrayInt8, int4=ArrayInt4, nf4=ArrayNF4)
    if fmt not in _CLASSES:
        raise ValueError(f"fake_quantize: unknown format {fmt!r}; expected one of {sorted(_CLASSES)}")
    return _CLASSES[fmt]


@functools.lru_cache(maxsize=None)
def _straight_through(fmt: str, options: tuple) -> callable:
    cls = _class_for(fmt)
    kwargs = dict(options)
    return ste(lambda w: cls.quantize(w, **kwargs).materialize())


def fake_quantize(w: jax.Array, fmt: str = "nf4", **options) -> jax.Array:
    """Rounds ``w`` to the values format ``fmt`` can store, with a straight-through gradient.

    The forward value is exactly what the quantised weight materialises to, so a model
    trained through it sees the quantisation error; the gradient is the identity
    (`jaxcore.implicit.ste`), so it reaches the float master weights ``w`` unchanged.

    Args:
      w: float (K, N) master weight.
      fmt: ``"int8"``, ``"int4"`` or ``"nf4"``.
      **options: keyword options of that format's ``quantize`` (``block_size``, ``axis``,
        ``double_quant``), e.g. ``fake_quantize(w, "int4", block_size=32)``.

    Returns:
      The dequantised weight, shaped and typed like ``w``.

    Raises:
      ValueError: for an unknown format, and any error of that format's ``quantize``.
    """
    return _straight_through(fmt, tuple(sorted(options.items())))(w)

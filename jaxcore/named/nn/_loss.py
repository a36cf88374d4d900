"""Losses over named axes: cross entropy against a named label axis, binary cross entropy."""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp

from jaxcore.named import _ops
from jaxcore.named._array import NamedArray
from jaxcore.named._axis import Axis, AxisSelection, AxisSelector
from jaxcore.named._dot import dot
from jaxcore.named.nn._activations import log_sigmoid, logsumexp, one_hot

__all__ = [
    "binary_cross_entropy_loss",
    "cross_entropy_loss",
    "cross_entropy_loss_and_log_normalizers",
    "maybe_reduce_loss",
]


class _Unspecified:
    def __repr__(self):
        return "UNSPECIFIED"


UNSPECIFIED = _Unspecified()
"""Default ``reduction``: the mean over every axis (or over ``reduction_axis``)."""


def maybe_reduce_loss(
    arr: NamedArray,
    reduction: Callable | None | _Unspecified,
    reduction_axis: AxisSelection | None,
    where: NamedArray | None,
):
    """Reduces per-position losses with ``reduction`` (default ``hax.mean``) over ``reduction_axis``.

    ``reduction=None`` (or ``reduction_axis=()``) keeps the per-position losses, zeroing those
    where ``where`` is False.
    """
    if reduction is not None and reduction_axis != ():
        reduce = _ops.mean if isinstance(reduction, _Unspecified) else reduction
        return reduce(arr, axis=reduction_axis, where=where)
    if where is not None:
        return _ops.where(where, arr, 0)
    return arr


def cross_entropy_loss_and_log_normalizers(
    logits: NamedArray,
    Label: AxisSelector,
    targets: NamedArray,  # noqa: N803 - Haliax's name
) -> tuple[NamedArray, NamedArray]:
    """Per-position cross entropy and ``logsumexp(logits, Label)``.

    ``targets`` are probabilities (e.g. one-hot) along ``Label``; integer class ids without
    the ``Label`` axis are one-hot encoded first.
    """
    if not isinstance(logits, NamedArray) or not isinstance(targets, NamedArray):
        raise TypeError("cross_entropy_loss: logits and targets must be NamedArrays")
    name = Label.name if isinstance(Label, Axis) else Label
    if name not in logits._names:
        raise ValueError(
            f"cross_entropy_loss: label axis {name!r} is not in logits with axes "
            "(" + ", ".join(f"{a.name}={a.size}" for a in logits.axes) + ")"
        )
    label_axis = logits.axes[logits._names.index(name)]
    if name not in targets._names:
        if not jnp.issubdtype(targets.dtype, jnp.integer):
            raise ValueError(
                f"cross_entropy_loss: targets with axes {targets.axes} have no label axis {name!r}; "
                "give probabilities along it or integer class ids"
            )
        targets = one_hot(targets, label_axis, dtype=logits.dtype)
    log_normalizers = logsumexp(logits, label_axis)
    loss = dot(targets.astype(logits.dtype), log_normalizers - logits, axis=label_axis)
    return loss, log_normalizers


def cross_entropy_loss(
    logits: NamedArray,
    Label: AxisSelector,  # noqa: N803 - Haliax's name
    targets: NamedArray,
    reduction: Callable | None | _Unspecified = UNSPECIFIED,
    where: NamedArray | None = None,
    reduction_axis: AxisSelection | None = None,
) -> NamedArray:
    """Softmax cross entropy of ``logits`` along ``Label`` against ``targets``.

    Args:
      logits: unnormalized log-probabilities with the ``Label`` axis.
      Label: the class axis.
      targets: probabilities along ``Label`` (one-hot or soft labels), or integer class ids
        without ``Label``.
      reduction: how to reduce per-position losses (default ``hax.mean``; ``None`` keeps them).
      where: mask of positions that count.
      reduction_axis: axes to reduce over (default all).

    Returns:
      The (reduced) loss as a ``NamedArray``.
    """
    loss, _ = cross_entropy_loss_and_log_normalizers(logits, Label, targets)
    return maybe_reduce_loss(loss, reduction, reduction_axis, where)


def binary_cross_entropy_loss(
    logits: NamedArray,
    targets: NamedArray,
    reduction: Callable | None | _Unspecified = UNSPECIFIED,
    where: NamedArray | None = None,
    reduction_axis: AxisSelection | None = None,
) -> NamedArray:
    """Sigmoid cross entropy of ``logits`` against 0/1 (or soft) ``targets``, matched by axis name."""
    log_p = log_sigmoid(logits)
    log_not_p = log_sigmoid(-logits)
    targets = targets.astype(logits.dtype) if isinstance(targets, NamedArray) else targets
    loss = -targets * log_p - (1.0 - targets) * log_not_p
    return maybe_reduce_loss(loss, reduction, reduction_axis, where)

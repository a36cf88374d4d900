"""Numerical helpers: table-lookup ``isin`` and compensated (Kahan) summation."""

from __future__ import annotations

import operator
from typing import Any, TypeVar

import jax
import jax.numpy as jnp

from jaxcore.tree import assert_same_structure, tree_structure, tree_zeros_like

T = TypeVar("T")


def isin(a: Any, b: Any, max_item: int) -> jax.Array:
    """Tests membership of integers in ``a`` among the integers in ``b``.

    Builds a boolean table of length ``max_item`` marking the values of ``b`` and
    gathers from it, which is O(len(a) + len(b) + max_item) instead of the
    O(len(a) * len(b)) comparisons of ``jnp.isin``. Values outside
    ``[0, max_item)`` (in either array) are never members.

    Args:
        a: integer array of queries (any shape).
        b: integer array of reference values (any shape).
        max_item: exclusive upper bound of the values; a concrete Python int.

    Returns:
        Boolean array with ``a``'s shape, True where ``a``'s value occurs in ``b``.

    Raises:
        TypeError: if ``a`` or ``b`` is not of integer dtype, or ``max_item`` is
            not a concrete integer.
        ValueError: if ``max_item`` is not positive.
    """
    try:
        size = operator.index(max_item)
    except TypeError:
        raise TypeError(
            f"isin: max_item must be a concrete Python int (it sets the lookup "
            f"table's size), got {type(max_item).__name__}: {max_item!r}"
        ) from None
    if size <= 0:
        raise ValueError(f"isin: max_item must be positive, got {size}")
    a = jnp.asarray(a)
    b = jnp.asarray(b)
    for name, arr in (("a", a), ("b", b)):
        if not jnp.issubdtype(arr.dtype, jnp.integer):
            raise TypeError(f"isin: {name} must have an integer dtype, got {arr.dtype}")
    b = b.ravel()
    # Out-of-range references are redirected past the end and dropped (negative
    # indices would otherwise wrap around).
    b_valid = _in_table(b, size)
    table = (
        jnp.zeros((size,), dtype=bool)
        .at[jnp.where(b_valid, _as_index(b), size)]
        .set(True, mode="drop")
    )
    a_valid = _in_table(a, size)
    return table[jnp.where(a_valid, _as_index(a), 0)] & a_valid


def _in_table(x: jax.Array, size: int) -> jax.Array:
    """Returns ``0 <= x < size`` without overflowing ``size`` into ``x``'s dtype."""
    valid = x >= 0
    if size <= jnp.iinfo(x.dtype).max:
        valid = valid & (x < size)
    return valid


def _as_index(x: jax.Array) -> jax.Array:
    """Widens narrow integer dtypes (int8, uint8, ...) so ``size`` fits beside them."""
    if x.dtype.itemsize < 4 or x.dtype == jnp.uint32:
        return x.astype(jnp.int32)
    return x


def _drop_nonfinite(comp: Any) -> Any:
    """Zeros non-finite compensation entries (exact dtypes pass through).

    Once a running sum overflows to an infinity, ``(t - total) - y`` is NaN or an
    infinity, and feeding it back would turn the infinite sum into NaN.
    """
    if not jnp.issubdtype(jnp.result_type(comp), jnp.inexact):
        return comp
    return jnp.where(jnp.isfinite(comp), comp, jnp.zeros_like(comp))


def kahan_summation(*summands: T, compensate: T | None = None) -> tuple[T, T]:
    """Sums pytrees leaf-wise with Kahan's compensated summation.

    The first summand is the running total; each further summand ``x`` is added as
    ``y = x - c``, ``t = total + y``, ``c = (t - total) - y`` (the part of ``y``
    that rounding lost, negated), so the error stays O(eps) instead of growing with
    the number of terms. A compensation that is not finite (the sum overflowed) is
    replaced by zero, so an infinite sum stays infinite instead of becoming NaN.
    To continue a sum across calls (e.g. an accumulator in a ``lax.scan``), pass
    the returned compensation back as ``compensate`` with the returned total as the
    first summand. Trees without leaves (``{}``, ``()``) sum to themselves.

    Args:
        *summands: one or more pytrees with the same structure.
        compensate: compensation term from a previous call (zeros if ``None``).

    Returns:
        ``(total, compensation)``, both with the summands' structure.

    Raises:
        ValueError: if no summand is given or structures differ (the first
            differing path is named).

    Reference:
        W. Kahan, "Further remarks on reducing truncation errors", 1965.
    """
    if not summands:
        raise ValueError("kahan_summation needs at least one summand")
    total = summands[0]
    if compensate is None:
        comp = tree_zeros_like(total)
    else:
        assert_same_structure(total, compensate)
        comp = compensate
    assert_same_structure(*summands)
    if len(summands) == 1:
        return total, comp
    treedef = tree_structure(total)
    totals = treedef.flatten_up_to(total)
    comps = treedef.flatten_up_to(comp)
    for x in summands[1:]:
        for i, leaf in enumerate(treedef.flatten_up_to(x)):
            y = leaf - comps[i]
            t = totals[i] + y
            comps[i] = _drop_nonfinite((t - totals[i]) - y)
            totals[i] = t
    return treedef.unflatten(totals), treedef.unflatten(comps)

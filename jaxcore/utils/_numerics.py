"""Numerical helpers: table-lookup ``isin`` and compensated (Kahan) summation."""

from __future__ import annotations

import operator
from typing import Any, TypeVar

import jax
import jax.numpy as jnp

from jaxcore.tree import assert_same_structure, tree_zeros_like

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
    table = jnp.zeros((size,), dtype=bool).at[jnp.where(b_valid, _as_index(b), size)].set(
        True, mode="drop"
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


def _kahan_step(total: Any, comp: Any, x: Any) -> tuple[Any, Any]:
    y = x - comp
    new_total = total + y
    # What was lost when adding y to total: (new_total - total) recovers the
    # high part of y that made it in; subtracting y leaves minus the lost part.
    new_comp = (new_total - total) - y
    return new_total, new_comp


def kahan_summation(*summands: T, compensate: T | None = None) -> tuple[T, T]:
    """Sums pytrees leaf-wise with Kahan's compensated summation.

    The first summand is the running total; each further summand is added with
    the rounding error of the previous additions fed back in, so the error stays
    O(eps) instead of growing with the number of terms. To continue a sum across
    calls (e.g. an accumulator in a ``lax.scan``), pass the returned
    compensation back as ``compensate`` with the returned total as the first
    summand.

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
    outer = jax.tree_util.tree_structure(total)
    inner = jax.tree_util.tree_structure((0, 0))
    for x in summands[1:]:
        pairs = jax.tree_util.tree_map(_kahan_step, total, comp, x)
        total, comp = jax.tree_util.tree_transpose(outer, inner, pairs)
    return total, comp

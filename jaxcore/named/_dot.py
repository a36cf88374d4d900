"""Named contractions: ``dot`` and ``einsum``, lowered straight to ``lax.dot_general``.

Axes are matched by name. In ``dot(*arrays, axis=...)`` the selected axes are summed over,
every other axis shared by several operands is a batch axis, and the rest are kept (outer
product). The plan -- which ``dot_general`` dimension numbers to use, which axes to pre-sum
and which final transpose to apply -- depends only on the operands' axes and the arguments,
so it is computed once and cached; an eager call is a dict lookup plus the ``dot_general``
calls themselves (no einsum string is built or parsed).

``einsum`` parses its equation (cached, shared parser with ``rearrange``), turns it into a
``(contracted axes, output order)`` pair and reuses the same planner.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from types import EllipsisType
from typing import Any

import jax
import jax.numpy as jnp

from jaxcore.named._array import NamedArray, Tracer
from jaxcore.named._axis import Axis, AxisSelection, selection_items
from jaxcore.named._rearrange import (
    Capture,
    Side,
    binding_name,
    fill_ellipses,
    parse_einsum,
    raise_parse_error,
)

__all__ = ["dot", "einsum", "order_for_partial_spec"]

_UNSET: Any = object()


# ----------------------------------------------------------------------------- partial orders


def order_for_partial_spec(
    spec: Sequence[Axis | str | EllipsisType], axes: Sequence[Axis]
) -> tuple[Axis, ...]:
    """Orders ``axes`` to agree with a partial spec such as ``(..., "H", "W")``.

    Axes named in ``spec`` appear in that order; the others fill the ``...`` slots, in
    ``axes`` order. With several ``...`` they are shared out by Haliax's greedy rule
    (``rearrange_for_partial_order``; see ``_rearrange.fill_ellipses``): an unnamed axis
    goes to the current target slot, which moves to the first still-empty ``...`` after
    each named axis met in ``axes``.

    Args:
      spec: axes or names, with any number of ``...``.
      axes: the axes to order.

    Returns:
      ``axes`` reordered.

    Raises:
      ValueError: if ``spec`` names an axis not in ``axes``, names one twice, gives a
        different size for it, or has no ``...`` and leaves axes out.
    """
    by_name = {a.name: a for a in axes}
    natural = {a.name: i for i, a in enumerate(axes)}
    named_slot: dict[str, int] = {}  # name -> number of ellipses before it in spec
    slots = 0
    for entry in spec:
        if entry is Ellipsis:
            slots += 1
            continue
        name = entry.name if isinstance(entry, Axis) else entry
        if not isinstance(name, str):
            raise TypeError(f"out_axes entries must be Axis, str or ..., got {entry!r}")
        if name not in by_name:
            raise ValueError(
                f"Axis {name!r} in {tuple(spec)!r} is not among the axes {tuple(axes)!r}"
            )
        if name in named_slot:
            raise ValueError(f"Axis {name!r} occurs twice in {tuple(spec)!r}")
        if isinstance(entry, Axis) and entry.size != by_name[name].size:
            raise ValueError(
                f"Axis {name!r} has size {by_name[name].size} but {tuple(spec)!r} says {entry.size}"
            )
        named_slot[name] = slots
    free = [a for a in axes if a.name not in named_slot]
    if slots == 0:
        if free:
            raise ValueError(
                f"Axes {[a.name for a in free]} are missing from {tuple(spec)!r} (add ... to place them)"
            )
        return tuple(by_name[e.name if isinstance(e, Axis) else e] for e in spec if e is not ...)
    filled = fill_ellipses(
        [e if e is Ellipsis else ((e.name if isinstance(e, Axis) else e),) for e in spec],
        list(natural),
    )
    return tuple(by_name[name] for slot in filled for name in slot)


# ----------------------------------------------------------------------------- planning


@dataclasses.dataclass(frozen=True)
class _Step:
    """One pairwise ``dot_general``: dims of the running result (lhs) and the next operand."""

    lhs_contract: tuple[int, ...]
    rhs_contract: tuple[int, ...]
    lhs_batch: tuple[int, ...]
    rhs_batch: tuple[int, ...]
    rhs_presum: tuple[int, ...]  # axes of the next operand summed before the product


@dataclasses.dataclass(frozen=True)
class _DotPlan:
    first_presum: tuple[int, ...]
    steps: tuple[_Step, ...]
    perm: tuple[int, ...] | None
    out_axes: tuple[Axis, ...]
    # Eager calls go through one jitted executable per (precision, dtype, dot_general):
    # a single fast C++ dispatch instead of one Python primitive bind per op.
    eager: dict = dataclasses.field(default_factory=dict, compare=False, hash=False, repr=False)


def _check_sizes(operands: Sequence[tuple[Axis, ...]]) -> dict[str, Axis]:
    seen: dict[str, tuple[Axis, int]] = {}
    for i, axes in enumerate(operands):
        for a in axes:
            prev = seen.get(a.name)
            if prev is None:
                seen[a.name] = (a, i)
            elif prev[0].size != a.size:
                raise ValueError(
                    f"Axis {a.name!r} has size {prev[0].size} in operand {prev[1]} "
                    f"but size {a.size} in operand {i}"
                )
    return {name: ax for name, (ax, _) in seen.items()}


def _contracted_names(axis: AxisSelection | None, known: Mapping[str, Axis]) -> frozenset[str]:
    if axis is None:
        return frozenset(known)
    names = set()
    for name, size in selection_items(axis):
        if name not in known:
            raise ValueError(
                f"Cannot contract axis {name!r}: no operand has it (axes: {tuple(known)})"
            )
        if size is not None and size != known[name].size:
            raise ValueError(f"Axis {name!r} has size {known[name].size}, but axis= says {size}")
        names.add(name)
    return frozenset(names)


@functools.lru_cache(maxsize=4096)
def _plan_dot(
    operands: tuple[tuple[Axis, ...], ...],
    contracted: frozenset[str],
    out_spec: tuple | None,
) -> _DotPlan:
    remaining_counts: dict[str, int] = {}
    for axes in operands:
        for a in axes:
            remaining_counts[a.name] = remaining_counts.get(a.name, 0) + 1

    def presum(
        axes: tuple[Axis, ...], others: dict[str, int]
    ) -> tuple[tuple[int, ...], tuple[Axis, ...]]:
        # Contracted axes no other live operand has can be summed right away.
        drop = tuple(
            i for i, a in enumerate(axes) if a.name in contracted and not others.get(a.name)
        )
        return drop, tuple(a for i, a in enumerate(axes) if i not in drop)

    def release(axes: tuple[Axis, ...]) -> None:
        for a in axes:
            remaining_counts[a.name] -= 1

    release(operands[0])
    first_presum, acc = presum(operands[0], remaining_counts)
    steps = []
    for axes in operands[1:]:
        release(axes)
        rhs_presum, rhs = presum(axes, {**remaining_counts, **{a.name: 1 for a in acc}})
        rhs_index = {a.name: i for i, a in enumerate(rhs)}
        lc, rc, lb, rb = [], [], [], []
        for i, a in enumerate(acc):
            j = rhs_index.get(a.name)
            if j is None:
                continue
            if a.name in contracted and not remaining_counts.get(a.name):
                lc.append(i)
                rc.append(j)
            else:
                lb.append(i)
                rb.append(j)
        # dot_general result layout: batch dims, lhs free dims, rhs free dims.
        shared = set(lc) | set(lb)
        rhs_used = set(rc) | set(rb)
        acc = (
            tuple(acc[i] for i in lb)
            + tuple(a for i, a in enumerate(acc) if i not in shared)
            + tuple(a for j, a in enumerate(rhs) if j not in rhs_used)
        )
        steps.append(_Step(tuple(lc), tuple(rc), tuple(lb), tuple(rb), rhs_presum))

    # Natural output order: first occurrence across the operands.
    natural: list[Axis] = []
    seen: set[str] = set()
    for axes in operands:
        for a in axes:
            if a.name not in seen and a.name not in contracted:
                seen.add(a.name)
                natural.append(a)
    out_axes = tuple(natural) if out_spec is None else order_for_partial_spec(out_spec, natural)
    position = {a.name: i for i, a in enumerate(acc)}
    perm = tuple(position[a.name] for a in out_axes)
    return _DotPlan(
        first_presum, tuple(steps), None if perm == tuple(range(len(perm))) else perm, out_axes
    )


def _compute(
    plan: _DotPlan, precision, preferred_element_type, dot_general: Callable, *raws: jax.Array
) -> jax.Array:
    """The positional computation a plan describes (pre-sums, dot_generals, transpose)."""
    if len(raws) > 1:
        dtype = raws[0].dtype
        if any(r.dtype != dtype for r in raws[1:]):
            dtype = jnp.result_type(*raws)
            raws = tuple(r.astype(dtype) for r in raws)
    acc = raws[0]
    if plan.first_presum:
        acc = jnp.sum(acc, axis=plan.first_presum, dtype=acc.dtype)
    for step, rhs in zip(plan.steps, raws[1:]):
        if step.rhs_presum:
            rhs = jnp.sum(rhs, axis=step.rhs_presum, dtype=rhs.dtype)
        acc = dot_general(
            acc,
            rhs,
            ((step.lhs_contract, step.rhs_contract), (step.lhs_batch, step.rhs_batch)),
            precision=precision,
            preferred_element_type=preferred_element_type,
        )
    if preferred_element_type is not None and len(raws) == 1:
        acc = acc.astype(preferred_element_type)
    if plan.perm is not None:
        acc = jax.lax.transpose(acc, plan.perm)
    return acc


def _run_plan(
    plan: _DotPlan,
    raws: Sequence[jax.Array],
    precision,
    preferred_element_type,
    dot_general: Callable,
) -> NamedArray:
    if not any(isinstance(r, Tracer) for r in raws):
        # Eager: reuse one compiled executable per plan (and per static option set).
        key = (precision, preferred_element_type, dot_general)
        try:
            fn = plan.eager.get(key)
            if fn is None:
                fn = plan.eager[key] = jax.jit(
                    functools.partial(
                        _compute, plan, precision, preferred_element_type, dot_general
                    )
                )
        except TypeError:  # unhashable option: run op by op
            fn = None
        if fn is not None:
            return NamedArray._new(fn(*raws), plan.out_axes)
    return NamedArray._new(
        _compute(plan, precision, preferred_element_type, dot_general, *raws), plan.out_axes
    )


def _out_key(out_axes) -> tuple | None:
    if out_axes is None:
        return None
    if isinstance(out_axes, (str, Axis)):
        return (out_axes,)
    return tuple(out_axes)


def dot(
    *arrays,
    axis: AxisSelection | None = _UNSET,
    precision=None,
    preferred_element_type=None,
    out_axes=None,
    dot_general: Callable = jax.lax.dot_general,
) -> NamedArray:
    """Contracts named arrays: sums over ``axis``, batches over other shared axes.

    Both spellings work: ``dot(a, b, axis="embed")`` and (older) ``dot("embed", a, b)``.

    Args:
      *arrays: the ``NamedArray`` operands (one or more).
      axis: the axes to sum over; ``None`` sums over every axis (a 0-axis result) and
        ``()`` gives the outer/batched product.
      precision: passed to ``dot_general``.
      preferred_element_type: passed to ``dot_general`` (the result dtype).
      out_axes: the result's axis order, possibly partial with ``...`` (see
        ``order_for_partial_spec``). Default: the order in which axes first occur.
      dot_general: the ``lax.dot_general``-compatible op to use.

    Returns:
      The contraction as a ``NamedArray``.

    Raises:
      TypeError: if ``axis`` is not given or an operand is not a ``NamedArray``.
      ValueError: if same-named axes differ in size, ``axis`` names an axis no operand has,
        or ``out_axes`` does not fit the result.
    """
    if axis is _UNSET:
        # Older spellings: dot(axis, a, b) and a.dot(axis, b) (axis first or second).
        loose = [i for i, a in enumerate(arrays) if not isinstance(a, NamedArray)]
        if len(loose) != 1 or loose[0] > 1:
            raise TypeError("dot() needs axis= (the axes to contract; None for all, () for none)")
        axis = arrays[loose[0]]
        arrays = arrays[: loose[0]] + arrays[loose[0] + 1 :]
    if not arrays:
        raise TypeError("dot() needs at least one NamedArray operand")
    for i, a in enumerate(arrays):
        if not isinstance(a, NamedArray):
            raise TypeError(f"dot() operand {i} is a {type(a).__name__}, not a NamedArray")
    operands = tuple(a.axes for a in arrays)
    out_spec = _out_key(out_axes)
    key: Any = (operands, axis if not isinstance(axis, list) else tuple(axis), out_spec)
    plan: Any
    try:
        plan = _DOT_PLANS.get(key)
    except TypeError:  # unhashable selection (e.g. a dict): plan without the fast cache
        plan, key = None, None
    if plan is None:
        known = _check_sizes(operands)
        plan = _plan_dot(operands, _contracted_names(axis, known), out_spec)
        if key is not None:
            if len(_DOT_PLANS) >= _MAX_CACHED_PLANS:
                _DOT_PLANS.clear()
            _DOT_PLANS[key] = plan
    return _run_plan(
        plan, [a.array for a in arrays], precision, preferred_element_type, dot_general
    )


_DOT_PLANS: dict = {}
_MAX_CACHED_PLANS = 4096


# ----------------------------------------------------------------------------- einsum


def _simple_names(expr: str, side: Side, what: str) -> list[str | EllipsisType]:
    out: list[str | EllipsisType] = []
    for item in side.items:
        if item is Ellipsis:
            out.append(Ellipsis)
        elif item.is_group:
            raise_parse_error(
                f"Parenthesized groups are not supported in einsum {what}", expr, item.span
            )
        else:
            out.append(item.plain_name)
    return out


def _plan_einsum(
    equation: str, operands: tuple[tuple[Axis, ...], ...], alias_items: tuple
) -> tuple[frozenset[str], tuple]:
    """Turns an einsum equation into ``(contracted names, output spec)`` for ``dot``."""
    aliases = dict(alias_items)
    inputs, rhs = parse_einsum(equation)
    known = _check_sizes(operands)
    used_aliases: set[str] = set()

    def resolve(name: str, item_span) -> str:
        if name in aliases:
            used_aliases.add(name)
            value = aliases[name]
            real = binding_name(name, aliases)
            if real not in known:
                raise_parse_error(
                    f"Alias {name}={value!r} names no axis of the operands (not found in any of the input arrays)",
                    equation,
                    item_span,
                )
            if isinstance(value, Axis) and known[real].size != value.size:
                raise_parse_error(
                    f"Size mismatch: alias {name}={value!r} has size {value.size}, but the operands' axis "
                    f"{real!r} has size {known[real].size}",
                    equation,
                    item_span,
                )
            return real
        return name

    n_out_ellipses = 0
    for item in rhs.items:
        if item is Ellipsis:
            n_out_ellipses += 1
        elif item.is_group:
            raise_parse_error(
                "Parenthesized groups are not supported in einsum outputs", equation, item.span
            )
    rhs_has_ellipsis = n_out_ellipses > 0
    output_only = len(inputs) == 1 and inputs[0].ordered and not inputs[0].items
    unordered = len(inputs) == 1 and not inputs[0].ordered
    if n_out_ellipses > 1 and not unordered:
        # Several '...' only make sense as a partial order over kept axes ("{D} -> ... D ...").
        raise_parse_error("At most one '...' is allowed in this einsum output", equation, None)

    if output_only or unordered:
        lhs = inputs[0]
        lhs_names = set()
        for lhs_name in _simple_names(equation, lhs, "inputs"):
            if lhs_name is Ellipsis:
                continue
            real = resolve(lhs_name, None)
            if real not in known:
                raise_parse_error(
                    f"Axis {real} not present in any operand (axes: {tuple(known)})",
                    equation,
                    None,
                )
            lhs_names.add(real)
        out_real: list[str | EllipsisType] = []
        for item in rhs.items:
            if item is Ellipsis:
                out_real.append(Ellipsis)
                continue
            real = resolve(item.plain_name, item.span)
            if real not in known:
                raise_parse_error(
                    f"Output axis {real} not present in any operand (axes: {tuple(known)})",
                    equation,
                    item.span,
                )
            if real in out_real:
                raise_parse_error(
                    f"Output axis {real!r} occurs twice (an axis may not appear multiple times)",
                    equation,
                    item.span,
                )
            out_real.append(real)
        named_out = {n for n in out_real if n is not Ellipsis}
        # Haliax's rules: "-> H W" keeps exactly the output axes ("-> ... H" keeps all).
        # With braces: a '...' on the right keeps every axis, ordered by the right side
        # (nothing is contracted); else a '...' on the left keeps exactly the output axes;
        # else the axes named on the left but not the right are contracted and the others
        # kept, the output axes last ("{} ->" contracts nothing).
        if output_only or rhs_has_ellipsis:
            contracted = (
                frozenset()
                if rhs_has_ellipsis
                else frozenset(n for n in known if n not in named_out)
            )
            spec = tuple(out_real)
        elif lhs.has_ellipsis:
            contracted = frozenset(n for n in known if n not in named_out)
            spec = tuple(out_real)
        else:
            contracted = frozenset(lhs_names - named_out)
            spec = (Ellipsis, *out_real)
    else:
        if len(inputs) != len(operands):
            raise_parse_error(
                f"The equation has {len(inputs)} inputs but {len(operands)} arrays were given "
                "(the number of inputs does not match number of arrays)",
                equation,
                None,
            )
        letters: dict[str, Axis] = {}
        owner: dict[str, str] = {}
        for k, (side, axes) in enumerate(zip(inputs, operands)):
            if not side.ordered:
                raise_parse_error(
                    "'{...}' inputs cannot be mixed with other inputs; use one '{...}' for all arrays",
                    equation,
                    None,
                )
            items = side.items
            for item in items:
                if item is not Ellipsis and item.is_group:
                    raise_parse_error(
                        "Parenthesized groups are not supported in einsum", equation, item.span
                    )
            n_ell = sum(it is Ellipsis for it in items)
            if n_ell > 1:
                raise_parse_error(f"Input {k} has more than one '...'", equation, None)
            if n_ell:
                cut = items.index(Ellipsis)
                front, back = items[:cut], items[cut + 1 :]
                if len(front) + len(back) > len(axes):
                    raise_parse_error(
                        f"Mismatched number of axes: input {k} names more axes than array {k} has ({len(axes)})",
                        equation,
                        None,
                    )
                pairs = list(zip(front, axes[: len(front)])) + list(
                    zip(back, axes[len(axes) - len(back) :])
                )
            else:
                if len(items) != len(axes):
                    raise_parse_error(
                        f"Mismatched number of axes: input {k} names {len(items)} axes but array {k} has {len(axes)}: "
                        f"{tuple(a.name for a in axes)}",
                        equation,
                        None,
                    )
                pairs = list(zip(items, axes))
            for item, ax in pairs:
                assert isinstance(item, Capture)  # the '...' was cut out above
                letter = item.plain_name
                if letter in aliases:
                    used_aliases.add(letter)
                    value = aliases[letter]
                    if binding_name(letter, aliases) != ax.name or (
                        isinstance(value, Axis) and value != ax
                    ):
                        raise_parse_error(
                            f"{letter!r} is aliased to {value!r} but binds axis {ax!r} of array {k}",
                            equation,
                            item.span,
                        )
                if letter in letters and letters[letter] != ax:
                    raise_parse_error(
                        f"{letter!r} binds both {letters[letter]!r} and {ax!r}", equation, item.span
                    )
                if ax.name in owner and owner[ax.name] != letter:
                    raise_parse_error(
                        f"Axis {ax.name!r} is bound to both {owner[ax.name]!r} and {letter!r}",
                        equation,
                        item.span,
                    )
                letters[letter] = ax
                owner[ax.name] = letter
        out_real = []
        for item in rhs.items:
            if item is Ellipsis:
                out_real.append(Ellipsis)
                continue
            if item.name not in letters:
                raise_parse_error(
                    f"Output {item.name!r} does not occur in any input", equation, item.span
                )
            real = letters[item.name].name
            if real in out_real:
                raise_parse_error(f"Output {item.name!r} occurs twice", equation, item.span)
            out_real.append(real)
        named_out = {n for n in out_real if n is not Ellipsis}
        if rhs_has_ellipsis:
            contracted = frozenset(a.name for a in letters.values() if a.name not in named_out)
        else:
            contracted = frozenset(n for n in known if n not in named_out)
        spec = tuple(out_real)

    unused = [name for name in aliases if name not in used_aliases]
    if unused:
        # Haliax's wording, ending with the names (callers match on it)
        names = ", ".join(map(str, unused))
        raise ValueError(
            f"einsum {equation!r}: Axis alias {names} not used in the equation. "
            f"Unused aliases from kwargs: {names}"
        )
    return contracted, spec


def einsum(
    equation: str,
    *arrays: NamedArray,
    precision=None,
    preferred_element_type=None,
    _dot_general: Callable = jax.lax.dot_general,
    **axis_aliases: Axis | str,
) -> NamedArray:
    """Named Einstein summation.

    Three forms:

    * ordered, one input per array: ``einsum("h w d, d w h -> h w", a, b)``; letters bind to
      axes by position and the result takes the arrays' axis names;
    * named: ``einsum("{H W D} -> H W", a, b)`` sums over the axes named in braces but not in
      the output; axes not mentioned are kept (placed before the output axes), so
      ``"{} ->"`` contracts nothing. As in Haliax, a ``...`` in the output keeps every axis
      (``"{D} -> D ..."`` only reorders); ``{... D} -> D`` keeps exactly ``D``;
    * output only: ``einsum("-> H W", a, b)`` keeps exactly the output axes.

    ``...`` in the output places the remaining (uncontracted) axes; the named form takes
    several (``"{D} -> ... D ..."``, shared out by Haliax's greedy rule). Keyword aliases map
    identifiers in the equation to axes or axis names (``einsum("{x y} -> y", a, b, x=H, y=W)``).

    Args:
      equation: the equation.
      *arrays: the ``NamedArray`` operands.
      precision: passed to ``dot_general``.
      preferred_element_type: passed to ``dot_general``.
      _dot_general: the ``lax.dot_general``-compatible op to use.
      **axis_aliases: identifier -> ``Axis`` or axis name.

    Returns:
      The contraction as a ``NamedArray``.

    Raises:
      ValueError: on a syntax error, an unknown axis or alias, an unused alias, an input count
        that differs from the number of arrays, or inconsistent bindings.
    """
    if not arrays:
        raise TypeError("einsum() needs at least one NamedArray operand")
    for i, a in enumerate(arrays):
        if not isinstance(a, NamedArray):
            raise TypeError(f"einsum() operand {i} is a {type(a).__name__}, not a NamedArray")
    for name, value in axis_aliases.items():
        if not isinstance(value, (Axis, str)):
            raise TypeError(f"einsum alias {name}={value!r} must be an Axis or an axis name")
    operands = tuple(a.axes for a in arrays)
    key = (equation, operands, tuple(axis_aliases.items()))
    plan = _EINSUM_PLANS.get(key)
    if plan is None:
        contracted, spec = _plan_einsum(*key)
        plan = _plan_dot(operands, contracted, spec)
        if len(_EINSUM_PLANS) >= _MAX_CACHED_PLANS:
            _EINSUM_PLANS.clear()
        _EINSUM_PLANS[key] = plan
    return _run_plan(
        plan, [a.array for a in arrays], precision, preferred_element_type, _dot_general
    )


_EINSUM_PLANS: dict = {}

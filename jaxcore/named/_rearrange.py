"""The string form of ``rearrange``: an einops-like language over named axes.

Grammar (one side of ``lhs -> rhs``)::

    side    := ["{"] item* ["}"]           braces: match axes by name (lhs only)
    item    := ident | "..." | group
    group   := "(" [ident ":"] ident+ ")"  a split (lhs) or a merge (rhs)
    ident   := [A-Za-z_][A-Za-z0-9_]* | quoted string

* An **ordered** lhs binds its items to the array's axes by position (``...`` skips any
  number of axes, at most once); a group's name there is only a label. An **unordered**
  lhs (``{...}``) binds every item to the array axis of that name (after alias lookup)
  and leaves the other axes alone.
* A group on the lhs splits one axis into several (at most one size may be unknown; the
  others come from the keyword bindings). A group on the rhs merges lhs variables, in order,
  into one new axis whose name is the group's name.
* ``...`` on the rhs stands for every axis the rhs does not name, in their current order.
  With several ``...`` those axes are shared out as Haliax does (see ``fill_ellipses``).

The parser is shared with ``einsum`` (see ``parse_einsum``); parse results and the
reshape/transpose plans are cached, so repeated eager calls only pay a dict lookup.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from types import EllipsisType
from typing import NoReturn

import jax
from jax import lax

from jaxcore.named._array import NamedArray
from jaxcore.named._axis import Axis

__all__ = [
    "Capture",
    "Side",
    "fill_ellipses",
    "parse_einsum",
    "parse_rearrangement",
    "raise_parse_error",
    "rearrange_str",
]


@dataclasses.dataclass(frozen=True)
class Capture:
    """One item of a rearrangement side that is not ``...``.

    Attributes:
      name: the identifier of a plain item, or the name before ``:`` in a group (``None``
        for an anonymous group such as ``(a b)``).
      members: ``None`` for a plain identifier; for a group, the identifiers inside it.
      span: ``(start, end)`` character offsets in the expression, for error messages.
    """

    name: str | None
    members: tuple[str, ...] | None
    span: tuple[int, int] = dataclasses.field(default=(0, 0), compare=False)

    @property
    def is_group(self) -> bool:
        return self.members is not None

    @property
    def variables(self) -> tuple[str, ...]:
        """The identifiers this item binds: a group's members, or the plain item's name."""
        if self.members is not None:
            return self.members
        assert self.name is not None  # the parser gives every plain item a name
        return (self.name,)

    @property
    def plain_name(self) -> str:
        """The identifier of a plain item (or a named group's name)."""
        assert self.name is not None  # the parser gives every plain item a name
        return self.name


@dataclasses.dataclass(frozen=True)
class Side:
    """One side of an expression: its items in order, and whether it matches by position."""

    items: tuple[Capture | EllipsisType, ...]
    ordered: bool

    @property
    def has_ellipsis(self) -> bool:
        return any(item is Ellipsis for item in self.items)


def _twice_on_left(var: str) -> str:
    """The message for a name bound twice on the left (with Haliax's phrases)."""
    return (
        f"Name {var!r} is bound twice on the left "
        f"(Capture {var} is assigned more than once: it is bound more than once)"
    )


def raise_parse_error(
    message: str, expression: str, span: tuple[int, int] | int | None
) -> NoReturn:
    """Raises a ``ValueError`` that shows ``expression`` with a caret under ``span``."""
    text = f"{message}\n    {expression}"
    if span is not None:
        start, end = (span, span + 1) if isinstance(span, int) else span
        text += "\n    " + " " * start + "^" * max(1, end - start)
    raise ValueError(text)


# ----------------------------------------------------------------------------- lexing


def _is_ident_start(ch: str) -> bool:
    return ch.isalpha() or ch == "_"


def _is_ident_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _read_ident(expr: str, pos: int) -> tuple[str, int]:
    """Reads an identifier or a quoted name starting at ``pos``; returns it and the end."""
    ch = expr[pos]
    if ch in "'\"":
        end = expr.find(ch, pos + 1)
        if end < 0:
            raise_parse_error("Unterminated quoted axis name", expr, (pos, len(expr)))
        if end == pos + 1:
            raise_parse_error("Empty quoted axis name", expr, (pos, end + 1))
        return expr[pos + 1 : end], end + 1
    if ch.isdigit():
        raise_parse_error(f"Axis names cannot start with a digit ({ch!r})", expr, pos)
    if not _is_ident_start(ch):
        raise_parse_error(f"Unexpected character {ch!r}", expr, pos)
    end = pos
    while end < len(expr) and _is_ident_char(expr[end]):
        end += 1
    return expr[pos:end], end


def _read_group(expr: str, pos: int) -> tuple[Capture, int]:
    """Reads ``( [name:] ident+ )`` starting at the ``(`` at ``pos``."""
    start = pos
    pos += 1
    name: str | None = None
    members: list[str] = []
    while True:
        if pos >= len(expr):
            raise_parse_error("Unclosed '('", expr, (start, len(expr)))
        ch = expr[pos]
        if ch.isspace():
            pos += 1
        elif ch == ")":
            pos += 1
            break
        elif ch == ":":
            if name is not None or len(members) != 1:
                raise_parse_error("A group takes one 'name:' before its axes", expr, pos)
            name = members.pop()
            pos += 1
        elif expr.startswith("->", pos):
            raise_parse_error("Unclosed '('", expr, (start, pos))
        elif ch in "({}.,-":
            raise_parse_error(f"Unexpected {ch!r} inside a group", expr, pos)
        else:
            ident, pos = _read_ident(expr, pos)
            members.append(ident)
    if not members:
        raise_parse_error("A group needs at least one axis", expr, (start, pos))
    return Capture(name, tuple(members), (start, pos)), pos


def _read_side(expr: str, pos: int, *, stop_at_comma: bool) -> tuple[Side, int]:
    """Reads one side, stopping before ``->``, a comma (einsum) or the end of the string."""
    items: list[Capture | EllipsisType] = []
    ordered = True
    opened = closed = False
    while pos < len(expr):
        ch = expr[pos]
        if ch.isspace():
            pos += 1
            continue
        if expr.startswith("->", pos) or (ch == "," and stop_at_comma):
            break
        if closed:
            raise_parse_error("Nothing may follow the closing '}' on this side", expr, pos)
        if ch == "{":
            if opened or items:
                raise_parse_error("'{' must open the side, and only once", expr, pos)
            opened, ordered = True, False
            pos += 1
        elif ch == "}":
            if not opened:
                raise_parse_error("'}' without a matching '{'", expr, pos)
            closed = True
            pos += 1
        elif ch == ".":
            if not expr.startswith("...", pos):
                raise_parse_error("Expected '...'", expr, pos)
            items.append(Ellipsis)
            pos += 3
        elif ch == "(":
            capture, pos = _read_group(expr, pos)
            items.append(capture)
        elif ch == ",":
            raise_parse_error("',' separates einsum operands; rearrange takes one input", expr, pos)
        elif ch in ")-":
            raise_parse_error(f"Unexpected {ch!r}", expr, pos)
        else:
            start = pos
            ident, pos = _read_ident(expr, pos)
            items.append(Capture(ident, None, (start, pos)))
    if opened and not closed:
        raise_parse_error("Missing '}'", expr, pos)
    return Side(tuple(items), ordered), pos


@functools.lru_cache(maxsize=1024)
def parse_rearrangement(expression: str) -> tuple[Side, Side]:
    """Parses ``"lhs -> rhs"`` into its two sides.

    Raises:
      ValueError: on any syntax error, with a caret under the offending text.
    """
    lhs, pos = _read_side(expression, 0, stop_at_comma=False)
    if not expression.startswith("->", pos):
        raise_parse_error("Expected '->'", expression, pos)
    rhs, end = _read_side(expression, pos + 2, stop_at_comma=False)
    if expression.startswith("->", end):
        raise_parse_error("Only one '->' is allowed", expression, (end, end + 2))
    return lhs, rhs


@functools.lru_cache(maxsize=1024)
def parse_einsum(expression: str) -> tuple[tuple[Side, ...], Side]:
    """Parses ``"in1, in2, ... -> out"`` (inputs may be empty: ``"-> H W"``).

    Raises:
      ValueError: on any syntax error, with a caret under the offending text.
    """
    inputs: list[Side] = []
    pos = 0
    while True:
        side, pos = _read_side(expression, pos, stop_at_comma=True)
        inputs.append(side)
        if pos < len(expression) and expression[pos] == ",":
            pos += 1
            continue
        break
    if not expression.startswith("->", pos):
        raise_parse_error("Expected '->'", expression, pos)
    rhs, end = _read_side(expression, pos + 2, stop_at_comma=True)
    if end != len(expression):
        raise_parse_error("Unexpected text after the output", expression, end)
    if not rhs.ordered:
        raise_parse_error("The output of einsum must be ordered (no braces)", expression, pos + 2)
    return tuple(inputs), rhs


# ----------------------------------------------------------------------------- planning


@dataclasses.dataclass(frozen=True)
class _Plan:
    split_shape: tuple[int, ...] | None  # reshape before the transpose (None: not needed)
    perm: tuple[int, ...] | None  # transpose of the split axes (None: identity)
    final_shape: tuple[int, ...] | None  # reshape after the transpose (None: not needed)
    final_axes: tuple[Axis, ...]

    def apply(self, raw):
        """Runs the reshape / transpose / reshape on a positional array."""
        if self.split_shape is not None:
            raw = raw.reshape(self.split_shape)
        if self.perm is not None:
            raw = lax.transpose(raw, self.perm)
        if self.final_shape is not None:
            raw = raw.reshape(self.final_shape)
        return raw

    @functools.cached_property
    def eager(self):
        """The plan as one jitted executable: one fast dispatch for eager calls."""
        return jax.jit(self.apply)


def fill_ellipses(items, order) -> list[list]:
    """Places the keys of ``order`` not named in ``items`` into its ``...`` slots (Haliax's rule).

    ``items`` is a partial order: each entry is ``Ellipsis`` or a sequence of keys. Keys
    that ``items`` names stay in their slots. The others go, in their ``order``, into the
    current target slot: at first the first ``...``; after each named key, the first still
    empty ``...`` that comes after both that key and the current target (if there is none,
    the target stays). So ``"d ... c ... h"`` over ``h w d c`` gives ``d w c h``. With a
    single ``...`` every unnamed key lands there in its current order.

    Returns:
        One list of keys per entry of ``items``.
    """
    slots = [[] if it is Ellipsis else list(it) for it in items]
    holes = [it is Ellipsis for it in items]
    where = {k: j for j, it in enumerate(items) if it is not Ellipsis for k in it}

    def first_empty(start: int):
        return next((j for j in range(start, len(slots)) if holes[j] and not slots[j]), None)

    target = first_empty(0)
    for key in order:
        if key in where:
            later = first_empty(max(where[key] + 1, target if target is not None else 0))
            if later is not None:
                target = later
        elif target is not None:
            slots[target].append(key)
        else:
            raise ValueError(f"{key!r} has no place: the partial order has no '...'")
    return slots


def _normalize_bindings(bindings: Mapping[str, object]) -> tuple[tuple[str, Axis | str | int], ...]:
    out = []
    for key, value in bindings.items():
        if isinstance(value, bool) or not isinstance(value, (Axis, str, int)):
            raise TypeError(
                f"rearrange binding {key}={value!r} must be an int size, an Axis or an axis name"
            )
        out.append((key, value))
    return tuple(out)


def binding_name(name: str, bindings: Mapping[str, Axis | str | int]) -> str:
    """The array-axis name an identifier refers to, after alias lookup."""
    value = bindings.get(name)
    if isinstance(value, Axis):
        return value.name
    if isinstance(value, str):
        return value
    return name


def _split(
    expr: str,
    axis: Axis,
    capture: Capture,
    bindings: Mapping[str, Axis | str | int],
) -> list[tuple[str, Axis]]:
    """Solves the sizes of the pieces ``capture`` splits ``axis`` into.

    Returns ``(variable, new_axis)`` pairs. Plain captures keep the axis unless a binding
    renames or resizes it.
    """
    members = capture.variables
    pieces: list[tuple[str, str, int | None]] = []
    for member in members:
        value = bindings.get(member)
        if isinstance(value, Axis):
            pieces.append((member, value.name, value.size))
        elif isinstance(value, int):
            pieces.append((member, member, value))
        elif isinstance(value, str):
            pieces.append((member, value, None))
        else:
            keep_name = member if capture.is_group else axis.name
            pieces.append((member, keep_name, None))
    unknown = [i for i, (_, _, size) in enumerate(pieces) if size is None]
    known = math.prod(size for _, _, size in pieces if size is not None)
    if len(unknown) > 1:
        names = ", ".join(pieces[i][0] for i in unknown)
        raise_parse_error(
            f"Cannot split axis {axis.name!r} (size {axis.size}): sizes of {names} are unknown; "
            "pass all but one as keyword bindings (the split sizes are ambiguous)",
            expr,
            capture.span,
        )
    if unknown:
        if known == 0 or axis.size % known:
            raise_parse_error(
                f"Axis {axis.name!r} of size {axis.size} is not divisible by {known} (the sizes do not divide it)",
                expr,
                capture.span,
            )
        i = unknown[0]
        pieces[i] = (pieces[i][0], pieces[i][1], axis.size // known)
    elif known != axis.size:
        raise_parse_error(
            f"Axis {axis.name!r} has size {axis.size} but the pieces multiply to {known} (they do not divide it)",
            expr,
            capture.span,
        )
    solved = []
    for var, name, size in pieces:
        assert size is not None  # every size is known or was solved for above
        solved.append((var, Axis(name, size)))
    return solved


def _bind_lhs(
    expr: str,
    lhs: Side,
    axes: tuple[Axis, ...],
    bindings: Mapping[str, Axis | str | int],
) -> tuple[list[list[Axis]], dict[str, Axis]]:
    """Matches the lhs against ``axes``.

    Returns the axes each input axis is split into and the variable -> axis table.
    """
    per_axis: list[list[Axis] | None] = [None] * len(axes)
    variables: dict[str, Axis] = {}
    names = [a.name for a in axes]

    def assign(index: int, capture: Capture) -> None:
        if per_axis[index] is not None:
            raise_parse_error(f"Axis {names[index]!r} is matched twice", expr, capture.span)
        # In an ordered lhs a group binds by position: its name, as in Haliax, is only a
        # label and need not be the axis's name ("(q: h w) d" splits whatever axis is first).
        pieces = _split(expr, axes[index], capture, bindings)
        for var, new_axis in pieces:
            if var in variables:
                raise_parse_error(_twice_on_left(var), expr, capture.span)
            variables[var] = new_axis
        per_axis[index] = [new_axis for _, new_axis in pieces]

    items = lhs.items
    seen: set[str] = set()  # a name bound twice is reported before any count or size check
    for item in items:
        if isinstance(item, Capture):
            for var in item.variables:
                if var in seen:
                    raise_parse_error(_twice_on_left(var), expr, item.span)
                seen.add(var)
    if lhs.ordered:
        n_ellipsis = sum(item is Ellipsis for item in items)
        if n_ellipsis > 1:
            raise_parse_error(
                "At most one '...' is allowed on the left (Only one ellipsis allowed)", expr, None
            )
        if n_ellipsis:
            cut = items.index(Ellipsis)
            front, back = items[:cut], items[cut + 1 :]
            if len(front) + len(back) > len(axes):
                raise_parse_error(
                    f"Too many axes in lhs: it names {len(front) + len(back)} axes but the array has "
                    f"{len(axes)}: {tuple(names)}",
                    expr,
                    None,
                )
            positions = list(range(len(front))) + list(range(len(axes) - len(back), len(axes)))
            captures = list(front) + list(back)
        else:
            if len(items) != len(axes):
                what = (
                    "Too many axes in lhs"
                    if len(items) > len(axes)
                    else "Too few axes in lhs (Not all axes are bound)"
                )
                raise_parse_error(
                    f"{what}: it names {len(items)} axes but the array has {len(axes)}: "
                    f"{tuple(names)} (use '...' to skip axes)",
                    expr,
                    None,
                )
            positions, captures = list(range(len(axes))), list(items)
        for index, capture in zip(positions, captures):
            assert isinstance(capture, Capture)  # the '...' was cut out above
            assign(index, capture)
    else:
        for capture in items:
            if capture is Ellipsis:
                continue
            if capture.name is None:
                raise_parse_error(
                    "Groups in '{...}' need a name to match, e.g. (H: h1 h2) (they must be bound by name)",
                    expr,
                    capture.span,
                )
            target = binding_name(capture.name, bindings)
            if target not in names:
                raise_parse_error(
                    f"Axis {target!r} is not in the array (axes: {tuple(names)}; Could not resolve it)",
                    expr,
                    capture.span,
                )
            assign(names.index(target), capture)

    split = [p if p is not None else [axes[i]] for i, p in enumerate(per_axis)]
    flat = [a.name for p in split for a in p]
    dupes = sorted({n for n in flat if flat.count(n) > 1})
    if dupes:
        raise_parse_error(f"Splitting gives duplicate axis names {dupes}", expr, None)
    return split, variables


def _build_rhs(
    expr: str,
    rhs: Side,
    variables: Mapping[str, Axis],
    intermediate: tuple[Axis, ...],
    bindings: Mapping[str, Axis | str | int],
) -> tuple[list[int], list[Axis]]:
    """Returns the transpose of ``intermediate`` and the final axes the rhs describes."""
    if not rhs.ordered:
        raise_parse_error("The right side must be ordered (no braces)", expr, None)
    position = {a: i for i, a in enumerate(intermediate)}
    used: set[int] = set()
    # Each entry: list of intermediate indices merged into one output axis, and its name;
    # `None` marks where '...' goes.
    groups: list[tuple[list[int], Axis] | None] = []

    def take(var: str, capture: Capture) -> int:
        if var not in variables:
            raise_parse_error(
                f"Name {var!r} on the right is not bound on the left "
                f"(Axis {var} is not bound on the lhs; bound: {sorted(variables)})",
                expr,
                capture.span,
            )
        index = position[variables[var]]
        if index in used:
            raise_parse_error(
                f"Name {var!r} is used twice on the right (it is used more than once)",
                expr,
                capture.span,
            )
        used.add(index)
        return index

    for item in rhs.items:
        if item is Ellipsis:
            groups.append(None)
        elif not item.is_group:
            index = take(item.plain_name, item)
            groups.append(([index], intermediate[index]))
        else:
            if item.name is None:
                raise_parse_error(
                    "A merged group on the right needs a name, e.g. (E: H W C) (a merged axis must have a name)",
                    expr,
                    item.span,
                )
            indices = [take(member, item) for member in item.variables]
            size = math.prod(intermediate[i].size for i in indices)
            if item.name in variables:
                new_name = variables[item.name].name
            else:
                bound = bindings.get(item.name)
                if isinstance(bound, Axis) and bound.size != size:
                    raise_parse_error(
                        f"Merged axis {bound.name!r} has size {size}, but the binding says {bound.size}",
                        expr,
                        item.span,
                    )
                if isinstance(bound, int) and bound != size:
                    raise_parse_error(
                        f"Merged axis {item.name!r} has size {size}, but the binding says {bound}",
                        expr,
                        item.span,
                    )
                new_name = binding_name(item.name, bindings)
            groups.append((indices, Axis(new_name, size)))

    rest = [i for i in range(len(intermediate)) if i not in used]
    if None not in groups and rest:
        missing = [intermediate[i].name for i in rest]
        raise_parse_error(
            f"Axes {missing} are not on the right side (add '...' to keep them; "
            "Not all intermediate axes are used)",
            expr,
            None,
        )
    # The unnamed axes fill the '...' slots (several '...' split them as Haliax does).
    filled = (
        fill_ellipses([Ellipsis if g is None else g[0] for g in groups], range(len(intermediate)))
        if None in groups
        else None
    )
    perm: list[int] = []
    final: list[Axis] = []
    for k, group in enumerate(groups):
        if group is None:
            assert filled is not None  # groups has a None, so the '...' slots were filled
            perm.extend(filled[k])
            final.extend(intermediate[i] for i in filled[k])
        else:
            perm.extend(group[0])
            final.append(group[1])
    out_names = [a.name for a in final]
    dupes = sorted({n for n in out_names if out_names.count(n) > 1})
    if dupes:
        raise_parse_error(f"The result would have duplicate axis names {dupes}", expr, None)
    return perm, final


@functools.lru_cache(maxsize=4096)
def _plan(expression: str, axes: tuple[Axis, ...], binding_items: tuple) -> _Plan:
    bindings = dict(binding_items)
    lhs, rhs = parse_rearrangement(expression)
    split, variables = _bind_lhs(expression, lhs, axes, bindings)
    intermediate = tuple(a for pieces in split for a in pieces)
    mentioned = _mentioned(lhs) | _mentioned(rhs)
    unused = [k for k in bindings if k not in mentioned]
    if unused:
        raise_parse_error(f"Bindings {unused} are not used in the expression", expression, None)
    perm, final = _build_rhs(expression, rhs, variables, intermediate, bindings)
    split_shape = None if intermediate == axes else tuple(a.size for a in intermediate)
    perm_t = None if perm == list(range(len(perm))) else tuple(perm)
    permuted = tuple(intermediate[i] for i in perm)
    final_t = tuple(final)
    final_shape = (
        None
        if [a.size for a in permuted] == [a.size for a in final_t]
        else tuple(a.size for a in final_t)
    )
    return _Plan(split_shape, perm_t, final_shape, final_t)


def _mentioned(side: Side) -> set[str]:
    out: set[str] = set()
    for item in side.items:
        if item is Ellipsis:
            continue
        if item.name is not None:
            out.add(item.name)
        if item.members:
            out.update(item.members)
    return out


def rearrange_str(array: NamedArray, expression: str, **bindings: Axis | str | int) -> NamedArray:
    """Rearranges ``array`` as the string ``expression`` says (see the module docstring).

    Args:
      array: the input.
      expression: ``"lhs -> rhs"``, e.g. ``"B H W C -> B (E: H W C)"`` or
        ``"{B (H: h1 H) (W: w1 W) C} -> (B: B h1 w1) (E: H W C) ..."``.
      **bindings: sizes (``int``), axes (``Axis``: name and size) or new names (``str``) for
        identifiers in the expression; they size split axes and rename results.

    Returns:
      A ``NamedArray`` holding the same elements, reshaped and transposed; one reshape, one
      transpose and one reshape at most.

    Raises:
      ValueError: on a syntax error, an axis missing from ``array``, an unbound name on the
        right, sizes that do not divide, or duplicate result names.
      TypeError: when a binding is not an int, an ``Axis`` or a string.
    """
    if not isinstance(array, NamedArray):
        raise TypeError(f"rearrange expects a NamedArray, got {type(array).__name__}")
    plan = _plan(expression, tuple(array.axes), _normalize_bindings(bindings))
    raw = array.array
    if plan.split_shape is None and plan.perm is None and plan.final_shape is None:
        return NamedArray._new(raw, plan.final_axes)
    if isinstance(raw, jax.core.Tracer):
        return NamedArray._new(plan.apply(raw), plan.final_axes)
    return NamedArray._new(plan.eager(raw), plan.final_axes)

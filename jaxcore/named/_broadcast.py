"""Name-based broadcasting: the alignment every elementwise op on ``NamedArray`` goes through.

``named`` wraps arrays; ``elementwise_binary`` / ``elementwise_nary`` align operands by
axis name (transposing and inserting unit axes), with alignment plans for pairs of axis
tuples computed once and cached; ``broadcast_to`` / ``broadcast_axis`` /
``broadcast_arrays`` are the explicit forms.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp

from jaxcore.named._array import NamedArray, Tracer, describe_axes, is_scalar_like
from jaxcore.named._axis import (
    Axis,
    AxisSelection,
    AxisSpec,
    check_unique,
    selection_items,
    to_axes,
)

# ----------------------------------------------------------------------------- constructor


def named(a, axis: AxisSelection) -> NamedArray:
    """Wraps an array with named axes.

    Args:
        a: Anything ``jnp.asarray`` accepts.
        axis: One name/``Axis`` per dimension (a single one for a 1-d array), or a shape
            dict. Names given as strings take their size from ``a``.

    Returns:
        The ``NamedArray``.

    Raises:
        ValueError: if the number of axes or a given size does not match ``a``'s shape.
    """
    a = a if isinstance(a, (jax.Array, Tracer)) else jnp.asarray(a)
    items = selection_items(axis)
    shape = a.shape
    if len(items) != len(shape):
        raise ValueError(
            f"Array of shape {tuple(shape)} has {len(shape)} dimensions but {len(items)} axes were "
            f"given: {tuple(n for n, _ in items)}"
        )
    axes = []
    for (name, size), s in zip(items, shape):
        if size is not None and size != s:
            raise ValueError(
                f"Axis {name!r} was given size {size} but the array's dimension is {s} "
                f"(array shape {tuple(shape)})"
            )
        axes.append(Axis(name, s))
    return NamedArray._new(a, tuple(axes))


# ----------------------------------------------------------------------------- broadcasting


def _merge_axes(axes_list: Sequence[tuple[Axis, ...]]) -> tuple[Axis, ...]:
    """Union of axis tuples in first-appearance order; ``ValueError`` on a size clash."""
    out: list[Axis] = []
    sizes: dict[str, int] = {}
    for axes in axes_list:
        for ax in axes:
            s = sizes.get(ax.name)
            if s is None:
                sizes[ax.name] = ax.size
                out.append(ax)
            elif s != ax.size:
                raise ValueError(
                    f"Axis {ax.name!r} has mismatched sizes {s} and {ax.size} between operands "
                    f"(axes {[describe_axes(a) for a in axes_list]})"
                )
    return tuple(out)


class _AlignPlan:
    """How to lay out one operand for positional broadcasting against ``out_axes``."""

    __slots__ = ("perm", "shape")

    def __init__(self, perm, shape):
        self.perm = perm  # transpose permutation, or None
        self.shape = shape  # reshape target (with 1s for missing axes), or None

    def apply(self, x):
        if self.perm is not None:
            x = jnp.transpose(x, self.perm)
        if self.shape is not None:
            x = jnp.reshape(x, self.shape)
        return x


def _align_to(axes: tuple[Axis, ...], out_axes: tuple[Axis, ...]) -> _AlignPlan:
    """Plan that makes an operand with ``axes`` broadcast positionally against ``out_axes``."""
    names = [a.name for a in axes]
    out_names = [a.name for a in out_axes]
    order = sorted(range(len(names)), key=lambda i: out_names.index(names[i]))
    perm = tuple(order) if order != list(range(len(names))) else None
    present = set(names)
    # Drop leading missing axes (numpy broadcasting adds them), keep interior/trailing 1s.
    first = next((k for k, n in enumerate(out_names) if n in present), len(out_names))
    shape = tuple(a.size if a.name in present else 1 for a in out_axes[first:])
    return _AlignPlan(perm, None if len(shape) == len(names) else shape)


_PLAN_CACHE_LIMIT = 4096  # plans are tiny; the bound only guards pathological shape churn


def cache_put(cache: dict, key, value):
    """Stores ``value`` in a plan/kernel cache (emptied when full) and returns it."""
    if len(cache) >= _PLAN_CACHE_LIMIT:
        cache.clear()
    cache[key] = value
    return value


def _broadcast_pair(
    a1: tuple[Axis, ...], a2: tuple[Axis, ...], require_subset: bool = True
) -> tuple[Axis, ...]:
    """The axes two operands broadcast to, as Haliax orders them.

    With ``require_subset`` (the rule for elementwise ops) one operand's axes must contain
    the other's, and the result is the larger operand's axes in its own order, so only the
    smaller operand moves. Without it, the axes of the operand with fewer elements that the
    other lacks go in front of the other's axes.

    Raises:
        ValueError: if same-named axes differ in size, or (with ``require_subset``) neither
            operand's axes contain the other's; the message names both axis sets.
    """
    if a1 == a2:
        return a1
    if not a1:
        return a2
    if not a2:
        return a1
    _merge_axes((a1, a2))  # a size clash between same-named axes is reported as such
    if require_subset:
        s1, s2 = set(a1), set(a2)
        if s2 <= s1:
            return a1
        if s1 <= s2:
            return a2
        raise ValueError(
            f"Cannot broadcast arrays with axes {describe_axes(a1)} and {describe_axes(a2)}: neither's axes "
            "contain the other's. Add the missing axes explicitly (hax.broadcast_axis) first"
        )
    if math.prod(a.size for a in a1) < math.prod(a.size for a in a2):
        a1, a2 = a2, a1
    return tuple(a for a in a2 if a not in a1) + a1


def broadcast_all(
    axes_list: Sequence[tuple[Axis, ...]], require_subset: bool = True
) -> tuple[Axis, ...]:
    """The axes several operands broadcast to: pairwise ``_broadcast_pair``, largest first.

    Operands are taken in decreasing number of elements (ties keep argument order), so
    the result follows the layout of the largest operand.
    """
    if not axes_list:
        return ()
    order = sorted(range(len(axes_list)), key=lambda i: -math.prod(a.size for a in axes_list[i]))
    out = axes_list[order[0]]
    for i in order[1:]:
        out = _broadcast_pair(out, axes_list[i], require_subset)
    return out


_BINARY_PLANS: dict = {}


def _binary_plan(a1: tuple[Axis, ...], a2: tuple[Axis, ...]):
    key = (a1, a2)
    plan = _BINARY_PLANS.get(key)
    if plan is None:
        out = _broadcast_pair(a1, a2)
        plan = cache_put(
            _BINARY_PLANS,
            key,
            (out, tuple(a.name for a in out), _align_to(a1, out), _align_to(a2, out), {}),
        )
    return plan


EAGER_KERNEL_FNS: set = set()
"""Positional functions whose aligned eager calls may be cached as one jitted kernel.

Only long-lived functions belong here (the op table registers its entries): the cache
is keyed on the function object, so a fresh lambda per call would never hit.
"""


def _aligned_call(fn, plan, x1, x2):
    """``fn`` on two operands laid out by ``plan``.

    Eagerly, the transpose/reshape/op sequence of a registered ``fn`` runs as one cached
    jitted executable (one dispatch instead of three); while tracing it is emitted inline
    so the jaxpr holds exactly the positional ops.
    """
    _, _, p1, p2, kernels = plan
    if fn in EAGER_KERNEL_FNS and not isinstance(x1, Tracer) and not isinstance(x2, Tracer):
        kernel = kernels.get(fn)
        if kernel is None:
            kernel = kernels[fn] = jax.jit(lambda a, b: fn(p1.apply(a), p2.apply(b)))
        return kernel(x1, x2)
    return fn(p1.apply(x1), p2.apply(x2))


def wrap_result(result, axes, names):
    """Names ``result`` (or each array of a tuple of results) with ``axes``/``names``."""
    if isinstance(result, tuple):
        return tuple(NamedArray._new(r, axes, names) for r in result)
    return NamedArray._new(result, axes, names)


def elementwise_unary(fn, a):
    """Applies positional ``fn`` to ``a``; a NamedArray keeps its axes.

    Args:
        fn: The positional function (one array in, one array or a tuple of arrays out).
        a: A NamedArray, a scalar or a positional array.

    Returns:
        ``fn(a)``, named with ``a``'s axes (each output, for tuple-valued ``fn``) when ``a``
        is a NamedArray, else as ``fn`` returns it.
    """
    if isinstance(a, NamedArray):
        return wrap_result(fn(a.array), a.axes, a._names)
    return fn(a)


def _check_scalar_operand(x, other: NamedArray):
    if not is_scalar_like(x):
        shape = getattr(x, "shape", None)
        raise ValueError(
            f"Cannot combine a NamedArray with axes {describe_axes(other.axes)} and a positional "
            f"array of shape {shape}: wrap it with hax.named(x, axes) so its axes can be matched by name"
            if shape is not None
            else f"Cannot combine a NamedArray with {x!r} ({type(x).__name__})"
        )


def elementwise_binary(fn, x1, x2):
    """Applies positional ``fn(x1, x2)`` after matching the operands' axes by name.

    As in Haliax, one operand's axes must contain the other's; the result has the axes of
    the operand that has them all, in that operand's order (``x1``'s when both have the
    same set). Scalars (Python numbers, 0-d arrays) broadcast against anything; a NamedArray
    with no axes combined with a positional array gives a positional result.

    Raises:
        ValueError: if same-named axes differ in size, if neither operand's axes contain
            the other's, or if a non-scalar positional array is mixed with a NamedArray
            that has axes.
    """
    if type(x1) is NamedArray:
        if type(x2) is NamedArray:
            a1, a2 = x1.axes, x2.axes
            if a1 is a2 or a1 == a2:
                return wrap_result(fn(x1.array, x2.array), a1, x1._names)
            plan = _binary_plan(a1, a2)
            return wrap_result(_aligned_call(fn, plan, x1.array, x2.array), plan[0], plan[1])
        if not x1.axes and not is_scalar_like(x2):
            return fn(x1.array, x2)
        _check_scalar_operand(x2, x1)
        return wrap_result(fn(x1.array, x2), x1.axes, x1._names)
    if type(x2) is NamedArray:
        if not x2.axes and not is_scalar_like(x1):
            return fn(x1, x2.array)
        _check_scalar_operand(x1, x2)
        return wrap_result(fn(x1, x2.array), x2.axes, x2._names)
    if isinstance(x1, NamedArray) or isinstance(x2, NamedArray):  # subclasses: slow path
        return elementwise_nary(fn, x1, x2)
    return fn(x1, x2)


_NARY_KERNELS: dict = {}


def elementwise_nary(fn, *args, **kwargs):
    """Applies positional ``fn(*args, **kwargs)`` after aligning every NamedArray by name.

    As in Haliax's ``broadcast_arrays``, the operands' axes must nest (each pair: one
    contains the other) and the result takes the layout of the largest operand.
    Non-named operands must be scalars (or ``None``, passed through). Eagerly, a
    registered ``fn`` (see ``EAGER_KERNEL_FNS``) runs as one cached jitted kernel.

    Raises:
        ValueError: if same-named axes differ in size or two operands' axes do not nest.
    """
    named_args = [a for a in args if isinstance(a, NamedArray)]
    if not named_args:
        return fn(*args, **kwargs)
    out = broadcast_all([a.axes for a in named_args])
    for a in args:
        if not isinstance(a, NamedArray) and a is not None:
            _check_scalar_operand(a, named_args[0])
    layout = tuple(
        a.axes if isinstance(a, NamedArray) else (None if a is None else "scalar") for a in args
    )
    operands = [a.array if isinstance(a, NamedArray) else a for a in args if a is not None]
    if (
        not kwargs
        and fn in EAGER_KERNEL_FNS
        and not builtins.any(isinstance(x, Tracer) for x in operands)
    ):
        key = (fn, layout)
        kernel = _NARY_KERNELS.get(key)
        if kernel is None:
            kernel = cache_put(_NARY_KERNELS, key, jax.jit(_nary_kernel(fn, layout, out, {})))
        return wrap_result(kernel(*operands), out, None)
    return wrap_result(_nary_kernel(fn, layout, out, kwargs)(*operands), out, None)


def _nary_kernel(fn, layout, out, kwargs):
    """Positional ``fn`` over operands laid out for ``out``.

    ``layout`` has one entry per argument: a NamedArray's axes, ``"scalar"``, or ``None``
    for an argument that is ``None`` (passed to ``fn`` as is and not to the kernel). The
    result is broadcast to the full shape of ``out``.
    """
    plans = [_align_to(ax, out) if isinstance(ax, tuple) else ax for ax in layout]
    shape = tuple(ax.size for ax in out)

    def kernel(*xs):
        it = iter(xs)
        operands = [
            None if p is None else (next(it) if p == "scalar" else p.apply(next(it))) for p in plans
        ]
        return jax.tree.map(lambda r: jnp.broadcast_to(r, shape), fn(*operands, **kwargs))

    return kernel


def broadcast_arrays(*arrays, require_subset: bool = True, ensure_order: bool = True) -> tuple:
    """Broadcasts NamedArrays to a common set of axes (Haliax's rule).

    Args:
        *arrays: NamedArrays, scalars or ``None`` (scalars and ``None`` pass through).
        require_subset: Each pair of operands must nest (one's axes contain the other's);
            the result takes the largest operand's layout. Without it any axes combine:
            the smaller operand's extra axes go in front.
        ensure_order: Lay every result out in the common order; otherwise new axes go in
            front and each array keeps the order of its own axes.

    Raises:
        ValueError: if same-named axes differ in size, or (with ``require_subset``) two
            operands' axes do not nest.
    """
    named_args = [a for a in arrays if isinstance(a, NamedArray)]
    if not named_args:
        return tuple(arrays)
    out = broadcast_all([a.axes for a in named_args], require_subset)
    return tuple(
        broadcast_to(a, out, ensure_order=ensure_order) if isinstance(a, NamedArray) else a
        for a in arrays
    )


def _resolve_target_axes(axes, a) -> tuple[Axis, ...]:
    """Target axes for broadcasting; names without sizes are looked up in ``a``."""
    if isinstance(axes, (Axis, str)):
        axes = (axes,)
    if isinstance(axes, Mapping):
        return to_axes(axes)
    out = []
    for ax in axes:
        if isinstance(ax, str):
            if not isinstance(a, NamedArray) or ax not in a._names:
                raise ValueError(
                    f"Axis {ax!r} is given by name only and the array has no such axis to take its size from"
                )
            out.append(a.axes[a._names.index(ax)])
        elif isinstance(ax, Axis):
            out.append(ax)
        else:
            raise TypeError(f"Expected an Axis or an axis name (str), got {ax!r}")
    check_unique(out)
    return tuple(out)


def broadcast_to(
    a, axes: AxisSpec, ensure_order: bool = True, enforce_no_extra_axes: bool = True
) -> NamedArray:
    """Broadcasts ``a`` so that it has the given axes.

    Args:
        a: A NamedArray or a scalar.
        axes: The target axes.
        ensure_order: Lay the result out as ``axes`` followed by any extra axes of ``a``.
            Otherwise the new axes go in front and ``a``'s axes keep their order.
        enforce_no_extra_axes: Raise if ``a`` has axes that are not in ``axes``.

    Raises:
        ValueError: on a size mismatch between same-named axes, or on extra axes when
            ``enforce_no_extra_axes`` is true.
    """
    target = _resolve_target_axes(axes, a)
    if not isinstance(a, NamedArray):
        if not is_scalar_like(a):
            raise ValueError(
                f"broadcast_to needs a NamedArray or a scalar, got a positional array of shape {getattr(a, 'shape', None)}"
            )
        return NamedArray._new(
            jnp.broadcast_to(jnp.asarray(a), tuple(x.size for x in target)), target
        )
    target_sizes = {ax.name: ax.size for ax in target}
    for ax in a.axes:
        s = target_sizes.get(ax.name)
        if s is not None and s != ax.size:
            raise ValueError(
                f"Cannot broadcast axis {ax.name!r} of size {ax.size} to size {s} "
                f"(array axes {describe_axes(a.axes)}, target {describe_axes(target)})"
            )
    extra = tuple(ax for ax in a.axes if ax.name not in target_sizes)
    if extra and enforce_no_extra_axes:
        raise ValueError(
            f"Array has axes {[ax.name for ax in extra]} that are not in the target axes {describe_axes(target)}"
        )
    if ensure_order:
        out = target + extra
    else:
        own = set(a._names)
        out = tuple(ax for ax in target if ax.name not in own) + a.axes
    if out == a.axes:
        return a
    x = _align_to(a.axes, out).apply(a.array)
    return NamedArray._new(jnp.broadcast_to(x, tuple(ax.size for ax in out)), out)


def broadcast_axis(a, axis: AxisSpec) -> NamedArray:
    """Ensures ``a`` has every axis in ``axis`` (new axes go first; extra axes are kept)."""
    return broadcast_to(a, axis, ensure_order=True, enforce_no_extra_axes=False)

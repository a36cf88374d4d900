"""Higher-order functions over named axes: ``vmap``, ``scan``, ``fold`` and ``map``.

These are ``jax.vmap`` / ``jax.lax.scan`` with the mapped or scanned dimension picked by
*name*: a ``NamedArray`` argument is mapped over the named axis wherever it sits (and
passed whole if it lacks it), and every ``NamedArray`` result gets the axis back, in
front. Arguments that are not arrays (modules' static fields, callables, axes) are passed
through untouched, as equinox's filter transforms do, so functions taking whole modules
can be mapped or scanned.

Plain (unnamed) arrays follow a spec: ``vmap`` maps them over dimension 0 unless told
otherwise (``default=`` / ``args=`` / ``kwargs=``); ``scan``/``fold``/``map`` scan the
leading dimension of every non-scalar one.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jaxcore.named._array import NamedArray, describe_axes
from jaxcore.named._axis import Axis, AxisSelection, AxisSelector
from jaxcore.named._checkpoint import ScanCheckpointPolicy, ScanCheckpointSpec
from jaxcore.named._partitioning import physical_axis_name
from jaxcore.named.jax_utils import is_jax_array_like, tree_checkpoint_name

__all__ = ["ScanCheckpointPolicy", "fold", "map", "scan", "vmap"]


def _is_named(x: Any) -> bool:
    return isinstance(x, NamedArray)


def _one_axis(fname: str, axis: AxisSelector) -> tuple[str, int | None]:
    if isinstance(axis, Axis):
        return axis.name, axis.size
    if isinstance(axis, str):
        return axis, None
    raise TypeError(f"{fname}: expected an Axis or an axis name, got {axis!r}")


def _zero_if_array_else_none(x: Any) -> int | None:
    return 0 if is_jax_array_like(x) else None


def _flat(tree: Any) -> tuple[list[Any], Any]:
    return jax.tree.flatten(tree, is_leaf=_is_named)


def _argument_path(f: Callable, args: tuple, kwargs: dict, leaf: int, skip: int) -> str:
    """How an error names flattened argument leaf ``leaf``: ``"foo.my_array"``, ``"y"``.

    The head is ``f``'s parameter name (its first ``skip`` parameters, e.g. the carry, are
    not in ``args``), the rest the pytree path inside that argument (``.field``, ``[0]``).
    Only computed for error messages.
    """
    paths = [
        p for p, _ in jax.tree_util.tree_flatten_with_path((args, kwargs), is_leaf=_is_named)[0]
    ]
    path = paths[leaf]
    try:
        params = [
            p.name
            for p in inspect.signature(f).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ][skip:]
    except (TypeError, ValueError):  # builtins without a signature
        params = []
    where, key = path[0], path[1]
    if getattr(where, "idx", 1) == 0:  # a positional argument
        i = key.idx
        head = params[i] if i < len(params) else f"argument {i}"
    else:
        head = str(key.key)
    return head + jax.tree_util.keystr(tuple(path[2:]))


def _pack_out(out: Any) -> tuple[list[Any], tuple]:
    """Splits a result into the arrays JAX carries and the metadata to rebuild it."""
    leaves, treedef = _flat(out)
    arrays: list[Any] = []
    kinds: list[tuple[str, Any]] = []
    for leaf in leaves:
        if isinstance(leaf, NamedArray):
            arrays.append(leaf.array)
            kinds.append(("named", leaf.axes))
        elif is_jax_array_like(leaf):
            arrays.append(leaf)
            kinds.append(("array", None))
        else:
            kinds.append(("static", leaf))
    return arrays, (treedef, tuple(kinds))


def _unpack_out(arrays: list[Any], meta: tuple, lead: Axis | None) -> Any:
    treedef, kinds = meta
    it = iter(arrays)
    leaves = []
    for kind, info in kinds:
        if kind == "named":
            raw = next(it)
            leaves.append(NamedArray._new(raw, info if lead is None else (lead, *info)))
        elif kind == "array":
            leaves.append(next(it))
        else:
            leaves.append(info)
    return jax.tree.unflatten(treedef, leaves)


# ---------------------------------------------------------------------------- vmap


def _rebuild(plan: list[tuple[str, Any]], values: Any) -> list[Any]:
    """The leaves described by ``plan``, taking the traced arrays from ``values`` in order.

    Each plan entry is ``("static", leaf)`` (passed through), ``("named", axes)`` (the next
    value, named with ``axes``) or ``("array", None)`` (the next value as is).
    """
    it = iter(values)
    leaves = []
    for kind, info in plan:
        if kind == "static":
            leaves.append(info)
        elif kind == "named":
            leaves.append(NamedArray._new(next(it), info))
        else:
            leaves.append(next(it))
    return leaves


def _spec_for(sig: inspect.Signature | None, default: Any, args_spec: Any, kwargs_spec: dict):
    """Binds the per-argument specs to parameter names once, like equinox's filter_vmap."""
    if sig is None:
        return None
    params = [
        p if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) else p.replace(default=default)
        for p in sig.parameters.values()
    ]
    try:
        bound = sig.replace(parameters=params).bind_partial(*args_spec, **kwargs_spec)
    except TypeError as e:
        raise TypeError(
            f"vmap: args=/kwargs= specs do not fit the function's signature {sig}: {e}"
        ) from None
    bound.apply_defaults()
    return bound


def _leaf_axes(spec: Any, subtree: Any, name: str, size: int | None) -> list[tuple[Any, Any]]:
    """``(leaf, in_axis)`` for each leaf of ``subtree`` under one spec leaf.

    ``in_axis`` is a position, ``None`` (not mapped) or ``"static"`` (not an array).
    """
    out: list[tuple[Any, Any]] = []
    for leaf in _flat(subtree)[0]:
        if isinstance(leaf, NamedArray):
            if name in leaf._names:
                i = leaf._names.index(name)
                if size is not None and leaf.axes[i].size != size:
                    raise ValueError(
                        f"vmap over {Axis(name, size)}: an argument has axis {name!r} of size "
                        f"{leaf.axes[i].size} (axes {describe_axes(leaf.axes)})"
                    )
                out.append((leaf, i))
            else:
                out.append((leaf, None))
        elif is_jax_array_like(leaf):
            out.append((leaf, spec(leaf) if callable(spec) else spec))
        else:
            out.append((leaf, "static"))
    return out


def _pair_with_spec(
    spec_tree: Any, actual: Any, name: str, size: int | None
) -> list[tuple[Any, Any]]:
    """Broadcasts a spec tree (a prefix of ``actual``) down to ``actual``'s leaves."""
    pairs: list = []
    jax.tree.map(
        lambda spec, sub: pairs.extend(_leaf_axes(spec, sub, name, size)),
        spec_tree,
        actual,
        is_leaf=lambda x: x is None or callable(x),
    )
    return pairs


def vmap(
    fn: Callable,
    axis: AxisSelection,
    *,
    default: Any = _zero_if_array_else_none,
    args: Any = (),
    kwargs: dict | None = None,
) -> Callable:
    """``jax.vmap`` over a named axis.

    ``NamedArray`` arguments that have ``axis`` are mapped over it (the function sees them
    without it); those that lack it are passed whole to every call. Every ``NamedArray``
    in the result gets ``axis`` as its first axis. Plain arrays are mapped as ``default``,
    ``args`` and ``kwargs`` say; non-array arguments and results pass through unchanged.

    Args:
      fn: the function to map.
      axis: an ``Axis`` (its size lets ``fn`` be mapped with no mapped input, e.g. to build
        one module per layer from split keys), an axis name (the size is read from the
        arguments), or a sequence of them (the first is outermost).
      default: for plain arrays: an int (the dimension mapped), ``None`` (not mapped) or a
        callable ``leaf -> int | None``. The default maps every array over dimension 0.
      args: per-positional-argument overrides of ``default``; each entry may be a pytree
        prefix of its argument.
      kwargs: per-keyword-argument overrides, by parameter name.

    Returns:
      The mapped function.

    Raises:
      ValueError: (when called) if an argument's ``axis`` has another size than the
        ``Axis`` given, or the axis size cannot be determined from any argument.
    """
    kwargs = {} if kwargs is None else dict(kwargs)
    if isinstance(axis, (Axis, str)):
        axes: tuple = (axis,)
    elif isinstance(axis, (tuple, list)):
        axes = tuple(axis)
    else:
        raise TypeError(
            f"vmap: expected an Axis or an axis name, or a sequence of them, got {axis!r}"
        )
    if not axes:
        return fn
    if len(axes) > 1:
        mapped = fn
        for ax in reversed(axes):
            mapped = vmap(mapped, ax, default=default, args=args, kwargs=kwargs)
        return mapped
    name, size = _one_axis("vmap", axes[0])
    if not isinstance(args, (tuple, list)):
        args = (args,)
    try:
        sig: inspect.Signature | None = inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None
    spec_bound = _spec_for(sig, default, args, kwargs)

    @functools.wraps(fn)
    def mapped_fn(*call_args, **call_kwargs):
        if sig is not None:
            actual = sig.bind(*call_args, **call_kwargs)
            actual.apply_defaults()
            a_args, a_kwargs = actual.args, actual.kwargs
            s_args = spec_bound.args + (default,) * (len(a_args) - len(spec_bound.args))
            s_kwargs = {k: spec_bound.kwargs.get(k, default) for k in a_kwargs}
        else:
            a_args, a_kwargs = call_args, call_kwargs
            s_args = tuple(args) + (default,) * (len(a_args) - len(args))
            s_kwargs = {k: kwargs.get(k, default) for k in a_kwargs}
        pairs = _pair_with_spec((tuple(s_args), s_kwargs), (tuple(a_args), a_kwargs), name, size)
        in_leaves, in_def = _flat((tuple(a_args), a_kwargs))
        if len(pairs) != len(
            in_leaves
        ):  # a spec leaf stood for a subtree: ordering matches flattening
            raise ValueError("vmap: could not match the args=/kwargs= specs to the arguments")
        dyn, in_axes, plan = [], [], []
        for leaf, ax in pairs:
            if ax == "static":
                plan.append(("static", leaf))
                continue
            if isinstance(leaf, NamedArray):
                dyn.append(leaf.array)
                plan.append(
                    ("named", leaf.axes if ax is None else leaf.axes[:ax] + leaf.axes[ax + 1 :])
                )
            else:
                dyn.append(leaf)
                plan.append(("array", None))
            in_axes.append(ax)
        n = size
        if n is None:
            for x, ax in zip(dyn, in_axes):
                if ax is not None:
                    n = x.shape[ax]
                    break
        if n is None:
            raise ValueError(
                f"vmap over {name!r}: no argument has this axis, so its size is unknown "
                "(pass an Axis with a size, or an argument that has the axis)"
            )
        out_meta: list = []

        def body(*dyn_in):
            leaves = _rebuild(plan, dyn_in)
            b_args, b_kwargs = jax.tree.unflatten(in_def, leaves)
            arrays, meta = _pack_out(fn(*b_args, **b_kwargs))
            out_meta.append(meta)
            return arrays

        spmd = physical_axis_name(name)
        out = jax.vmap(body, in_axes=tuple(in_axes), out_axes=0, axis_size=n, spmd_axis_name=spmd)(
            *dyn
        )
        return _unpack_out(out, out_meta[-1], Axis(name, n))

    return mapped_fn


# ---------------------------------------------------------------------------- scan


def is_named_or_shaped_array_like(x: Any) -> bool:
    """``scan``'s default ``is_scanned``: named arrays and plain arrays of rank >= 1."""
    return isinstance(x, NamedArray) or (is_jax_array_like(x) and jnp.ndim(x) >= 1)


def _closest_divisor_to_sqrt(n: int) -> int:
    for i in range(int(n**0.5), 0, -1):
        if n % i == 0:
            return i
    return 1


def scan(
    f: Callable,
    axis: AxisSelector,
    *,
    remat: ScanCheckpointSpec = False,
    reverse: bool = False,
    unroll: int = 1,
    is_scanned: bool | Callable[[Any], bool] = is_named_or_shaped_array_like,
) -> Callable:
    """``jax.lax.scan`` over a named axis, curried: ``scan(f, axis)(init, *xs)``.

    ``f(carry, *x) -> (carry, y)`` sees one slice of every scanned argument: a
    ``NamedArray`` with ``axis`` loses it, a plain array of rank >= 1 loses its leading
    dimension; other arguments (named arrays without ``axis``, scalars, static values)
    are the same at every step. ``NamedArray`` values in ``y`` are stacked with ``axis``
    as their first axis; plain arrays are stacked along dimension 0.

    Args:
      f: the step function.
      axis: the axis to scan over (an ``Axis``, or a name whose size is read from the
        arguments).
      remat: gradient-checkpoint policy for each step (see ``ScanCheckpointPolicy``).
      reverse: scan from the last element to the first (results keep their order).
      unroll: steps per loop iteration, as in ``jax.lax.scan``.
      is_scanned: which leaves to scan: a bool, or a predicate on each leaf (named arrays
        must also have ``axis``).

    Returns:
      ``scanned(init, *args, **kwargs) -> (carry, ys)``.

    Raises:
      ValueError: (when called) if scanned arguments disagree on the length of ``axis``,
        or the length cannot be determined.
    """
    name, size = _one_axis("scan", axis)
    policy = ScanCheckpointPolicy._mk(remat)
    pred = (lambda _: is_scanned) if isinstance(is_scanned, bool) else is_scanned
    carry_name = f"scan({name})__carry"
    input_name = f"scan({name})__input"

    def scanned(init, *args, **kwargs):
        leaves, treedef = _flat((args, kwargs))
        xs, plan = [], []
        where: list[int] = []  # the leaf index of each entry of xs
        length = size
        for k, leaf in enumerate(leaves):
            if isinstance(leaf, NamedArray) and name in leaf._names and pred(leaf):
                i = leaf._names.index(name)
                n = leaf.axes[i].size
                if length is not None and n != length:
                    raise ValueError(
                        f"scan over {name!r}: an argument has axis {name!r} of size {n} "
                        f"(axes {describe_axes(leaf.axes)}), expected {length}"
                    )
                length = n
                xs.append(jnp.moveaxis(leaf.array, i, 0) if i else leaf.array)
                where.append(k)
                plan.append(("named", leaf.axes[:i] + leaf.axes[i + 1 :]))
            elif not isinstance(leaf, NamedArray) and is_jax_array_like(leaf) and pred(leaf):
                xs.append(leaf)
                where.append(k)
                plan.append(("array", None))
            else:
                plan.append(("static", leaf))
        for x, k, (kind, _) in zip(xs, where, [p for p in plan if p[0] != "static"]):
            if kind == "array":
                if length is None:
                    length = x.shape[0]
                elif x.shape[0] != length:
                    path = _argument_path(f, args, kwargs, k, skip=1)
                    raise ValueError(
                        f"scan over {name!r}: the plain array argument {path} has leading "
                        f"dimension {x.shape[0]}, expected {length}"
                    )
        if length is None:
            raise ValueError(
                f"scan over {name!r}: no argument has this axis, so its length is unknown "
                "(pass an Axis with a size)"
            )
        out_meta: list = []

        def step(carry, x_slices):
            rebuilt = _rebuild(plan, x_slices)
            a, kw = jax.tree.unflatten(treedef, rebuilt)
            carry = tree_checkpoint_name(carry, carry_name)
            a, kw = tree_checkpoint_name((a, kw), input_name)
            carry, y = f(carry, *a, **kw)
            arrays, meta = _pack_out(y)
            out_meta.append(meta)
            return carry, arrays

        body = policy.checkpoint(carry_name, input_name, step)
        outer = policy.nested
        outer = _closest_divisor_to_sqrt(length) if outer is True else (outer or None)
        with jax.named_scope(f"scan({name})"):
            if outer is None or outer <= 1 or outer >= length:
                carry, ys = jax.lax.scan(
                    body, init, xs, length=length, reverse=reverse, unroll=unroll
                )
            else:
                carry, ys = _nested_scan(body, init, xs, length, outer, reverse, unroll)
        return carry, _unpack_out(ys, out_meta[-1], Axis(name, length))

    return scanned


def _nested_scan(body, init, xs, length: int, outer: int, reverse: bool, unroll: int):
    """Scans ``outer`` checkpointed blocks of ``length // outer`` steps (nested remat)."""
    if length % outer:
        raise ValueError(f"nested scan: {outer} outer blocks do not divide the length {length}")
    inner = length // outer
    blocked = [x.reshape((outer, inner) + x.shape[1:]) for x in xs]

    @jax.checkpoint
    def block(carry, block_xs):
        return jax.lax.scan(body, carry, block_xs, length=inner, reverse=reverse, unroll=unroll)

    carry, ys = jax.lax.scan(block, init, blocked, length=outer, reverse=reverse)
    return carry, [y.reshape((length,) + y.shape[2:]) for y in ys]


def fold(
    fn: Callable,
    axis: AxisSelector,
    *,
    remat: ScanCheckpointSpec = False,
    reverse: bool = False,
    unroll: int = 1,
    is_scanned: bool | Callable[[Any], bool] = is_named_or_shaped_array_like,
) -> Callable:
    """``scan`` that keeps only the carry: ``fold(fn, axis)(init, *xs)`` with ``fn(carry, *x) -> carry``.

    Arguments are scanned as in ``scan``.
    """
    inner = scan(
        lambda carry, *a, **k: (fn(carry, *a, **k), None),
        axis,
        remat=remat,
        reverse=reverse,
        unroll=unroll,
        is_scanned=is_scanned,
    )

    @functools.wraps(fn)
    def folded(init, *args, **kwargs):
        return inner(init, *args, **kwargs)[0]

    return folded


def map(  # noqa: A001 - Haliax's name
    fn: Callable,
    axis: AxisSelector,
    *,
    remat: ScanCheckpointSpec = False,
    reverse: bool = False,
    unroll: int = 1,
    is_mapped: bool | Callable[[Any], bool] = is_named_or_shaped_array_like,
) -> Callable:
    """``jax.lax.map`` over a named axis: ``fn`` runs once per slice, in a loop (not vectorized).

    Use it instead of ``vmap`` to bound memory. Arguments are sliced as in ``scan``; named
    results get ``axis`` in front, plain results are stacked along dimension 0.
    """
    inner = scan(
        lambda _, *a, **k: (None, fn(*a, **k)),
        axis,
        remat=remat,
        reverse=reverse,
        unroll=unroll,
        is_scanned=is_mapped,
    )

    @functools.wraps(fn)
    def mapped(*args, **kwargs):
        return inner(None, *args, **kwargs)[1]

    return mapped

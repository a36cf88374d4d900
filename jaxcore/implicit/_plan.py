"""Cached, flattened traces ("plans") of jaxprs run under the implicit interpreter.

Under ``jit`` or ``make_jaxpr`` every ``jax.numpy`` call on an implicit array reaches
the interpreter as an inline ``jit`` whose jaxpr JAX has already cached. Running that
jaxpr under the interpreter means dispatching each equation and running the
handlers, which call ``jax.numpy`` again: about twice the cost of the plain
operation. But the outcome depends only on the jaxpr, the operands' pytree structure
(implicit array classes and their metadata) and abstract values, the handler and
kernel registries, the warning switches and JAX's configuration. So the interpreter
runs once per such key, traced into a jaxpr over the operands' flat leaves (the
plan), and later calls copy the plan's equations into the caller's jaxpr, as JAX
itself inlines an inline ``jit``.

Handlers see abstract values while a plan is traced, as they do in every other
traced context; a handler's Python side effects run once per key.
"""

from __future__ import annotations

import typing as tp

import jax
import jax.extend.core as jex_core

from jaxcore import _jax_internals, _registry_version
from jaxcore.implicit import _warnings

_MAX_PLANS = 4096


class Plan(tp.NamedTuple):
    """A traced evaluation: flat operand leaves in, flat output leaves out.

    ``warnings_state`` is ``None`` when no fallback consulted the warning switches
    while tracing; otherwise the switches then, and the plan holds only while they
    are unchanged.
    """

    jaxpr: tp.Any
    consts: list[tp.Any]
    out_tree: tp.Any
    warnings_state: tp.Any


# A key whose plan could not be traced maps to None: run the interpreter directly.
_plans: dict[tp.Hashable, Plan | None] = {}
_MISSING = object()
_ShapedArray = jax.core.ShapedArray
_Tracer = jax.core.Tracer
_PYTHON_SCALARS = frozenset({bool, int, float, complex})


def _leaf_avals(leaves: tp.Sequence[tp.Any], trace: tp.Any) -> tuple[tp.Any, ...] | None:
    """The leaves' abstract values, or None if a plan cannot stand in for them.

    Leaves must be tracers of ``trace`` or concrete values with a canonical dtype
    (arrays, and the typed scalars JAX passes for Python literals), which the plan
    treats abstractly, as ``jit`` treats its arguments. Bare Python scalars are left
    to the interpreter: JAX only stages canonicalised constants.
    """
    avals = []
    for leaf in leaves:
        if isinstance(leaf, _Tracer):
            if leaf._trace is not trace:
                return None
            aval = leaf.aval
        elif type(leaf) in _PYTHON_SCALARS:
            return None
        else:
            try:
                aval = jax.typeof(leaf)
            except TypeError:
                return None
            if getattr(leaf, "dtype", None) != aval.dtype:  # float64 without x64, say
                return None
        if type(aval) is not _ShapedArray:
            return None
        avals.append(aval)
    return tuple(avals)


def run(
    closed_jaxpr: jex_core.ClosedJaxpr,
    args: tp.Sequence[tp.Any],
    trace: tp.Any,
    evaluate: tp.Callable[[jex_core.ClosedJaxpr, tp.Sequence[tp.Any]], list[tp.Any]],
) -> list[tp.Any] | None:
    """Evaluates ``closed_jaxpr`` on ``args`` in the staging ``trace`` from a cached plan.

    Args:
        closed_jaxpr: The jaxpr of an inline ``jit`` with some implicit operands.
        args: Its operands (tracers of ``trace``, concrete values, implicit arrays).
        trace: The current trace; plans apply only to staging traces.
        evaluate: The interpreter, ``evaluate(closed_jaxpr, args) -> outputs``, run
            once per key to trace the plan.

    Returns:
        The outputs (implicit arrays rebuilt around staged tracers), or ``None`` when
        no plan applies and the caller must run the interpreter itself.
    """
    if not _jax_internals.is_staging_trace(trace):
        return None
    leaves, treedef = jax.tree_util.tree_flatten(args)
    avals = _leaf_avals(leaves, trace)
    if avals is None:
        return None
    key = (
        closed_jaxpr,
        treedef,
        avals,
        _registry_version.current(),
        _jax_internals.trace_context(),
    )
    try:
        found = _plans.get(key, _MISSING)
    except TypeError:  # unhashable metadata in an implicit array's aux data
        return None
    plan = None if found is _MISSING else tp.cast("Plan | None", found)
    if found is _MISSING or (
        plan is not None
        and plan.warnings_state is not None
        and plan.warnings_state != _warnings.warnings_state()
    ):
        plan = _build(closed_jaxpr, treedef, avals, evaluate)
        if len(_plans) >= _MAX_PLANS:
            _plans.clear()
        _plans[key] = plan
    if plan is None:
        return None
    out = _jax_internals.inline_jaxpr(trace, plan.jaxpr, plan.consts, leaves)
    return jax.tree_util.tree_unflatten(plan.out_tree, out)


def _build(
    closed_jaxpr: jex_core.ClosedJaxpr,
    treedef: tp.Any,
    avals: tuple[tp.Any, ...],
    evaluate: tp.Callable[[jex_core.ClosedJaxpr, tp.Sequence[tp.Any]], list[tp.Any]],
) -> Plan | None:
    out_trees = []

    def flat_fn(*leaves: tp.Any) -> list[tp.Any]:
        out = evaluate(closed_jaxpr, jax.tree_util.tree_unflatten(treedef, leaves))
        out_leaves, out_tree = jax.tree_util.tree_flatten(list(out))
        out_trees.append(out_tree)
        return out_leaves

    consulted = _warnings.consultations()
    state = _warnings.warnings_state()
    try:
        jaxpr, consts = _jax_internals.trace_to_jaxpr(flat_fn, avals, "jaxcore.implicit")
    except Exception:  # noqa: BLE001 - the direct interpreter run reports real errors.
        return None
    if any(isinstance(c, _Tracer) for c in consts):
        return None  # closed over an enclosing transformation's value: not reusable
    return Plan(
        jaxpr, consts, out_trees[0], state if _warnings.consultations() != consulted else None
    )


def clear() -> None:
    """Drops every cached plan."""
    _plans.clear()

"""The interpreter: a JAX ``Trace`` that routes primitives on implicit arrays to handlers.

:func:`use_implicit` wraps every implicit array among a function's inputs in an
:class:`_ImplicitTracer` of a fresh :class:`_ImplicitTrace` whose parent is the trace
that was current at the call (eager evaluation, an enclosing ``jit``, ``grad`` or
``vmap``...). Every primitive bound while the function runs reaches
:meth:`_ImplicitTrace.process_primitive`: operands without implicit arrays go straight
to the parent trace; otherwise the registered handler for the operand types runs (in
the parent trace), or, when none matches, the implicit operands are materialized.
Handler results that are implicit arrays are wrapped again, dense ones are returned
as they are, so code after a handled op keeps running at full speed.

The bodies of ``jit``-ed functions (every ``jax.numpy`` function is an inline jit) are
re-run by :func:`eval_jaxpr`, which evaluates the jaxpr on the raw values directly in
the parent trace: equations without implicit operands are bound as they are, the
others go through :func:`apply_primitive`, with no tracer wrapping per equation.
Eagerly that evaluation is compiled once per jaxpr and operand structure (see
``_rules``), so an eager handled op or fallback costs one cached dispatch; under
``jit`` it is traced once per jaxpr, operand structure and abstract values and
replayed from then on (see ``_plan``).

Because the interpreter is a trace, transformations compose in either order:
``grad(implicit(f))`` differentiates the handlers, ``implicit(grad(f))`` runs the
JVP/transpose rules' primitives through the handlers.
"""

from __future__ import annotations

import abc
import functools
import types
import typing as tp
import weakref

import jax
import jax.extend.core as jex_core
import numpy as np
from jax.extend.core import primitives as _prims

from jaxcore import _jax_internals
from jaxcore.implicit import _aval, _base, _dispatch, _fields, _warnings

_is_implicit = _fields.is_implicit
_abc_token = abc.get_cache_token
_IMPLICIT_TYPES = _fields.IMPLICIT_TYPES


class _ImplicitTracer(jax.core.Tracer):
    """A tracer standing for one implicit array inside :func:`use_implicit`."""

    __slots__ = ("value",)

    def __init__(self, trace: _ImplicitTrace, value: _base.ImplicitArray):
        super().__init__(trace, _aval.resolve_aval(value))
        self.value = value

    def full_lower(self) -> _ImplicitTracer:
        return self

    def to_concrete_value(self) -> None:
        return None

    def _short_repr(self) -> str:
        return f"ImplicitTracer<{type(self.value).__name__}{self.aval.str_short()}>"

    def __getattr__(self, name: str) -> tp.Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "value" or name.startswith("__"):
                raise
            value = self.value
            if not hasattr(value, name):
                raise
        raise AttributeError(_own_attribute_message(type(value).__name__, name)) from None


def _own_attribute_message(cls_name: str, name: str) -> str:
    """Explains why an implicit array's own attribute is missing inside ``implicit(f)``."""
    head = (
        f"'{name}' is an attribute of {cls_name}, but inside a function wrapped with "
        f"jaxcore.implicit.implicit the {cls_name} is a tracer that stands for the dense "
        "array (shape and dtype only): JAX operations on it run the registered handlers, "
        "or materialize it when none matches."
    )
    if name == "materialize":
        return (
            f"{head} Use the tracer itself where you called .materialize() (x @ w, not "
            "x @ w.materialize()); materializing happens where needed. To force the dense "
            "array, call .materialize() outside the implicit function and pass the result in."
        )
    return (
        f"{head} Read .{name} outside the implicit function and pass it in as an argument, "
        "or do the work in a handler registered with jaxcore.implicit.register, which "
        f"receives the {cls_name} itself."
    )


class _ImplicitTrace(jax.core.Trace):
    """Dispatches primitives whose operands include implicit arrays of this trace."""

    __slots__ = ("_parent_ref", "tag")

    def __init__(self, parent_trace: jax.core.Trace):
        super().__init__()
        # Weak: the cache in trace_for() must not keep finished traces (and everything
        # they recorded) alive. While this trace is in use its parent is on the stack.
        self._parent_ref = weakref.ref(parent_trace)
        self.tag = jex_core.TraceTag()

    @property
    def parent_trace(self) -> jax.core.Trace:
        parent = self._parent_ref()
        if parent is None:
            raise RuntimeError(
                "an implicit-array tracer outlived the transformation it was created in "
                "(e.g. it was stored globally inside jit); return values instead"
            )
        return parent

    def _values(self, tracers: tp.Sequence[tp.Any]) -> tuple[list[tp.Any], bool]:
        values = []
        found = False
        for t in tracers:
            if type(t) is _ImplicitTracer and t._trace is self:
                values.append(t.value)
                found = True
            else:
                values.append(t)
        return values, found

    def stage_value(self, val):
        if type(val) is _ImplicitTracer and val._trace is self:
            return val
        return self.parent_trace.stage_value(val)

    def process_primitive(self, primitive, tracers, params):
        values, found = self._values(tracers)
        parent = self.parent_trace
        if not found:
            with jex_core.set_current_trace(parent):
                return primitive.bind(*values, **params)
        with jex_core.set_current_trace(parent):
            out = apply_primitive(primitive, values, params)
        if primitive.multiple_results:
            return [_ImplicitTracer(self, o) if type(o) in _IMPLICIT_TYPES else o for o in out]
        if type(out) in _IMPLICIT_TYPES:
            return _ImplicitTracer(self, out)
        return out

    def _materialized_values(self, primitive, tracers) -> list[tp.Any]:
        values, found = self._values(tracers)
        if found:
            warn_for(primitive, values)
            with jex_core.set_current_trace(self.parent_trace):
                values = [_aval.materialize_full(v) for v in values]
        return values

    def _bind_on_parent(self, primitive, values, params):
        avals = tuple(jax.typeof(v) for v in values)
        return primitive.bind_with_trace(self.parent_trace, tuple(values), avals, params)

    def process_call(self, call_primitive, f, tracers, params):
        values = self._materialized_values(call_primitive, tracers)
        return self._bind_on_parent(call_primitive, values, dict(params, subfuns=(f,)))

    def process_custom_jvp_call(self, primitive, fun, jvp, tracers, *, symbolic_zeros):
        params = dict(subfuns=(fun, jvp), symbolic_zeros=symbolic_zeros)
        return self._process_custom_call(primitive, tracers, params)

    def process_custom_vjp_call(
        self, primitive, fun, fwd, bwd, tracers, *, out_trees, symbolic_zeros
    ):
        params = dict(subfuns=(fun, fwd, bwd), out_trees=out_trees, symbolic_zeros=symbolic_zeros)
        return self._process_custom_call(primitive, tracers, params)

    def _process_custom_call(self, primitive, tracers, params):
        """A ``custom_jvp``/``custom_vjp`` function applied to implicit arrays.

        The call is first staged into a one-equation jaxpr (its function traced once at
        the dense abstract values, its rules kept), which :func:`eval_jaxpr` then runs
        on the implicit operands (see :func:`apply_custom_call`).
        """
        values, found = self._values(tracers)
        if not found:
            return self._bind_on_parent(primitive, values, params)
        with jex_core.set_current_trace(self.parent_trace):
            avals = [
                _aval.resolve_aval(v) if type(v) in _IMPLICIT_TYPES else jax.typeof(v)
                for v in values
            ]
            jaxpr, consts = _jax_internals.trace_to_jaxpr(
                lambda *dense: primitive.bind(*dense, **params), avals, "jaxcore.implicit"
            )
            out = eval_jaxpr(jex_core.ClosedJaxpr(jaxpr, consts), values)
        _jax_internals.forget_function_output_type(params["subfuns"])
        return [_ImplicitTracer(self, o) if type(o) in _IMPLICIT_TYPES else o for o in out]

    def process_shard_map(self, primitive, fun, tracers, **params):
        values = self._materialized_values(primitive, tracers)
        return self._bind_on_parent(primitive, values, dict(params, subfuns=(fun,)))


_traces: weakref.WeakKeyDictionary[tp.Any, _ImplicitTrace] = weakref.WeakKeyDictionary()


def trace_for(parent: jax.core.Trace) -> _ImplicitTrace:
    """Returns the implicit trace on top of ``parent``, reusing it across calls.

    Reuse matters for speed: JAX keys its tracing caches (e.g. of every ``jax.numpy``
    function) on the current trace, so a fresh trace per call would re-trace them.
    The most recent trace is also kept directly (it holds its parent weakly), which
    spares the weak-dictionary lookup for repeated calls on the same parent.
    """
    global _last_trace
    trace = _last_trace
    if trace is not None and trace._parent_ref() is parent and trace.is_valid():
        return trace
    trace = _traces.get(parent)
    if trace is None or not trace.is_valid():
        trace = _ImplicitTrace(parent)
        _traces[parent] = trace
    _last_trace = trace
    return trace


_last_trace: _ImplicitTrace | None = None


def warn_for(primitive: tp.Any, values: tp.Sequence[tp.Any]) -> None:
    """Issues the fallback warning for every implicit array among ``values``."""
    for v in values:
        if _is_implicit(v):
            _warnings.warn_materialize(primitive, type(v))


def apply_primitive(primitive: tp.Any, values: list[tp.Any], params: dict) -> tp.Any:
    """Applies ``primitive`` to operands that include implicit arrays (current trace: parent).

    Runs the matching handler, or the fallback (``default_handler`` of the first
    implicit operand's class, which materializes) with a one-time warning.
    """
    if _abc_token() != _dispatch.abc_token:
        _dispatch.check_abc_registrations()
    types_ = tuple([type(v) for v in values])
    handler = _dispatch.resolved.get((primitive, types_), _dispatch.MISSING)
    if handler is _dispatch.MISSING:
        handler = _dispatch.resolve(primitive, types_)
    if handler is None:
        owner = _dispatch.default_owner(types_)
        warn_for(primitive, values)
        return owner.default_handler(primitive, *values, params=params)
    handler = tp.cast(_dispatch.Handler, handler)
    for v in values:
        if type(v) in _IMPLICIT_TYPES and _aval.has_implicit_children(v):
            return call_with_nested_dispatch(handler, (primitive, values, params), {})
    raw = handler.raw
    if raw is not None:
        return raw(primitive, values, params)
    return handler(primitive, values, params)


def eval_jaxpr(closed_jaxpr: jex_core.ClosedJaxpr, args: tp.Sequence[tp.Any]) -> list[tp.Any]:
    """Evaluates ``closed_jaxpr`` on ``args`` (some implicit) in the current trace.

    The same result as ``use_implicit(jax.extend.core.jaxpr_as_fun(closed_jaxpr))``,
    without wrapping operands in tracers: equations without implicit operands are bound
    directly, ``custom_jvp_call``/``custom_vjp_call`` go through
    :func:`apply_custom_call`, and the others through :func:`apply_primitive` (other
    equations that carry functions, such as ``shard_map``, materialize their operands).
    """
    jaxpr = closed_jaxpr.jaxpr
    env: dict[tp.Any, tp.Any] = dict(zip(jaxpr.constvars, closed_jaxpr.consts))
    env.update(zip(jaxpr.invars, args))
    implicit_types = _IMPLICIT_TYPES
    literal = jex_core.Literal
    for eqn in jaxpr.eqns:
        invals = [v.val if type(v) is literal else env[v] for v in eqn.invars]
        primitive = eqn.primitive
        bind_params = primitive.get_bind_params(eqn.params)
        source_ctx, eqn_ctx = _jax_internals.equation_contexts(eqn)
        with source_ctx, eqn_ctx:
            for v in invals:
                if type(v) in implicit_types:
                    if primitive in CUSTOM_CALLS:
                        ans = apply_custom_call(primitive, eqn.params, invals)
                    elif "subfuns" in bind_params:
                        warn_for(primitive, invals)
                        invals = [_aval.materialize_full(v) for v in invals]
                        ans = primitive.bind(*invals, **bind_params)
                    else:
                        ans = apply_primitive(primitive, invals, bind_params)
                    break
            else:
                ans = primitive.bind(*invals, **bind_params)
        if primitive.multiple_results:
            env.update(zip(eqn.outvars, ans))
        else:
            env[eqn.outvars[0]] = ans
    return [v.val if type(v) is literal else env[v] for v in jaxpr.outvars]


CUSTOM_CALLS = frozenset({_prims.custom_jvp_call_p, _prims.custom_vjp_call_p})


def apply_custom_call(
    primitive: tp.Any, eqn_params: tp.Mapping[str, tp.Any], values: tp.Sequence[tp.Any]
) -> list[tp.Any]:
    """A ``custom_jvp_call``/``custom_vjp_call`` equation on operands that include implicit arrays.

    The function itself (``call_jaxpr``) runs under the interpreter on the implicit
    operands, so their handlers see them, and its results may be implicit. It runs
    as a ``custom_jvp``/``custom_vjp`` function of the operands' leaves, whose rule is:

    - when every result is dense: the equation's own rule, applied at the
      materialized operands, chained with the derivative of materializing them (so
      ``jax.nn.relu``'s or a user's custom gradient is exactly what JAX would use);
    - when some result is implicit: the derivative of the interpreted function
      itself, since the custom rule gives tangents of dense results, not of the
      leaves of an implicit one.

    Args:
        primitive: ``custom_jvp_call_p`` or ``custom_vjp_call_p``.
        eqn_params: The equation's parameters (with ``call_jaxpr``), as in a jaxpr.
        values: The operands.

    Returns:
        The results, one per output of ``call_jaxpr``.
    """
    leaves, treedef = jax.tree_util.tree_flatten(list(values))
    call_jaxpr = eqn_params["call_jaxpr"]
    out_avals = call_jaxpr.out_avals
    # (output structure, whether some output is implicit), recorded by run().
    outputs: list[tuple[tp.Any, bool]] = []

    def run(*flat: tp.Any) -> list[tp.Any]:
        outs = eval_jaxpr(call_jaxpr, jax.tree_util.tree_unflatten(treedef, list(flat)))
        implicit_out = False
        for out, aval in zip(outs, out_avals):
            if type(out) in _IMPLICIT_TYPES:
                _aval.adopt_aval(out, aval.shape, aval.dtype)
                implicit_out = True
        out_leaves, out_tree = jax.tree_util.tree_flatten(list(outs))
        outputs.append((out_tree, implicit_out))
        return out_leaves

    def output_info(flat: tp.Sequence[tp.Any]) -> tuple[tp.Any, bool]:
        if not outputs:
            jax.eval_shape(run, *flat)
        return outputs[-1]

    def dense_operands(*flat: tp.Any) -> list[tp.Any]:
        return [
            _aval.materialize_full(v) for v in jax.tree_util.tree_unflatten(treedef, list(flat))
        ]

    def dense_call(*dense: tp.Any) -> list[tp.Any]:
        return list(primitive.bind(*dense, **primitive.get_bind_params(eqn_params)))

    if primitive is _prims.custom_jvp_call_p:
        jvp_fn = jax.custom_jvp(run)

        def jvp_rule(primals: tp.Sequence[tp.Any], tangents: tp.Sequence[tp.Any]) -> tp.Any:
            if output_info(primals)[1]:
                return jax.jvp(run, tuple(primals), tuple(tangents))
            dense, dense_tangents = jax.jvp(dense_operands, tuple(primals), tuple(tangents))
            return jax.jvp(dense_call, tuple(dense), tuple(dense_tangents))

        jvp_fn.defjvp(jvp_rule)
        out_leaves = jvp_fn(*leaves)
    else:
        vjp_fn = jax.custom_vjp(run)

        def fwd(*flat: tp.Any) -> tuple[list[tp.Any], tuple[tp.Any, ...]]:
            if output_info(flat)[1]:
                outs, pullback = jax.vjp(run, *flat)
                return outs, (pullback,)
            dense, dense_pullback = jax.vjp(dense_operands, *flat)
            outs, call_pullback = jax.vjp(dense_call, *dense)
            return outs, (dense_pullback, call_pullback)

        def bwd(residuals: tuple[tp.Any, ...], cotangents: tp.Any) -> tuple[tp.Any, ...]:
            if len(residuals) == 1:
                return tuple(residuals[0](list(cotangents)))
            dense_pullback, call_pullback = residuals
            return tuple(dense_pullback(list(call_pullback(list(cotangents)))))

        vjp_fn.defvjp(fwd, bwd)
        out_leaves = vjp_fn(*leaves)
    out_tree, _ = output_info(leaves)
    return list(jax.tree_util.tree_unflatten(out_tree, list(out_leaves)))


def _is_tracer_of(trace: _ImplicitTrace) -> tp.Callable[[tp.Any], tp.Any]:
    def unwrap(x: tp.Any) -> tp.Any:
        if type(x) is _ImplicitTracer and x._trace is trace:
            return x.value
        return x

    return unwrap


def call_with_nested_dispatch(fn: tp.Callable[..., tp.Any], args: tuple, kwargs: dict) -> tp.Any:
    """Calls ``fn`` so that primitives on implicit arrays *nested inside* its arguments dispatch.

    The implicit arrays among ``args`` stay plain objects (``fn`` reads their fields),
    but their implicit children are wrapped as tracers of a fresh implicit trace.
    """
    trace = _current_implicit_trace()

    def wrap_children(x: tp.Any) -> tp.Any:
        if not _is_implicit(x):
            return x
        return jax.tree_util.tree_map(
            lambda c: _ImplicitTracer(trace, c) if _is_implicit(c) else c,
            x,
            is_leaf=lambda c: c is not x and _is_implicit(c),
        )

    args, kwargs = jax.tree_util.tree_map(
        wrap_children, (args, kwargs), is_leaf=_fields.is_implicit
    )
    with jex_core.set_current_trace(trace):
        out = fn(*args, **kwargs)
    return jax.tree_util.tree_map(_is_tracer_of(trace), out)


_FLAT_OPERAND_TYPES = (jax.Array, np.ndarray, np.generic, int, float, complex, bool)


def _is_flat_operand(x: tp.Any) -> bool:
    return _is_implicit(x) or isinstance(x, _FLAT_OPERAND_TYPES)


def _current_implicit_trace() -> _ImplicitTrace:
    return trace_for(tp.cast(jax.core.Trace, _jax_internals.current_trace()))


def use_implicit(fn: tp.Callable[..., tp.Any]) -> tp.Callable[..., tp.Any]:
    """Wraps ``fn`` so that implicit arrays among its inputs dispatch to registered handlers.

    Implicit arrays anywhere in the arguments (and in ``fn`` itself when it is a pytree,
    e.g. a ``jax.tree_util.Partial``) are intercepted at primitive level: every
    primitive applied to them runs the handler registered with
    :func:`jaxcore.implicit.register` for the operand types, or materializes them when
    none matches. Implicit arrays in the outputs are returned as implicit arrays (as their
    :meth:`~jaxcore.implicit.ImplicitArray.on_return`).
    Composes with ``jit``, ``grad``, ``vmap`` and the control-flow primitives in either
    order.

    Args:
        fn: The function to wrap.

    Returns:
        The wrapped function, with ``fn``'s signature.
    """

    # Whether ``fn`` can hold no implicit array (a plain function, or any object that is
    # a pytree leaf, such as a ``jax.numpy`` ufunc or a ``functools.partial``; not a
    # ``jax.tree_util.Partial``, a pytree): then only the arguments are scanned.
    fn_structure = jax.tree_util.tree_structure(fn)
    fn_is_leaf = isinstance(
        fn, (types.FunctionType, types.BuiltinFunctionType, types.MethodType)
    ) or (
        not _is_implicit(fn)
        and jax.tree_util.treedef_is_leaf(fn_structure)
        and fn_structure.num_leaves == 1  # type: ignore[attr-defined]
    )

    @functools.wraps(fn)
    def implicit_fn(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        if fn_is_leaf and not kwargs and all(map(_is_flat_operand, args)):
            # Fast path: positional arrays and implicit arrays only, nothing to flatten.
            if not any(map(_is_implicit, args)):
                return fn(*args)
            trace = _current_implicit_trace()
            args = [_ImplicitTracer(trace, a) if _is_implicit(a) else a for a in args]  # type: ignore[assignment]
            f = fn
        else:
            leaves, treedef = jax.tree_util.tree_flatten(
                (fn, args, kwargs), is_leaf=_fields.is_implicit
            )
            if not any(map(_is_implicit, leaves)):
                return fn(*args, **kwargs)
            trace = _current_implicit_trace()
            leaves = [
                _ImplicitTracer(trace, leaf) if _is_implicit(leaf) else leaf for leaf in leaves
            ]
            f, args, kwargs = jax.tree_util.tree_unflatten(treedef, leaves)
        with jex_core.set_current_trace(trace):
            out = f(*args, **kwargs)
        if type(out) is _ImplicitTracer and out._trace is trace:
            return out.value.on_return()
        if isinstance(out, (jax.Array, np.ndarray)):
            return out
        unwrap = _is_tracer_of(trace)

        def returned(x: tp.Any) -> tp.Any:
            x = unwrap(x)
            return x.on_return() if _is_implicit(x) else x

        return jax.tree_util.tree_map(returned, out)

    return implicit_fn


implicit = use_implicit

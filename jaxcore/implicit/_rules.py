"""Rules for higher-order primitives (jit, cond, while, scan, checkpoint) on implicit arrays.

Without a rule, such a primitive would materialize its implicit operands (correct: its
jaxpr was traced against their dense abstract values). These rules instead re-run the
inner jaxpr under the implicit interpreter, through the public ``jax.jit``,
``jax.lax.switch``, ``jax.lax.while_loop``, ``jax.lax.scan`` and ``jax.checkpoint``,
so implicit operands stay implicit inside and handlers keep applying. Where JAX
requires equal types (branch outputs, loop carries), an output that is implicit in one
place and different in another is materialized, and only that output. ``scan`` slices
implicit inputs (``xs``) and stacks implicit outputs (``ys``) leaf by leaf along axis
0, as ``vmap`` batches them, and materializes only those for which that does not stand
for slicing or stacking the array itself (leaves of another length, an explicit shape).

The package registers the rules (:func:`install`) with a very low precedence; they
accept any operands, so a user-registered, more specific handler for the same
primitive wins.
"""

from __future__ import annotations

import functools
import typing as tp

import jax
import jax.extend.core as jex_core
from jax.extend.core import primitives as prims

from jaxcore import _jax_internals, _registry_version
from jaxcore.implicit import _aval, _dispatch, _fields, _materialize, _plan, _trace, _warnings

_RULE_PRECEDENCE = -(2**30)


@functools.lru_cache(maxsize=1024)
def _implicit_jaxpr_fn(closed_jaxpr: jex_core.ClosedJaxpr) -> tp.Callable[..., list]:
    """Returns ``implicit(jaxpr_as_fun(closed_jaxpr))``, cached per jaxpr object."""
    return _trace.use_implicit(jex_core.jaxpr_as_fun(closed_jaxpr))


def _materialize_full(x: tp.Any) -> tp.Any:
    return _materialize.materialize_nested(x, full=True)


def _signature(x: tp.Any) -> tuple[tp.Any, tuple]:
    """Tree structure plus (shape, dtype) of every leaf: what JAX requires to match."""
    leaves, treedef = jax.tree_util.tree_flatten(x)
    return treedef, tuple(_aval.leaf_signature(leaf) for leaf in leaves)


def _apply_mask(values: tp.Sequence[tp.Any], mask: tp.Sequence[bool]) -> list[tp.Any]:
    return [_materialize_full(v) if m else v for v, m in zip(values, mask)]


def _stable_carry_mask(
    step: tp.Callable[..., list], init: tp.Sequence[tp.Any], extra: tp.Sequence[tp.Any] = ()
) -> list[bool]:
    """Finds which loop carries must be materialized for ``step`` to preserve carry types.

    Starts from "materialize none" and materializes every carry whose output type
    differs from its input type, until nothing changes (at most ``len(init)`` rounds).
    """
    mask = [False] * len(init)
    while True:
        carry = _apply_mask(init, mask)
        out = jax.eval_shape(lambda c, e, m=mask: _apply_mask(step(c, *e), m), carry, list(extra))
        new_mask = [m or _signature(o) != _signature(c) for m, o, c in zip(mask, out, carry)]
        if new_mask == mask:
            return mask
        mask = new_mask


@functools.lru_cache(maxsize=1024)
def _compiled_jaxpr_fn(
    closed_jaxpr: jex_core.ClosedJaxpr, name: str, state: tuple = ()
) -> tp.Callable[..., list]:
    """``jax.jit`` of the jaxpr evaluated under the implicit interpreter, cached per jaxpr.

    ``state`` is part of the cache key only: the registry version and the warning
    switches. A trace made before a handler or kernel was registered, or with
    fallback warnings off (they are issued while tracing), must not be reused.
    """
    del state

    def run(*args):
        return _trace.eval_jaxpr(closed_jaxpr, args)

    run.__name__ = run.__qualname__ = name
    return jax.jit(run)


def _jit_rule(primitive, *args: tp.Any, jaxpr, inline, name, **params):
    """``jit`` (and every ``jax.numpy`` function, an inline jit) on implicit operands.

    Eagerly, the body is run under the interpreter once per operand structure and
    compiled, so repeated eager operations cost one cached dispatch. Under a
    transformation, inline jits are evaluated in place (as JAX does) and the others
    stay a nested ``jit``. Inline jits under a staging trace replay a cached plan
    (see ``_plan``) when one applies. Shardings and donation refer to the dense
    operands and are dropped.
    """
    del params
    return _jit_rule_raw(primitive, args, {"jaxpr": jaxpr, "inline": inline, "name": name})


def _jit_rule_raw(primitive: tp.Any, args: tp.Sequence[tp.Any], params: dict) -> list:
    """:func:`_jit_rule` taking the primitive's parameters as one dict (the hot path)."""
    del primitive  # reached through apply_primitive, which checked ABC registrations
    jaxpr = params["jaxpr"]
    trace = _jax_internals.current_trace()
    inline = _jax_internals.jit_inlines_when_traced(params["inline"])
    if inline and not _jax_internals.is_eval_trace(trace):
        out = _plan.run(jaxpr, args, trace, _trace.eval_jaxpr)
        if out is None:
            out = _trace.eval_jaxpr(jaxpr, args)
    else:
        state = (_registry_version.current(), _warnings.warnings_state())
        out = _compiled_jaxpr_fn(jaxpr, params["name"], state)(*args)
    implicit_types = _fields.IMPLICIT_TYPES
    for value, aval in zip(out, jaxpr.out_avals):
        if type(value) in implicit_types:
            _aval.adopt_aval(value, aval.shape, aval.dtype)
    return list(out)


def _remat_rule(primitive, *args: tp.Any, jaxpr, prevent_cse, policy, **params):
    del primitive, params
    fn = _implicit_jaxpr_fn(jex_core.ClosedJaxpr(jaxpr, ()))
    return list(jax.checkpoint(fn, prevent_cse=prevent_cse, policy=policy)(*args))


def _dense_selector(x: tp.Any) -> tp.Any:
    """A ``cond`` index or ``while_loop`` predicate as a dense array.

    An implicit one is materialized. A type that refuses to materialize (its
    ``materialize`` raises ``NotImplementedError``, as some quax value types do) but
    holds exactly one leaf of the selector's own shape and dtype is read through that
    leaf, which is how quax reads a value used as a predicate.
    """
    if not _fields.is_implicit(x):
        return x
    try:
        return _materialize_full(x)
    except NotImplementedError:
        leaves = jax.tree_util.tree_leaves(x)
        if len(leaves) != 1 or _aval.leaf_signature(leaves[0]) != (tuple(x.shape), x.dtype):
            raise
        return leaves[0]


def _cond_rule(primitive, index: tp.Any, *operands: tp.Any, branches, **params):
    del primitive, params
    index = _dense_selector(index)
    fns = [_implicit_jaxpr_fn(branch) for branch in branches]
    shapes = [jax.eval_shape(fn, *operands) for fn in fns]
    mask = [
        len({_signature(branch_out[i]) for branch_out in shapes}) > 1 for i in range(len(shapes[0]))
    ]
    if any(mask):
        fns = [(lambda *ops, _fn=fn: _apply_mask(_fn(*ops), mask)) for fn in fns]
    return list(jax.lax.switch(index, fns, *operands))


def _freezable(x: tp.Any, batch: tuple[int, ...]) -> bool:
    """Whether every leaf of carry ``x`` has the predicate's batch dimensions first."""
    k = len(batch)
    return all(tuple(jax.numpy.shape(leaf))[:k] == batch for leaf in jax.tree_util.tree_leaves(x))


def _freeze(pred: tp.Any, new: tp.Any, old: tp.Any) -> tp.Any:
    """``new`` where the batched predicate holds, ``old`` elsewhere, leaf by leaf."""
    pred = jax.numpy.asarray(pred)

    def select(n: tp.Any, o: tp.Any) -> tp.Any:
        shape = jax.numpy.shape(n)
        p = jax.numpy.reshape(pred, pred.shape + (1,) * (len(shape) - pred.ndim))
        return jax.lax.select(jax.numpy.broadcast_to(p, shape), n, o)

    return jax.tree_util.tree_map(select, new, old)


def _while_rule(
    primitive, *args: tp.Any, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, **params
):
    """``while_loop`` on implicit operands: carries stay implicit unless the body changes them.

    Under ``vmap`` JAX hands this rule a loop whose predicate has one element per
    example: the loop then runs while any holds, and each example's carry is frozen
    once its own predicate fails, as JAX's own lowering does (leaf by leaf for an
    implicit carry, whose leaves carry the batch dimensions first; a carry whose
    leaves do not is materialized).
    """
    del primitive, params
    cond_consts = args[:cond_nconsts]
    body_consts = args[cond_nconsts : cond_nconsts + body_nconsts]
    init = list(args[cond_nconsts + body_nconsts :])
    cond_fn = _implicit_jaxpr_fn(cond_jaxpr)
    body_fn = _implicit_jaxpr_fn(body_jaxpr)

    def step(carry: list) -> list:
        return list(body_fn(*body_consts, *carry))

    def predicate(carry: tp.Any) -> tp.Any:
        return _dense_selector(cond_fn(*cond_consts, *carry)[0])

    mask = _stable_carry_mask(step, init)
    batch = tuple(jax.eval_shape(predicate, _apply_mask(init, mask)).shape)
    if batch:
        mask = [
            m or (_fields.is_implicit(c) and not _freezable(c, batch)) for m, c in zip(mask, init)
        ]

    def cond(carry: tp.Any) -> tp.Any:
        pred = predicate(carry)
        return jax.numpy.any(pred) if batch else pred

    def body(carry: tp.Any) -> list:
        new = _apply_mask(step(carry), mask)
        if not batch:
            return new
        return _freeze(predicate(carry), new, carry)

    return list(jax.lax.while_loop(cond, body, _apply_mask(init, mask)))


def _abstract(x: tp.Any, shape_of: tp.Callable[[tuple[int, ...]], tuple[int, ...]]) -> tp.Any:
    """``x`` with every leaf replaced by a ``ShapeDtypeStruct`` of shape ``shape_of(leaf shape)``."""
    return jax.tree_util.tree_map(
        lambda leaf: jax.ShapeDtypeStruct(shape_of(tuple(leaf.shape)), leaf.dtype), x
    )


def _leafwise_ok(x: tp.Any, rebuilt: tp.Any, shape: tuple[int, ...]) -> bool:
    """Whether ``rebuilt`` (``x`` with its leaves sliced or stacked) stands for ``shape``/``x.dtype``."""
    try:
        aval = _aval.resolve_aval(rebuilt)
    except Exception:  # noqa: BLE001 - shape unknowable that way: materialize instead.
        return False
    return tuple(aval.shape) == shape and aval.dtype == x.dtype


def _scannable(x: tp.Any, length: int) -> bool:
    """Whether implicit ``x`` can be scanned over by slicing its leaves along axis 0.

    That is how ``vmap`` batches an implicit array; it holds when every leaf has the
    scanned length first and the slice stands for an array of the remaining shape
    (not, say, for an explicit shape that slicing leaves unchanged).
    """
    leaves = jax.tree_util.tree_leaves(x)
    shape = tuple(x.shape)
    if not leaves or not shape or shape[0] != length:
        return False
    if any(jax.numpy.ndim(leaf) == 0 or leaf.shape[0] != length for leaf in leaves):
        return False
    return _leafwise_ok(x, _abstract(x, lambda s: s[1:]), shape[1:])


def _stackable(y: tp.Any, length: int) -> bool:
    """Whether per-iteration implicit outputs ``y`` (abstract) stack leaf by leaf into one."""
    if not jax.tree_util.tree_leaves(y):
        return False
    return _leafwise_ok(y, _abstract(y, lambda s: (length, *s)), (length, *tuple(y.shape)))


def _scan_rule(primitive, *args: tp.Any, reverse, length, jaxpr, unroll, **params):
    """``scan`` on implicit operands: carries, scanned inputs and stacked outputs stay implicit.

    Scanned implicit inputs are sliced leaf by leaf along axis 0 (as ``vmap`` batches
    them), and implicit per-iteration outputs are stacked the same way, wherever that
    slice or stack stands for the array's own slice or stack (see :func:`_scannable`);
    the others are materialized. An input whose type reads one entry of itself in place
    (`ImplicitArray.scan_slice`) is not sliced at all: the body gets its view. Carries are
    materialized only when the body changes their type (see :func:`_stable_carry_mask`).
    """
    del primitive
    num_consts, num_carry = _jax_internals.scan_operand_counts(params)
    consts = args[:num_consts]
    init = list(args[num_consts : num_consts + num_carry])
    xs = [
        x if not _fields.is_implicit(x) or _scannable(x, length) else _materialize_full(x)
        for x in args[num_consts + num_carry :]
    ]
    # Scanned inputs that index themselves in the body (`ImplicitArray.scan_slice`) stay
    # whole, closed over; the body gets their view at the iteration's index, which scans
    # along as one more input (reversed with the others under ``reverse``).
    in_place = [_fields.is_implicit(x) and x.scan_slice(0) is not None for x in xs]
    stacks = [x for x, p in zip(xs, in_place) if p]
    if stacks:
        xs = [*(None if p else x for x, p in zip(xs, in_place)), jax.numpy.arange(length)]
    fn = _implicit_jaxpr_fn(jaxpr)

    def body(carry: list, x: list) -> tuple[list, list]:
        if stacks:
            *x, i = x
            views = iter([s.scan_slice(i) for s in stacks])
            x = [next(views) if p else v for v, p in zip(x, in_place)]
        out = list(fn(*consts, *carry, *x))
        # A view (of an in-place input) leaves the body as what it stands for: stacked
        # leaf by leaf it would index a stack of stacks.
        out = [o.on_return() if _fields.is_implicit(o) else o for o in out]
        return out[:num_carry], out[num_carry:]

    x_slice = _abstract(xs, lambda s: s[1:])
    mask = _stable_carry_mask(lambda carry, *x: body(carry, list(x))[0], init, x_slice)
    ys_shape = jax.eval_shape(
        lambda c, x: body(_apply_mask(c, mask), x)[1], _apply_mask(init, mask), x_slice
    )
    ys_mask = [_fields.is_implicit(y) and not _stackable(y, length) for y in ys_shape]

    def masked_body(carry: list, x: list) -> tuple[list, list]:
        new_carry, ys = body(carry, x)
        return _apply_mask(new_carry, mask), _apply_mask(ys, ys_mask)

    extra = {}
    if "_split_transpose" in params:
        extra["_split_transpose"] = params["_split_transpose"]
    carry, ys = jax.lax.scan(
        masked_body,
        _apply_mask(init, mask),
        xs,
        length=length,
        reverse=reverse,
        unroll=unroll,
        **extra,
    )
    return [*carry, *ys]


_installed = False


def install() -> None:
    """Registers the rules (once); called by the package when it is assembled."""
    global _installed
    if _installed:
        return
    _installed = True
    _dispatch.register_builtin(
        prims.jit_p, _jit_rule, precedence=_RULE_PRECEDENCE, raw=_jit_rule_raw
    )
    for primitive, rule in (
        (prims.remat_p, _remat_rule),
        (prims.cond_p, _cond_rule),
        (prims.while_p, _while_rule),
        (prims.scan_p, _scan_rule),
    ):
        _dispatch.register(primitive, precedence=_RULE_PRECEDENCE)(rule)

"""The straight-through estimator, for quantization-aware training.

``ste(f)(w)`` runs ``f`` (say, quantization) in the forward pass and treats it as the
identity in the backward pass, so gradients reach the float "master" weight ``w``.

When ``f`` returns a dense array, the result is that array with ``w``'s tangent (a
``custom_jvp``). When it returns an implicit array (a quantized weight), the result is a
:class:`StraightThrough`: an implicit array holding ``f``'s result (``value``, used by
the forward pass exactly as it is, so ``x @ q`` keeps running the quantized kernel)
and ``w`` (``master``, which only carries the gradient). Every primitive applied to
it is evaluated on ``value`` by ``value``'s own handler, and differentiated as the
same primitive applied to the dense array ``value`` stands for, with ``master``'s
tangent as that array's tangent. That is, ``x @ ste(quantize)(w)`` has the value of
``x @ q`` and the derivatives of ``x @ (w + stop_gradient(dequantize(q) - w))``.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import typing as tp

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxcore.implicit import _aval, _base, _dispatch, _fields, _trace

# Primitives linear in each operand when the others are held fixed. Their derivative
# is a sum of one application per operand with that operand replaced by its tangent,
# so it never needs the dense array a wrapped value stands for: with a quantized
# weight, ``x @ q``'s derivative in ``x`` runs the quantized kernel too.
_MULTILINEAR = frozenset({lax.dot_general_p, lax.mul_p, lax.conv_general_dilated_p})


def _is_inexact(dtype: tp.Any) -> bool:
    return jnp.issubdtype(dtype, jnp.inexact)


def _tangent_as(tangent: tp.Any, dtype: tp.Any, shape: tp.Sequence[int]) -> jax.Array:
    """``tangent`` cast to ``dtype`` (zeros when it is a non-differentiable ``float0``)."""
    if tangent.dtype == jax.dtypes.float0:
        return jnp.zeros(shape, dtype)
    return tangent.astype(dtype)


@jax.custom_jvp
def _pass_through(master: jax.Array, dense: jax.Array) -> jax.Array:
    """Returns ``dense``, differentiated as if it were ``master`` (cast to ``dense``'s dtype)."""
    del master
    return dense


@_pass_through.defjvp
def _pass_through_jvp(primals, tangents):
    master, dense = primals
    d_master, _ = tangents
    del master
    return dense, _tangent_as(d_master, dense.dtype, dense.shape)


@dataclasses.dataclass
class StraightThrough(_base.ImplicitArray, warn_on_materialize=False):
    """An implicit array used as ``value`` in the forward pass, differentiated through ``master``.

    What :func:`ste` returns when the wrapped function returns an implicit array (e.g.
    ``ste(ArrayNF4.quantize)(w)``). Inside :func:`jaxcore.implicit.implicit`, every
    primitive applied to it is applied to ``value`` (so ``value``'s handlers run: a
    quantized weight keeps its fused kernel), and its derivative is that of the same
    primitive applied to the dense array ``value`` stands for, with ``master``'s tangent
    as that array's tangent. ``master`` itself is never read, only its tangent; ``value``
    gets no gradient. Results that are implicit arrays are wrapped again (``q.T`` of a
    ``StraightThrough`` is one); dense results carry the straight-through derivative.

    Register handlers for ``StraightThrough`` operands only to change this behaviour.

    Attributes:
        master: The dense array gradients flow to, of ``value``'s shape; ``None`` when
            no gradient can flow (nothing was being differentiated or traced).
        value: The implicit array the forward pass uses.
    """

    master: jax.Array | None
    value: tp.Any
    handles_implicit_children: tp.ClassVar[bool] = True
    # ``numpy_array @ st`` defers to __rmatmul__ instead of NumPy wrapping ``st``.
    __array_ufunc__: tp.ClassVar[None] = None

    def __post_init__(self) -> None:
        master = self.master
        if master is not None and tuple(master.shape) != tuple(self.value.shape):
            raise ValueError(
                f"StraightThrough: master has shape {tuple(master.shape)} but value "
                f"({type(self.value).__name__}) has shape {tuple(self.value.shape)}; the "
                "straight-through gradient needs them equal"
            )

    def compute_shape(self) -> tuple[int, ...]:
        return tuple(self.value.shape)

    def compute_dtype(self) -> tp.Any:
        return self.value.dtype

    def materialize(self) -> jax.Array:
        """The dense array ``value`` stands for, with ``master``'s gradient."""
        dense = _aval.materialize_full(self.value)
        if self.master is None:
            return dense
        return _pass_through(self.master, dense)

    @classmethod
    def default_handler(cls, primitive: tp.Any, *args: tp.Any, params: dict | None = None):
        """Applies ``primitive`` to the wrapped values, with the straight-through derivative."""
        return _apply(primitive, args, params or {})

    @property
    def T(self) -> tp.Any:  # noqa: N802 - mirrors jax.Array.T
        """The transpose (a ``StraightThrough`` again when ``value`` transposes implicitly)."""
        return _trace.use_implicit(_transpose)(self)

    def __matmul__(self, other: tp.Any) -> tp.Any:
        return _trace.use_implicit(operator.matmul)(self, other)

    def __rmatmul__(self, other: tp.Any) -> tp.Any:
        return _trace.use_implicit(operator.matmul)(other, self)


def _transpose(x: tp.Any) -> tp.Any:
    return x.T


def _bind(primitive: tp.Any, operands: tp.Sequence[tp.Any], params: dict) -> tp.Any:
    """Applies ``primitive``, through the handlers when an operand is implicit."""
    if any(_fields.is_implicit(o) for o in operands):
        return _trace.apply_primitive(primitive, list(operands), params)
    return primitive.bind(*operands, **params)


def _outputs(primitive: tp.Any, out: tp.Any) -> list[tp.Any]:
    return list(out) if primitive.multiple_results else [out]


def _dense_avals(outs: tp.Sequence[tp.Any]) -> list[tp.Any]:
    return [jax.ShapeDtypeStruct(tuple(o.shape), o.dtype) for o in outs]


def _differentiable(x: tp.Any) -> bool:
    """Whether ``x`` is a traced floating-point operand (only tracers can carry tangents)."""
    return isinstance(x, jax.core.Tracer) and _is_inexact(x.dtype)


def _apply(primitive: tp.Any, args: tp.Sequence[tp.Any], params: dict) -> tp.Any:
    """``primitive`` on operands among which are :class:`StraightThrough` arrays."""
    wrapped = [type(a) is StraightThrough for a in args]
    forward = [a.value if w else a for a, w in zip(args, wrapped)]
    handled = any(_fields.is_implicit(v) for v in forward) and (
        _dispatch.resolve(primitive, tuple(type(v) for v in forward)) is not None
    )
    if not handled:
        # No handler keeps the values implicit: materialize them, with the straight-through
        # gradient, and let JAX differentiate the primitive as usual.
        _trace.warn_for(primitive, forward)
        dense = [a.materialize() if w else _aval.materialize_full(a) for a, w in zip(args, wrapped)]
        return primitive.bind(*dense, **params)

    # What carries each operand's tangent: a wrapped operand's master (standing for the
    # dense array its value stands for), a traced float operand itself, or nothing.
    sources: list[tp.Any] = []
    for a, w in zip(args, wrapped):
        if w:
            sources.append(a.master)
        else:
            sources.append(a if _differentiable(a) else None)
    # The forward pass proper, without gradient; the carriers below add the tangents.
    stopped = [
        lax.stop_gradient(v) if s is not None and not w else v
        for v, w, s in zip(forward, wrapped, sources)
    ]
    outs = _outputs(primitive, _bind(primitive, stopped, params))
    carriers = _tangent_carriers(primitive, params, stopped, sources, outs)
    results: list[tp.Any] = []
    for out, carrier in zip(outs, carriers):
        if _fields.is_implicit(out):
            results.append(StraightThrough(carrier, out))
        elif carrier is not None:
            results.append(_pass_through(carrier, out))
        else:
            results.append(out)
    return results if primitive.multiple_results else results[0]


def _tangent_carriers(
    primitive: tp.Any,
    params: dict,
    operands: list[tp.Any],
    sources: list[tp.Any],
    outs: list[tp.Any],
) -> list[jax.Array | None]:
    """Zero arrays shaped like ``outs`` whose tangents are the outputs' straight-through ones.

    ``operands`` are the forward operands (wrapped values unwrapped, no gradient);
    ``sources[i]`` is what carries operand ``i``'s tangent (a master, the operand
    itself, or ``None``). Returns ``None`` for outputs that cannot have a tangent.
    """
    float_outs = [_is_inexact(o.dtype) for o in outs]
    if not any(float_outs) or not any(isinstance(s, jax.core.Tracer) for s in sources):
        return [None] * len(outs)
    positions = [i for i, s in enumerate(sources) if s is not None]
    avals = [a for a, f in zip(_dense_avals(outs), float_outs) if f]

    @jax.custom_jvp
    def carriers(tangent_inputs, operands):
        del tangent_inputs, operands
        return [jnp.zeros(a.shape, a.dtype) for a in avals]

    def carriers_jvp(primals, tangents):
        tangent_inputs, operands = primals
        d_inputs, _ = tangents
        zeros = [jnp.zeros(a.shape, a.dtype) for a in avals]
        in_tangents = [None] * len(operands)
        for i, d in zip(positions, d_inputs):
            if not isinstance(d, jax.custom_derivatives.SymbolicZero):
                target = operands[i]
                in_tangents[i] = _tangent_as(d, target.dtype, target.shape)
        out_tangents = _straight_through_tangents(
            primitive, params, operands, in_tangents, len(float_outs)
        )
        out_tangents = [t for t, f in zip(out_tangents, float_outs) if f]
        return zeros, [z if t is None else t.astype(z.dtype) for z, t in zip(zeros, out_tangents)]

    carriers.defjvp(carriers_jvp, symbolic_zeros=True)
    made = iter(carriers([sources[i] for i in positions], operands))
    return [next(made) if f else None for f in float_outs]


def _straight_through_tangents(
    primitive: tp.Any, params: dict, operands: list[tp.Any], tangents: list[tp.Any], n_out: int
) -> list[tp.Any]:
    """The tangents of ``primitive``'s outputs at ``operands`` (implicit ones read densely).

    ``tangents[i]`` is ``None`` for an operand without tangent. Multilinear primitives
    apply themselves once per operand with a tangent (the others as they are, so
    implicit operands keep their handlers); the rest are differentiated by JAX at the
    dense operands. Returns one tangent (or ``None``) per output.
    """
    if not any(t is not None for t in tangents):
        return [None] * n_out
    if primitive in _MULTILINEAR:
        total: list[tp.Any] | None = None
        for i, t in enumerate(tangents):
            if t is None:
                continue
            ops = list(operands)
            ops[i] = t
            term = _outputs(primitive, _bind(primitive, ops, params))
            term = [_aval.materialize_full(o) for o in term]
            total = term if total is None else [a + b for a, b in zip(total, term)]
        return total if total is not None else [None] * n_out
    dense = [_aval.materialize_full(o) for o in operands]
    positions = [i for i, t in enumerate(tangents) if t is not None]

    def at(*diff: tp.Any) -> tp.Any:
        ops = list(dense)
        for i, x in zip(positions, diff):
            ops[i] = x
        return primitive.bind(*ops, **params)

    _, out_tangents = jax.jvp(at, [dense[i] for i in positions], [tangents[i] for i in positions])
    return _outputs(primitive, out_tangents)


def _stop_arrays(tree: tp.Any) -> tp.Any:
    """``stop_gradient`` on the JAX arrays in ``tree``; other leaves (ints, strings) as they are."""
    return jax.tree_util.tree_map(
        lambda leaf: lax.stop_gradient(leaf) if isinstance(leaf, jax.Array) else leaf, tree
    )


def ste(func: tp.Callable[..., tp.Any]) -> tp.Callable[..., tp.Any]:
    """Makes ``func(x, *args, **kwargs)`` pass gradients straight through to ``x``.

    The forward pass is ``func`` (quantize, round...); the backward pass treats it as
    the identity in ``x`` and as constant in every other argument, which gets no
    gradient. ``func``'s output must have ``x``'s shape (its dtype may differ; the
    gradient is cast back to ``x``'s).

    ``func`` may return a dense array or an implicit array. An implicit result comes
    back as a :class:`StraightThrough` wrapping it: under
    :func:`jaxcore.implicit.implicit` the forward pass uses it as it is (``x @ q`` with
    a quantized ``q`` runs the quantized kernel, never forming the dense weight) and the
    gradient with respect to ``x`` is the straight-through one. Like any implicit
    array, it dispatches when passed into an ``implicit``-wrapped function (``@`` and
    ``.T`` on it do that for you).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jaxcore.implicit import implicit, ste
        >>> from jaxcore.quant import ArrayNF4
        >>> @ste
        ... def quantize_nf4(weights, block_size=64):
        ...     return ArrayNF4.quantize(weights, block_size)
        >>> w = jnp.linspace(-1.0, 1.0, 128 * 8).reshape(128, 8)  # float32 master weight
        >>> x = jnp.ones((2, 128))
        >>> q = quantize_nf4(w)  # forward: the NF4 weight itself, wrapped
        >>> type(q).__name__, type(q.value).__name__
        ('StraightThrough', 'ArrayNF4')
        >>> loss = lambda w: jnp.sum(implicit(jnp.matmul)(x, quantize_nf4(w)))  # NF4 kernel
        >>> g = jax.grad(loss)(w)  # straight through: d sum(x @ w) / dw = 2 everywhere
        >>> bool(jnp.all(g == 2.0))
        True

    Args:
        func: A function whose first argument is the array to pass gradients to.

    Returns:
        The wrapped function, taking the same arguments.

    Raises:
        TypeError: (when called) if ``func`` returns something other than one array or
            implicit array.
        ValueError: (when called) if ``func``'s output shape differs from ``x``'s.
    """
    name = getattr(func, "__name__", repr(func))

    @functools.wraps(func)
    def wrapper(x: tp.Any, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        out = func(_stop_arrays(x), *_stop_arrays(args), **_stop_arrays(kwargs))
        implicit_out = _fields.is_implicit(out)
        if not implicit_out and not isinstance(out, (jax.Array, np.ndarray)):
            raise TypeError(
                f"ste({name}) returned a {type(out).__name__}; the wrapped function must "
                "return one array or implicit array"
            )
        if tuple(out.shape) != tuple(np.shape(x)):
            raise ValueError(
                f"ste({name}) returned shape {tuple(out.shape)} for an input of shape "
                f"{tuple(np.shape(x))}; a straight-through gradient needs them equal"
            )
        if not implicit_out:
            return _pass_through(x, out)
        return StraightThrough(x, out)

    return wrapper

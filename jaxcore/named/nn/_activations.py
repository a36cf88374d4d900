"""Activation functions and axis-wise normalizers on ``NamedArray`` values.

Elementwise activations apply the ``jax.nn`` function of the same name to the array and
keep the axes. ``softmax``/``log_softmax``/``logsumexp``/``standardize``/``glu`` take the
axis (or axes) to work along by name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp

from jaxcore.named import _ops
from jaxcore.named._array import NamedArray
from jaxcore.named._axis import Axis, AxisSelection, AxisSelector

__all__ = [
    "celu", "elu", "gelu", "glu", "hard_sigmoid", "hard_silu", "hard_swish", "hard_tanh", "leaky_relu",
    "log_sigmoid", "log_softmax", "logsumexp", "one_hot", "quick_gelu", "relu", "relu6", "relu_squared",
    "selu", "sigmoid", "silu", "soft_sign", "softmax", "softplus", "sparse_plus", "squareplus", "standardize",
    "swish",
]  # fmt: skip


def _describe(axes) -> str:
    return "(" + ", ".join(f"{a.name}={a.size}" for a in axes) + ")"


def _elementwise(jax_fn: Callable, name: str) -> Callable:
    @functools.wraps(jax_fn)
    def act(x, *args, **kwargs):
        if isinstance(x, NamedArray):
            return NamedArray._new(jax_fn(x.array, *args, **kwargs), x.axes, x._names)
        return jax_fn(x, *args, **kwargs)

    act.__name__ = act.__qualname__ = name
    act.__doc__ = f"``jax.nn.{name}`` elementwise; a NamedArray keeps its axes."
    return act


relu = _elementwise(jax.nn.relu, "relu")
relu6 = _elementwise(jax.nn.relu6, "relu6")
sigmoid = _elementwise(jax.nn.sigmoid, "sigmoid")
softplus = _elementwise(jax.nn.softplus, "softplus")
soft_sign = _elementwise(jax.nn.soft_sign, "soft_sign")
silu = _elementwise(jax.nn.silu, "silu")
swish = silu
log_sigmoid = _elementwise(jax.nn.log_sigmoid, "log_sigmoid")
leaky_relu = _elementwise(jax.nn.leaky_relu, "leaky_relu")
hard_sigmoid = _elementwise(jax.nn.hard_sigmoid, "hard_sigmoid")
hard_silu = _elementwise(jax.nn.hard_silu, "hard_silu")
hard_swish = hard_silu
hard_tanh = _elementwise(jax.nn.hard_tanh, "hard_tanh")
elu = _elementwise(jax.nn.elu, "elu")
celu = _elementwise(jax.nn.celu, "celu")
selu = _elementwise(jax.nn.selu, "selu")
gelu = _elementwise(jax.nn.gelu, "gelu")
sparse_plus = _elementwise(jax.nn.sparse_plus, "sparse_plus")
squareplus = _elementwise(jax.nn.squareplus, "squareplus")


def _quick_gelu(x):
    return x * jax.nn.sigmoid(1.702 * x)


def _relu_squared(x):
    return jnp.square(jax.nn.relu(x))


quick_gelu = _elementwise(_quick_gelu, "quick_gelu")
quick_gelu.__doc__ = (
    "``x * sigmoid(1.702 x)``, the GELU approximation of CLIP; a NamedArray keeps its axes."
)
relu_squared = _elementwise(_relu_squared, "relu_squared")
relu_squared.__doc__ = "``relu(x) ** 2`` (Primer's activation); a NamedArray keeps its axes."


def _indices(fname: str, x: NamedArray, axis: AxisSelection | None) -> tuple[int, ...]:
    """Positions of the named ``axis`` (all axes for ``None``), with errors naming the axes."""
    if not isinstance(x, NamedArray):
        raise TypeError(f"{fname} needs a NamedArray, got {type(x).__name__}")
    if axis is None:
        return tuple(range(len(x.axes)))
    sel = (axis,) if isinstance(axis, (Axis, str)) else tuple(axis)
    out = []
    for a in sel:
        name = a.name if isinstance(a, Axis) else a
        if name not in x._names:
            raise ValueError(
                f"{fname}: axis {name!r} is not in the array with axes {_describe(x.axes)}"
            )
        i = x._names.index(name)
        if isinstance(a, Axis) and a.size != x.axes[i].size:
            raise ValueError(f"{fname}: axis {name!r} has size {x.axes[i].size}, but {a} was given")
        out.append(i)
    return tuple(out)


def softmax(a: NamedArray, axis: AxisSelection | None = None) -> NamedArray:
    """``jax.nn.softmax`` along the named ``axis`` (all axes if ``None``)."""
    idx = _indices("softmax", a, axis)
    return NamedArray._new(jax.nn.softmax(a.array, axis=idx), a.axes, a._names)


def log_softmax(a: NamedArray, axis: AxisSelection | None = None) -> NamedArray:
    """``jax.nn.log_softmax`` along the named ``axis`` (all axes if ``None``)."""
    idx = _indices("log_softmax", a, axis)
    return NamedArray._new(jax.nn.log_softmax(a.array, axis=idx), a.axes, a._names)


def logsumexp(a: NamedArray, axis: AxisSelection | None = None) -> NamedArray:
    """``log(sum(exp(a)))`` over the named ``axis`` (all axes if ``None``), which is removed."""
    idx = _indices("logsumexp", a, axis)
    kept = tuple(ax for i, ax in enumerate(a.axes) if i not in idx)
    return NamedArray._new(jax.nn.logsumexp(a.array, axis=idx), kept)


def standardize(
    x: NamedArray,
    axis: AxisSelection,
    *,
    mean: NamedArray | None = None,
    variance: NamedArray | None = None,
    epsilon: float = 1e-5,
    where: NamedArray | None = None,
) -> NamedArray:
    """Shifts to zero mean and scales to unit variance along ``axis`` (``jax.nn.standardize``).

    ``mean``/``variance`` (without ``axis``) may be given, e.g. running statistics.
    """
    _indices("standardize", x, axis)
    if mean is None:
        mean = _ops.mean(x, axis, where=where)
    if variance is None:
        variance = _ops.mean(_ops.square(x), axis, where=where) - _ops.square(mean)
    out = (x - mean) * _ops.rsqrt(variance + epsilon)
    return out.rearrange(x.axes) if isinstance(out, NamedArray) and out.axes != x.axes else out


def glu(x: NamedArray, axis: AxisSelector) -> NamedArray:
    """Gated linear unit: splits ``axis`` in two halves ``a, b`` and returns ``a * sigmoid(b)``."""
    (i,) = _indices("glu", x, axis)
    half = x.axes[i].size // 2
    if x.axes[i].size % 2:
        raise ValueError(f"glu: axis {x.axes[i]} must have an even size")
    out_axes = x.axes[:i] + (x.axes[i].resize(half),) + x.axes[i + 1 :]
    return NamedArray._new(jax.nn.glu(x.array, axis=i), out_axes)


def one_hot(x: NamedArray | int, class_axis: Axis, *, dtype=jnp.float32) -> NamedArray:
    """One-hot vectors along ``class_axis`` for integer labels ``x`` (result axes ``x.axes + (class_axis,)``)."""
    if not isinstance(class_axis, Axis):
        raise TypeError(
            f"one_hot: class_axis must be an Axis (its size is the number of classes), got {class_axis!r}"
        )
    if isinstance(x, NamedArray):
        if class_axis.name in x._names:
            raise ValueError(
                f"one_hot: labels with axes {_describe(x.axes)} already have the class axis {class_axis.name!r}"
            )
        return NamedArray._new(
            jax.nn.one_hot(x.array, class_axis.size, dtype=dtype), x.axes + (class_axis,)
        )
    label = jnp.asarray(x)
    if label.ndim != 0:
        raise TypeError(
            f"one_hot: a positional label must be a scalar (name the axes of arrays), got shape {label.shape}"
        )
    if not (jnp.issubdtype(label.dtype, jnp.integer) or label.dtype == jnp.bool_):
        raise TypeError(f"one_hot: labels must be integers, got dtype {label.dtype}")
    # A scalar label indexes like Python (as Haliax): -1 is the last class.
    label = jnp.where(label < 0, label + class_axis.size, label)
    return NamedArray._new(jax.nn.one_hot(label, class_axis.size, dtype=dtype), (class_axis,))

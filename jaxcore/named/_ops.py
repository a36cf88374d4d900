"""The named ``jax.numpy`` namespace: every element-wise op, reduction and misc op.

The element-wise and reduction ops are generated (`_unary`, `_binary`, `_reductions`, from
``tools/gen_named_ops.py``) and re-exported here; this module itself defines the ops that
need their own code: ``where``, ``clip``, comparisons of whole arrays, ``top_k``, ``pad``,
``tril``/``triu``, bit packing and the polynomial functions.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxcore.named._array import NamedArray, check_named, describe_axes, is_scalar_like
from jaxcore.named._axis import Axis, AxisSelector
from jaxcore.named._binary import (  # re-exported: the ops namespace
    BINARY_OPS,
    add,
    arctan2,
    bitwise_and,
    bitwise_left_shift,
    bitwise_or,
    bitwise_right_shift,
    bitwise_xor,
    divide,
    divmod,
    equal,
    float_power,
    floor_divide,
    fmax,
    fmin,
    fmod,
    greater,
    greater_equal,
    hypot,
    left_shift,
    less,
    less_equal,
    logaddexp,
    logaddexp2,
    logical_and,
    logical_or,
    logical_xor,
    maximum,
    minimum,
    mod,
    multiply,
    nextafter,
    not_equal,
    power,
    remainder,
    right_shift,
    subtract,
    true_divide,
)
from jaxcore.named._broadcast import (
    EAGER_KERNEL_FNS,
    broadcast_to,
    elementwise_binary,
    elementwise_nary,
)
from jaxcore.named._reductions import (  # re-exported: the ops namespace
    REDUCTION_OPS,
    all,
    amax,
    amin,
    any,
    argmax,
    argmin,
    cumprod,
    cumsum,
    max,
    mean,
    min,
    nanargmax,
    nanargmin,
    nancumprod,
    nancumsum,
    nanmax,
    nanmean,
    nanmin,
    nanprod,
    nanstd,
    nansum,
    nanvar,
    prod,
    ptp,
    sort,
    std,
    sum,
    var,
)
from jaxcore.named._unary import (  # re-exported: the ops namespace
    UNARY_OPS,
    abs,
    absolute,
    angle,
    arccos,
    arccosh,
    arcsin,
    arcsinh,
    arctan,
    arctanh,
    around,
    bitwise_count,
    bitwise_invert,
    bitwise_not,
    cbrt,
    ceil,
    conj,
    conjugate,
    copy,
    cos,
    cosh,
    deg2rad,
    degrees,
    exp,
    exp2,
    expm1,
    fabs,
    fix,
    floor,
    frexp,
    i0,
    imag,
    invert,
    iscomplex,
    isfinite,
    isinf,
    isnan,
    isneginf,
    isposinf,
    isreal,
    log,
    log1p,
    log2,
    log10,
    logical_not,
    negative,
    positive,
    rad2deg,
    radians,
    real,
    reciprocal,
    rint,
    rsqrt,
    sign,
    signbit,
    sin,
    sinc,
    sinh,
    sqrt,
    square,
    tan,
    tanh,
    trunc,
)

EAGER_KERNEL_FNS.update((jnp.where, jnp.clip))


def round(a, decimals: int = 0):  # noqa: A001 - part of the API
    """Named version of ``jax.numpy.round``: rounds to ``decimals`` places, keeping axes."""
    if isinstance(a, NamedArray):
        return NamedArray._new(jnp.round(a.array, decimals), a.axes, a._names)
    return jnp.round(a, decimals)


def ndim(a) -> int:
    """Number of axes of a NamedArray (or dimensions of a positional array)."""
    if isinstance(a, NamedArray):
        return len(a.axes)
    return jnp.ndim(a)


def argsort(a: NamedArray, axis: AxisSelector | None, *, stable: bool = False):
    """Named version of ``jax.numpy.argsort``.

    Args:
        a: The NamedArray.
        axis: The axis to sort along; ``None`` sorts the flattened array and returns a
            positional 1-d array (it has no meaningful axis name).
        stable: Keep equal elements in their original order.
    """
    check_named(a, "argsort")
    if axis is None:
        return jnp.argsort(a.array, axis=None, stable=stable)
    return NamedArray._new(
        jnp.argsort(a.array, axis=a._index_of(axis), stable=stable), a.axes, a._names
    )


# ----------------------------------------------------------------------------- misc


def where(condition, x=None, y=None, fill_value: int | None = None, new_axis: Axis | None = None):
    """Named ``jnp.where``.

    ``where(condition, x, y)`` selects elementwise, with all three matched by axis name.
    ``where(condition, fill_value=..., new_axis=...)`` returns, like ``jnp.nonzero``, one
    index NamedArray per axis of ``condition`` along ``new_axis``.

    Raises:
        ValueError: if only one of ``x``/``y`` is given, or the one-argument form lacks
            ``fill_value``/``new_axis``.
    """
    if x is None and y is None:
        if new_axis is None or fill_value is None:
            raise ValueError(
                "where(condition) needs both fill_value and new_axis (the size of the result)"
            )
        return nonzero(condition, size=new_axis, fill_value=fill_value)
    if x is None or y is None:
        raise ValueError("where needs both x and y (or neither, with fill_value and new_axis)")
    return elementwise_nary(jnp.where, condition, x, y)


def clip(array, a_min, a_max):
    """Named ``jnp.clip``: bounds may be NamedArrays (matched by name) or scalars."""
    if a_min is None and a_max is None:
        raise ValueError("clip needs at least one of a_min and a_max")
    return elementwise_nary(jnp.clip, array, a_min, a_max)


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Elementwise closeness within tolerance, operands matched by axis name."""
    return elementwise_binary(
        lambda x, y: jnp.isclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan), a, b
    )


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """True (a boolean scalar array) if every element of ``a`` and ``b`` is close."""
    res = isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
    return jnp.all(res.array if isinstance(res, NamedArray) else res)


def _same_axis_set(a: NamedArray, b: NamedArray) -> bool:
    return set(a.axes) == set(b.axes) and len(a.axes) == len(b.axes)


def array_equal(a, b):
    """True if ``a`` and ``b`` have the same axes (any order) and equal elements.

    Different axes give the Python ``False`` (as in Haliax), else a boolean scalar array.
    """
    if isinstance(a, NamedArray) and isinstance(b, NamedArray):
        if not _same_axis_set(a, b):
            return False
        return jnp.array_equal(a.array, broadcast_to(b, a.axes).array)
    if isinstance(a, NamedArray) or isinstance(b, NamedArray):
        return False
    return jnp.array_equal(a, b)


def array_equiv(a, b):
    """True if ``a`` and ``b`` broadcast against each other by name and are equal.

    Axes that do not broadcast (neither's contain the other's, or a size clash) give the
    Python ``False`` as in Haliax; otherwise a boolean scalar array (works under ``jit``).
    """
    try:
        eq = elementwise_binary(jnp.equal, a, b)
    except ValueError:
        return False
    return jnp.all(eq.array if isinstance(eq, NamedArray) else eq)


def _new_axis_for(name_or_axis, size: int, what: str) -> Axis:
    if isinstance(name_or_axis, str):
        return Axis(name_or_axis, size)
    if name_or_axis.size != size:
        raise ValueError(f"{what}: axis {name_or_axis} must have size {size}")
    return name_or_axis


def top_k(arr: NamedArray, axis: AxisSelector, k: int, new_axis: AxisSelector | None = None):
    """The ``k`` largest elements along ``axis`` and their indices.

    Args:
        arr: The NamedArray.
        axis: The axis to select along.
        k: How many elements to keep.
        new_axis: Name or ``Axis`` (size ``k``) of the result axis; defaults to ``axis``
            resized to ``k``.

    Returns:
        ``(values, indices)``, both with ``axis`` replaced by the new axis.

    Raises:
        ValueError: if ``k`` exceeds the axis size or ``new_axis`` has another size.
    """
    check_named(arr, "top_k")
    pos = arr._index_of(axis)
    old = arr.axes[pos]
    if not 0 <= k <= old.size:
        raise ValueError(f"top_k: k={k} is out of range for axis {old.name!r} of size {old.size}")
    out_ax = _new_axis_for(new_axis if new_axis is not None else old.name, k, "top_k")
    x = jnp.moveaxis(arr.array, pos, -1)
    vals, idx = lax.top_k(x, k)
    axes = arr.axes[:pos] + (out_ax,) + arr.axes[pos + 1 :]
    return (
        NamedArray._new(jnp.moveaxis(vals, -1, pos), axes),
        NamedArray._new(jnp.moveaxis(idx, -1, pos), axes),
    )


def nonzero(array: NamedArray, *, size: Axis, fill_value: int = 0) -> tuple[NamedArray, ...]:
    """Indices of nonzero elements, one NamedArray per axis of ``array``, along ``size``.

    Args:
        array: The NamedArray to test.
        size: The result axis; its size is the (static) number of results.
        fill_value: Index used to pad when there are fewer nonzeros than ``size.size``.
    """
    check_named(array, "nonzero")
    if not isinstance(size, Axis):
        raise TypeError(f"nonzero needs size=Axis(name, n) for the result axis, got {size!r}")
    idx = jnp.nonzero(array.array, size=size.size, fill_value=fill_value)
    return tuple(NamedArray._new(i, (size,)) for i in idx)


def searchsorted(a: NamedArray, v, *, side: str = "left", sorter=None, method: str = "scan"):
    """Named ``jnp.searchsorted``: ``a`` (and ``sorter``) are 1-d; the result has ``v``'s axes.

    Raises:
        ValueError: if ``a`` or ``sorter`` is not one-dimensional.
    """
    check_named(a, "searchsorted")
    if a.ndim != 1:
        raise ValueError(
            f"searchsorted needs a one-dimensional `a`, got axes {describe_axes(a.axes)}"
        )
    if isinstance(sorter, NamedArray):
        if sorter.ndim != 1:
            raise ValueError(
                f"searchsorted needs a one-dimensional sorter, got axes {describe_axes(sorter.axes)}"
            )
        sorter = sorter.array
    if isinstance(v, NamedArray):
        return NamedArray._new(
            jnp.searchsorted(a.array, v.array, side=side, sorter=sorter, method=method),
            v.axes,
            v._names,
        )
    return jnp.searchsorted(a.array, v, side=side, sorter=sorter, method=method)


def bincount(x: NamedArray, Counts: Axis, *, weights=None, minlength: int = 0) -> NamedArray:  # noqa: N803 - Haliax's name
    """Named ``jnp.bincount`` over every element of ``x``; the result lies along ``Counts``.

    Args:
        x: Non-negative integer NamedArray (all its elements are counted).
        Counts: The output axis; its size is the static number of bins.
        weights: Optional weights, a NamedArray matched to ``x`` by name or a scalar.
        minlength: Passed to ``jnp.bincount``; must not exceed ``Counts.size``.
    """
    check_named(x, "bincount")
    if not isinstance(Counts, Axis):
        raise TypeError(f"bincount needs an Axis for Counts, got {Counts!r}")
    if minlength > Counts.size:
        raise ValueError(
            f"bincount: minlength={minlength} exceeds the size {Counts.size} of axis {Counts.name!r}"
        )
    if weights is not None:
        if isinstance(weights, NamedArray):
            weights = broadcast_to(weights, x.axes).array.reshape(-1)
        elif is_scalar_like(weights):
            weights = jnp.full((x.size,), weights)
        else:
            raise ValueError(
                f"bincount weights must be a NamedArray or a scalar, got shape {weights.shape}"
            )
    out = jnp.bincount(
        x.array.reshape(-1), weights=weights, minlength=minlength, length=Counts.size
    )
    return NamedArray._new(out, (Counts,))


def pad(
    array: NamedArray,
    pad_width: Mapping[AxisSelector, tuple[int, int]],
    *,
    mode: str = "constant",
    constant_values=0,
    **kwargs,
) -> NamedArray:
    """Named ``jnp.pad``: ``pad_width`` maps axes to ``(before, after)``; other axes are untouched.

    Raises:
        ValueError: if an axis is missing or a width is negative.
    """
    check_named(array, "pad")
    widths = [(0, 0)] * array.ndim
    axes = list(array.axes)
    for key, w in pad_width.items():
        pos = array._index_of(key)
        if isinstance(w, (int, np.integer)):
            w = (int(w), int(w))
        before, after = w
        if before < 0 or after < 0:
            raise ValueError(
                f"pad widths for axis {axes[pos].name!r} must be non-negative, got {w}"
            )
        widths[pos] = (before, after)
        axes[pos] = Axis(axes[pos].name, axes[pos].size + before + after)
    if isinstance(constant_values, NamedArray):
        if constant_values.axes:
            raise ValueError(
                f"pad constant_values must be a scalar, got a NamedArray with axes {describe_axes(constant_values.axes)}"
            )
        constant_values = constant_values.array
    if mode == "constant":
        kwargs["constant_values"] = constant_values
    return NamedArray._new(jnp.pad(array.array, widths, mode=mode, **kwargs), tuple(axes))


def trace(
    array: NamedArray, axis1: AxisSelector, axis2: AxisSelector, offset=0, dtype=None
) -> NamedArray:
    """Sum along the diagonal of two named axes; both axes are removed."""
    check_named(array, "trace")
    p1, p2 = array._index_of(axis1), array._index_of(axis2)
    if p1 == p2:
        raise ValueError(f"trace needs two different axes, got {axis1!r} twice")
    out = jnp.trace(array.array, offset=offset, axis1=p1, axis2=p2, dtype=dtype)
    return NamedArray._new(out, tuple(ax for i, ax in enumerate(array.axes) if i not in (p1, p2)))


def _tri(fn, array, axis1, axis2, k):
    p1, p2 = array._index_of(axis1), array._index_of(axis2)
    if p1 == p2:
        raise ValueError(f"{fn.__name__} needs two different axes, got {axis1!r} twice")
    # As in Haliax, the result is laid out (..., axis1, axis2): the matrix axes go last.
    rest = [i for i in range(array.ndim) if i not in (p1, p2)]
    perm = rest + [p1, p2]
    x = array.array if perm == list(range(array.ndim)) else jnp.transpose(array.array, perm)
    return NamedArray._new(fn(x, k=k), tuple(array.axes[i] for i in perm))


def tril(array: NamedArray, axis1: AxisSelector, axis2: AxisSelector, k: int = 0) -> NamedArray:
    """Zeros elements above the ``k``-th diagonal; the result's axes end ``axis1, axis2`` (Haliax)."""
    check_named(array, "tril")
    return _tri(jnp.tril, array, axis1, axis2, k)


def triu(array: NamedArray, axis1: AxisSelector, axis2: AxisSelector, k: int = 0) -> NamedArray:
    """Zeros elements below the ``k``-th diagonal; the result's axes end ``axis1, axis2`` (Haliax)."""
    check_named(array, "triu")
    return _tri(jnp.triu, array, axis1, axis2, k)


def packbits(a: NamedArray, axis: AxisSelector, *, bitorder: str = "big") -> NamedArray:
    """Named ``jnp.packbits`` along ``axis``, which shrinks to ``ceil(size / 8)``."""
    check_named(a, "packbits")
    pos = a._index_of(axis)
    old = a.axes[pos]
    out = jnp.packbits(a.array, axis=pos, bitorder=bitorder)
    axes = a.axes[:pos] + (Axis(old.name, (old.size + 7) // 8),) + a.axes[pos + 1 :]
    return NamedArray._new(out, axes)


def unpackbits(
    a: NamedArray, axis: AxisSelector, *, count: int | None = None, bitorder: str = "big"
) -> NamedArray:
    """Named ``jnp.unpackbits`` along ``axis``, which grows to ``8 * size`` (or ``count``)."""
    check_named(a, "unpackbits")
    pos = a._index_of(axis)
    old = a.axes[pos]
    out = jnp.unpackbits(a.array, axis=pos, count=count, bitorder=bitorder)
    axes = a.axes[:pos] + (Axis(old.name, out.shape[pos]),) + a.axes[pos + 1 :]
    return NamedArray._new(out, axes)


# ----------------------------------------------------------------------------- polynomials

DEFAULT_POLY_AXIS_NAME = "degree"
"""Name of the coefficient axis when no NamedArray input provides one."""


def _poly_axis_name(*xs) -> str:
    for x in xs:
        if isinstance(x, NamedArray):
            if x.ndim != 1:
                raise ValueError(
                    f"Polynomial coefficients must be one-dimensional, got axes {describe_axes(x.axes)}"
                )
            return x.axes[0].name
    return DEFAULT_POLY_AXIS_NAME


def _raw(x):
    return x.array if isinstance(x, NamedArray) else x


def _coef(out, name: str) -> NamedArray:
    out = jnp.asarray(out)
    return NamedArray._new(out, (Axis(name, out.shape[0]),))


def poly(seq_of_zeros) -> NamedArray:
    """Named ``jnp.poly``: coefficients of the polynomial with the given roots."""
    name = _poly_axis_name(seq_of_zeros)
    return _coef(jnp.poly(_raw(seq_of_zeros)), name)


def polyadd(p1, p2) -> NamedArray:
    """Named ``jnp.polyadd``; the coefficient axis comes from a NamedArray input."""
    name = _poly_axis_name(p1, p2)
    return _coef(jnp.polyadd(_raw(p1), _raw(p2)), name)


def polysub(p1, p2) -> NamedArray:
    """Named ``jnp.polysub``; the coefficient axis comes from a NamedArray input."""
    name = _poly_axis_name(p1, p2)
    return _coef(jnp.polysub(_raw(p1), _raw(p2)), name)


def polymul(p1, p2) -> NamedArray:
    """Named ``jnp.polymul``; the coefficient axis comes from a NamedArray input."""
    name = _poly_axis_name(p1, p2)
    return _coef(jnp.polymul(_raw(p1), _raw(p2)), name)


def polydiv(p1, p2) -> tuple[NamedArray, NamedArray]:
    """Named ``jnp.polydiv``: ``(quotient, remainder)`` along the coefficient axis."""
    name = _poly_axis_name(p1, p2)
    q, r = jnp.polydiv(_raw(p1), _raw(p2))
    return _coef(q, name), _coef(r, name)


def polyint(p, m: int = 1, k=None) -> NamedArray:
    """Named ``jnp.polyint``: the ``m``-th antiderivative with integration constants ``k``."""
    name = _poly_axis_name(p)
    return _coef(jnp.polyint(_raw(p), m=m, k=_raw(k)), name)


def polyder(p, m: int = 1) -> NamedArray:
    """Named ``jnp.polyder``: the ``m``-th derivative."""
    name = _poly_axis_name(p)
    return _coef(jnp.polyder(_raw(p), m=m), name)


def polyval(p, x):
    """Named ``jnp.polyval``: evaluates ``p`` at ``x``; a NamedArray ``x`` keeps its axes."""
    _poly_axis_name(p)
    if isinstance(x, NamedArray):
        return NamedArray._new(jnp.polyval(_raw(p), x.array), x.axes, x._names)
    return jnp.polyval(_raw(p), x)


def polyfit(x, y, deg: int, rcond=None, full: bool = False, w=None, cov: bool = False):
    """Named ``jnp.polyfit``: least-squares coefficients along a coefficient axis.

    With ``cov=True`` the covariance is a NamedArray over the coefficient axis and a copy
    of it named ``<name>_cov``. ``full=True`` returns the positional diagnostics as well.
    """
    name = _poly_axis_name(x, y, w)
    out = jnp.polyfit(_raw(x), _raw(y), deg, rcond=rcond, full=full, w=_raw(w), cov=cov)
    if full:
        coeffs, *rest = out
        return (_coef(coeffs, name), *rest)
    if cov:
        coeffs, c = out
        ax = Axis(name, coeffs.shape[0])
        return _coef(coeffs, name), NamedArray._new(c, (ax, Axis(name + "_cov", ax.size)))
    return _coef(out, name)


def roots(p) -> NamedArray:
    """Named ``jnp.roots`` (eager only: the number of roots depends on the values)."""
    name = _poly_axis_name(p)
    return _coef(jnp.roots(_raw(p)), name)


def trim_zeros(f, trim: str = "fb") -> NamedArray:
    """Named ``jnp.trim_zeros`` (eager only: the result size depends on the values)."""
    name = _poly_axis_name(f)
    return _coef(jnp.trim_zeros(_raw(f), trim=trim), name)


def vander(x: NamedArray, degree: AxisSelector) -> NamedArray:
    """Vandermonde matrix of a 1-d NamedArray.

    Args:
        x: One-dimensional input (its axis becomes the row axis).
        degree: The column axis; a name gives an axis of ``x``'s size.

    Raises:
        ValueError: if ``x`` is not one-dimensional.
    """
    check_named(x, "vander")
    if x.ndim != 1:
        raise ValueError(f"vander needs a one-dimensional array, got axes {describe_axes(x.axes)}")
    col = degree if isinstance(degree, Axis) else Axis(degree, x.axes[0].size)
    if col.name == x.axes[0].name:
        raise ValueError(f"vander: the degree axis must differ from the row axis {col.name!r}")
    return NamedArray._new(jnp.vander(x.array, N=col.size), (x.axes[0], col))


__all__ = [
    "abs",
    "absolute",
    "angle",
    "arccos",
    "arccosh",
    "arcsin",
    "arcsinh",
    "arctan",
    "arctanh",
    "around",
    "bitwise_count",
    "bitwise_invert",
    "bitwise_not",
    "cbrt",
    "ceil",
    "conj",
    "conjugate",
    "copy",
    "cos",
    "cosh",
    "deg2rad",
    "degrees",
    "exp",
    "exp2",
    "expm1",
    "fabs",
    "fix",
    "floor",
    "frexp",
    "i0",
    "imag",
    "invert",
    "iscomplex",
    "isfinite",
    "isinf",
    "isnan",
    "isneginf",
    "isposinf",
    "isreal",
    "log",
    "log10",
    "log1p",
    "log2",
    "logical_not",
    "negative",
    "positive",
    "rad2deg",
    "radians",
    "real",
    "reciprocal",
    "rint",
    "rsqrt",
    "sign",
    "signbit",
    "sin",
    "sinc",
    "sinh",
    "square",
    "sqrt",
    "tan",
    "tanh",
    "trunc",
    "add",
    "arctan2",
    "bitwise_and",
    "bitwise_left_shift",
    "bitwise_or",
    "bitwise_right_shift",
    "bitwise_xor",
    "divide",
    "divmod",
    "equal",
    "float_power",
    "floor_divide",
    "fmax",
    "fmin",
    "fmod",
    "greater",
    "greater_equal",
    "hypot",
    "left_shift",
    "less",
    "less_equal",
    "logaddexp",
    "logaddexp2",
    "logical_and",
    "logical_or",
    "logical_xor",
    "maximum",
    "minimum",
    "mod",
    "multiply",
    "nextafter",
    "not_equal",
    "power",
    "remainder",
    "right_shift",
    "subtract",
    "true_divide",
    "sum",
    "prod",
    "mean",
    "nansum",
    "nanprod",
    "nanmean",
    "max",
    "min",
    "amax",
    "amin",
    "nanmax",
    "nanmin",
    "all",
    "any",
    "ptp",
    "std",
    "var",
    "nanstd",
    "nanvar",
    "argmax",
    "argmin",
    "nanargmax",
    "nanargmin",
    "cumsum",
    "cumprod",
    "nancumsum",
    "nancumprod",
    "sort",
    "BINARY_OPS",
    "REDUCTION_OPS",
    "UNARY_OPS",
    "round",
    "ndim",
    "argsort",
    "where",
    "clip",
    "isclose",
    "allclose",
    "array_equal",
    "array_equiv",
    "top_k",
    "nonzero",
    "searchsorted",
    "bincount",
    "pad",
    "trace",
    "tril",
    "triu",
    "packbits",
    "unpackbits",
    "DEFAULT_POLY_AXIS_NAME",
    "poly",
    "polyadd",
    "polysub",
    "polymul",
    "polydiv",
    "polyint",
    "polyder",
    "polyval",
    "polyfit",
    "roots",
    "trim_zeros",
    "vander",
]

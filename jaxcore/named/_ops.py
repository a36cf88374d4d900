"""Named versions of the ``jax.numpy`` operations.

Unary and binary elementwise wrappers are generated from two tables (name to the
positional function), so every op shares the same thin dispatch: unwrap, call the
positional function, rewrap with the same axes (unary) or the name-aligned axes
(binary). Reductions, axis-wise ops and the miscellaneous ops below translate axis
names to positions and call the ``jax.numpy`` / ``jax.lax`` function directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxcore.named._array import NamedArray, _check_named, _describe, _is_scalar_like
from jaxcore.named._axis import Axis, AxisSelector
from jaxcore.named._broadcast import (
    EAGER_KERNEL_FNS,
    _wrap_result,
    broadcast_to,
    elementwise_binary,
    elementwise_nary,
)

# ----------------------------------------------------------------------------- tables


def _rsqrt(x):
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        x = x.astype(jnp.result_type(float))
    return lax.rsqrt(x)


_UNARY_TABLE: dict[str, Any] = {
    "abs": jnp.abs,
    "absolute": jnp.absolute,
    "angle": jnp.angle,
    "arccos": jnp.arccos,
    "arccosh": jnp.arccosh,
    "arcsin": jnp.arcsin,
    "arcsinh": jnp.arcsinh,
    "arctan": jnp.arctan,
    "arctanh": jnp.arctanh,
    "around": jnp.around,
    "bitwise_count": jnp.bitwise_count,
    "bitwise_invert": jnp.bitwise_invert,
    "bitwise_not": jnp.bitwise_not,
    "cbrt": jnp.cbrt,
    "ceil": jnp.ceil,
    "conj": jnp.conj,
    "conjugate": jnp.conjugate,
    "copy": jnp.copy,
    "cos": jnp.cos,
    "cosh": jnp.cosh,
    "deg2rad": jnp.deg2rad,
    "degrees": jnp.degrees,
    "exp": jnp.exp,
    "exp2": jnp.exp2,
    "expm1": jnp.expm1,
    "fabs": jnp.fabs,
    "fix": jnp.trunc,  # numpy.fix rounds toward zero, which is trunc
    "floor": jnp.floor,
    "frexp": jnp.frexp,
    "i0": jnp.i0,
    "imag": jnp.imag,
    "invert": jnp.invert,
    "iscomplex": jnp.iscomplex,
    "isfinite": jnp.isfinite,
    "isinf": jnp.isinf,
    "isnan": jnp.isnan,
    "isneginf": jnp.isneginf,
    "isposinf": jnp.isposinf,
    "isreal": jnp.isreal,
    "log": jnp.log,
    "log10": jnp.log10,
    "log1p": jnp.log1p,
    "log2": jnp.log2,
    "logical_not": jnp.logical_not,
    "negative": jnp.negative,
    "positive": jnp.positive,
    "rad2deg": jnp.rad2deg,
    "radians": jnp.radians,
    "real": jnp.real,
    "reciprocal": jnp.reciprocal,
    "rint": jnp.rint,
    "rsqrt": _rsqrt,
    "sign": jnp.sign,
    "signbit": jnp.signbit,
    "sin": jnp.sin,
    "sinc": jnp.sinc,
    "sinh": jnp.sinh,
    "square": jnp.square,
    "sqrt": jnp.sqrt,
    "tan": jnp.tan,
    "tanh": jnp.tanh,
    "trunc": jnp.trunc,
}

_BINARY_TABLE: dict[str, Any] = {
    "add": jnp.add,
    "arctan2": jnp.arctan2,
    "bitwise_and": jnp.bitwise_and,
    "bitwise_left_shift": jnp.bitwise_left_shift,
    "bitwise_or": jnp.bitwise_or,
    "bitwise_right_shift": jnp.bitwise_right_shift,
    "bitwise_xor": jnp.bitwise_xor,
    "divide": jnp.divide,
    "divmod": jnp.divmod,
    "equal": jnp.equal,
    "float_power": jnp.float_power,
    "floor_divide": jnp.floor_divide,
    "fmax": jnp.fmax,
    "fmin": jnp.fmin,
    "fmod": jnp.fmod,
    "greater": jnp.greater,
    "greater_equal": jnp.greater_equal,
    "hypot": jnp.hypot,
    "left_shift": jnp.left_shift,
    "less": jnp.less,
    "less_equal": jnp.less_equal,
    "logaddexp": jnp.logaddexp,
    "logaddexp2": jnp.logaddexp2,
    "logical_and": jnp.logical_and,
    "logical_or": jnp.logical_or,
    "logical_xor": jnp.logical_xor,
    "maximum": jnp.maximum,
    "minimum": jnp.minimum,
    "mod": jnp.mod,
    "multiply": jnp.multiply,
    "nextafter": jnp.nextafter,
    "not_equal": jnp.not_equal,
    "power": jnp.power,
    "remainder": jnp.remainder,
    "right_shift": jnp.right_shift,
    "subtract": jnp.subtract,
    "true_divide": jnp.true_divide,
}

UNARY_OPS = tuple(_UNARY_TABLE)
"""Names of the generated unary wrappers (each also exported at package level)."""
BINARY_OPS = tuple(_BINARY_TABLE)
"""Names of the generated binary wrappers (each also exported at package level)."""


def _make_unary(name: str, fn):
    def op(a):
        if isinstance(a, NamedArray):
            return _wrap_result(fn(a.array), a.axes, a._names)
        return fn(a)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = (
        f"Named version of ``jax.numpy.{name}``: applies it elementwise and keeps the axes.\n\n"
        "Args:\n    a: A NamedArray, a scalar or a positional array.\n\n"
        "Returns:\n    The result with ``a``'s axes (a tuple of them for multi-output ops)."
    )
    return op


def _make_binary(name: str, fn):
    def op(x1, x2):
        return elementwise_binary(fn, x1, x2)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = (
        f"Named version of ``jax.numpy.{name}``; operands are aligned by axis name.\n\n"
        "Args:\n    x1: A NamedArray or a scalar.\n    x2: A NamedArray or a scalar.\n\n"
        "Returns:\n    The result over the union of both operands' axes (``x1``'s first).\n\n"
        "Raises:\n    ValueError: if same-named axes differ in size."
    )
    return op


EAGER_KERNEL_FNS.update(_BINARY_TABLE.values())
EAGER_KERNEL_FNS.update((jnp.where, jnp.clip))

_g = globals()
for _name, _fn in _UNARY_TABLE.items():
    _g[_name] = _make_unary(_name, _fn)
for _name, _fn in _BINARY_TABLE.items():
    _g[_name] = _make_binary(_name, _fn)
del _g, _name, _fn


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


# ----------------------------------------------------------------------------- reductions

_REDUCE_CACHE: dict = {}


def _reduce_one_axis(fn, array: NamedArray, axis: str) -> NamedArray:
    """The reductions' hot path: `fn` over one axis named by a string present in `array`."""
    names = array._names
    pos = names.index(axis)
    axes = array.axes
    return NamedArray._new(
        fn(array.array, axis=pos), axes[:pos] + axes[pos + 1 :], names[:pos] + names[pos + 1 :]
    )


def _reduce_plan(array: NamedArray, axis):
    """``(positions, remaining axes)`` for reducing ``axis`` (cached per axes and selector)."""
    try:
        key = (array.axes, axis)
        hit = _REDUCE_CACHE.get(key)
    except TypeError:  # unhashable selector (a list or dict)
        key, hit = None, None
    if hit is not None:
        return hit
    if axis is None:
        plan = (None, ())
    else:
        if isinstance(axis, (str, Axis)):
            positions = array._index_of(axis)  # a plain int keeps jnp's fast path
        else:
            positions = tuple(array._index_of(a) for a in _selection_list(axis))
            if len(set(positions)) != len(positions):
                raise ValueError(f"Axis selection {axis!r} names an axis twice")
        drop = {positions} if isinstance(positions, int) else set(positions)
        plan = (positions, tuple(ax for i, ax in enumerate(array.axes) if i not in drop))
    if key is not None:
        if len(_REDUCE_CACHE) >= 4096:  # bound growth under pathological shape churn
            _REDUCE_CACHE.clear()
        _REDUCE_CACHE[key] = plan
    return plan


def _selection_list(axis):
    if isinstance(axis, Mapping):
        return [
            k if isinstance(k, Axis) else (k if v is None else Axis(k, v)) for k, v in axis.items()
        ]
    return list(axis)


def _where_array(array: NamedArray, where):
    if where is None:
        return None
    if isinstance(where, NamedArray):
        return broadcast_to(where, array.axes, ensure_order=True, enforce_no_extra_axes=True).array
    if _is_scalar_like(where):
        return where
    raise ValueError(
        f"`where` must be a NamedArray or a scalar, got a positional array of shape {getattr(where, 'shape', None)}"
    )


def _extreme_initial(fn, lowest: bool):
    """Wraps max/min so a ``where`` mask needs no ``initial``: masked-out slots count as
    the dtype's lowest (for max) or highest (for min) value."""

    def reduce(x, axis=None, where=None):
        if where is None:
            return fn(x, axis=axis)
        dt = jnp.result_type(x)
        if jnp.issubdtype(dt, jnp.inexact):
            init = -jnp.inf if lowest else jnp.inf
        elif dt == jnp.bool_:
            init = not lowest
        else:
            info = jnp.iinfo(dt)
            init = info.min if lowest else info.max
        return fn(x, axis=axis, where=where, initial=init)

    return reduce


def _reduce(fn, name: str, array, axis, where, kwargs: dict) -> NamedArray:
    """The general reduction path: any selection, an optional ``where`` mask, extra kwargs."""
    _check_named(array, name)
    positions, out_axes = _reduce_plan(array, axis)
    if where is not None:
        kwargs["where"] = _where_array(array, where)
    return NamedArray._new(fn(array.array, axis=positions, **kwargs), out_axes)


def _make_reduction(name: str, fn, doc: str, has_dtype: bool, has_ddof: bool = False):
    if has_ddof:

        def op(array, axis=None, *, where=None, ddof: int = 0, dtype=None):
            return _reduce(fn, name, array, axis, where, {"ddof": ddof, "dtype": dtype})

    elif has_dtype:

        def op(array, axis=None, *, where=None, dtype=None):
            if (
                type(axis) is str
                and where is None
                and dtype is None
                and type(array) is NamedArray
                and axis in array._names
            ):
                return _reduce_one_axis(fn, array, axis)
            return _reduce(fn, name, array, axis, where, {} if dtype is None else {"dtype": dtype})

    else:

        def op(array, axis=None, *, where=None):
            if (
                type(axis) is str
                and where is None
                and type(array) is NamedArray
                and axis in array._names
            ):
                return _reduce_one_axis(fn, array, axis)
            return _reduce(fn, name, array, axis, where, {})

    op.__name__ = op.__qualname__ = name
    op.__doc__ = (
        f"{doc}\n\nArgs:\n    array: The NamedArray to reduce.\n    axis: Axis or axes to reduce; "
        "``None`` reduces all (giving a NamedArray with no axes).\n    where: Optional boolean "
        "NamedArray (matched by name) of elements to include.\n\nReturns:\n    A NamedArray "
        "without the reduced axes.\n\nRaises:\n    ValueError: if a selected axis is missing."
    )
    return op


def _ptp(x, axis=None, where=None):
    if where is None:
        return jnp.ptp(x, axis=axis)
    return jnp.max(x, axis=axis, where=where, initial=-jnp.inf) - jnp.min(
        x, axis=axis, where=where, initial=jnp.inf
    )


sum = _make_reduction("sum", jnp.sum, "Named version of ``jax.numpy.sum``.", True)  # noqa: A001 - NumPy's name
prod = _make_reduction("prod", jnp.prod, "Named version of ``jax.numpy.prod``.", True)
mean = _make_reduction("mean", jnp.mean, "Named version of ``jax.numpy.mean``.", True)
nansum = _make_reduction("nansum", jnp.nansum, "Named version of ``jax.numpy.nansum``.", True)
nanprod = _make_reduction("nanprod", jnp.nanprod, "Named version of ``jax.numpy.nanprod``.", True)
nanmean = _make_reduction("nanmean", jnp.nanmean, "Named version of ``jax.numpy.nanmean``.", True)
_MASK_NOTE = " Elements masked out by ``where`` count as the dtype's lowest value."
_MASK_NOTE_MIN = " Elements masked out by ``where`` count as the dtype's highest value."
_max = _extreme_initial(jnp.max, True)
_min = _extreme_initial(jnp.min, False)
max = _make_reduction("max", _max, "Named version of ``jax.numpy.max``." + _MASK_NOTE, False)  # noqa: A001 - NumPy's name
min = _make_reduction("min", _min, "Named version of ``jax.numpy.min``." + _MASK_NOTE_MIN, False)  # noqa: A001 - NumPy's name
amax = _make_reduction("amax", _max, "Alias of ``max``." + _MASK_NOTE, False)
amin = _make_reduction("amin", _min, "Alias of ``min``." + _MASK_NOTE_MIN, False)
nanmax = _make_reduction(
    "nanmax",
    _extreme_initial(jnp.nanmax, True),
    "Named version of ``jax.numpy.nanmax``." + _MASK_NOTE,
    False,
)
nanmin = _make_reduction(
    "nanmin",
    _extreme_initial(jnp.nanmin, False),
    "Named version of ``jax.numpy.nanmin``." + _MASK_NOTE_MIN,
    False,
)
all = _make_reduction("all", jnp.all, "True where all elements along the axes are true.", False)  # noqa: A001 - NumPy's name
any = _make_reduction("any", jnp.any, "True where any element along the axes is true.", False)  # noqa: A001 - NumPy's name
ptp = _make_reduction("ptp", _ptp, "Peak to peak (max - min) along the axes.", False)
std = _make_reduction("std", jnp.std, "Named version of ``jax.numpy.std``.", True, has_ddof=True)
var = _make_reduction("var", jnp.var, "Named version of ``jax.numpy.var``.", True, has_ddof=True)
nanstd = _make_reduction(
    "nanstd", jnp.nanstd, "Named version of ``jax.numpy.nanstd``.", True, has_ddof=True
)
nanvar = _make_reduction(
    "nanvar", jnp.nanvar, "Named version of ``jax.numpy.nanvar``.", True, has_ddof=True
)


def _make_arg_reduction(name: str, fn):
    def op(array, axis: AxisSelector | None = None):
        _check_named(array, name)
        if axis is None:
            return NamedArray._new(fn(array.array, axis=None), ())
        if not isinstance(axis, (str, Axis)):
            raise TypeError(f"{name} takes a single axis (name or Axis) or None, got {axis!r}")
        pos = array._index_of(axis)
        return NamedArray._new(fn(array.array, axis=pos), array.axes[:pos] + array.axes[pos + 1 :])

    op.__name__ = op.__qualname__ = name
    op.__doc__ = (
        f"Named version of ``jax.numpy.{name}``.\n\nArgs:\n    array: The NamedArray.\n    axis: "
        "The axis to reduce; ``None`` gives the index into the flattened array.\n\nReturns:\n    "
        "Integer indices along ``axis`` as a NamedArray without that axis."
    )
    return op


argmax = _make_arg_reduction("argmax", jnp.argmax)
argmin = _make_arg_reduction("argmin", jnp.argmin)
nanargmax = _make_arg_reduction("nanargmax", jnp.nanargmax)
nanargmin = _make_arg_reduction("nanargmin", jnp.nanargmin)


# ----------------------------------------------------------------------------- axis-wise


def _make_axiswise(name: str, fn, has_dtype: bool):
    if has_dtype:

        def op(a, axis: AxisSelector, *, dtype=None):
            _check_named(a, name)
            return NamedArray._new(
                fn(a.array, axis=a._index_of(axis), dtype=dtype), a.axes, a._names
            )

    else:

        def op(a, axis: AxisSelector):
            _check_named(a, name)
            return NamedArray._new(fn(a.array, axis=a._index_of(axis)), a.axes, a._names)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = (
        f"Named version of ``jax.numpy.{name}`` along one axis; the axes are unchanged.\n\n"
        "Raises:\n    ValueError: if the axis is missing."
    )
    return op


cumsum = _make_axiswise("cumsum", jnp.cumsum, True)
cumprod = _make_axiswise("cumprod", jnp.cumprod, True)
nancumsum = _make_axiswise("nancumsum", jnp.nancumsum, True)
nancumprod = _make_axiswise("nancumprod", jnp.nancumprod, True)
sort = _make_axiswise("sort", jnp.sort, False)


def argsort(a: NamedArray, axis: AxisSelector | None, *, stable: bool = False):
    """Named version of ``jax.numpy.argsort``.

    Args:
        a: The NamedArray.
        axis: The axis to sort along; ``None`` sorts the flattened array and returns a
            positional 1-d array (it has no meaningful axis name).
        stable: Keep equal elements in their original order.
    """
    _check_named(a, "argsort")
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
    _check_named(arr, "top_k")
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
    _check_named(array, "nonzero")
    if not isinstance(size, Axis):
        raise TypeError(f"nonzero needs size=Axis(name, n) for the result axis, got {size!r}")
    idx = jnp.nonzero(array.array, size=size.size, fill_value=fill_value)
    return tuple(NamedArray._new(i, (size,)) for i in idx)


def searchsorted(a: NamedArray, v, *, side: str = "left", sorter=None, method: str = "scan"):
    """Named ``jnp.searchsorted``: ``a`` (and ``sorter``) are 1-d; the result has ``v``'s axes.

    Raises:
        ValueError: if ``a`` or ``sorter`` is not one-dimensional.
    """
    _check_named(a, "searchsorted")
    if a.ndim != 1:
        raise ValueError(f"searchsorted needs a one-dimensional `a`, got axes {_describe(a.axes)}")
    if isinstance(sorter, NamedArray):
        if sorter.ndim != 1:
            raise ValueError(
                f"searchsorted needs a one-dimensional sorter, got axes {_describe(sorter.axes)}"
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
    _check_named(x, "bincount")
    if not isinstance(Counts, Axis):
        raise TypeError(f"bincount needs an Axis for Counts, got {Counts!r}")
    if minlength > Counts.size:
        raise ValueError(
            f"bincount: minlength={minlength} exceeds the size {Counts.size} of axis {Counts.name!r}"
        )
    if weights is not None:
        if isinstance(weights, NamedArray):
            weights = broadcast_to(weights, x.axes).array.reshape(-1)
        elif _is_scalar_like(weights):
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
    _check_named(array, "pad")
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
                f"pad constant_values must be a scalar, got a NamedArray with axes {_describe(constant_values.axes)}"
            )
        constant_values = constant_values.array
    if mode == "constant":
        kwargs["constant_values"] = constant_values
    return NamedArray._new(jnp.pad(array.array, widths, mode=mode, **kwargs), tuple(axes))


def trace(
    array: NamedArray, axis1: AxisSelector, axis2: AxisSelector, offset=0, dtype=None
) -> NamedArray:
    """Sum along the diagonal of two named axes; both axes are removed."""
    _check_named(array, "trace")
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
    _check_named(array, "tril")
    return _tri(jnp.tril, array, axis1, axis2, k)


def triu(array: NamedArray, axis1: AxisSelector, axis2: AxisSelector, k: int = 0) -> NamedArray:
    """Zeros elements below the ``k``-th diagonal; the result's axes end ``axis1, axis2`` (Haliax)."""
    _check_named(array, "triu")
    return _tri(jnp.triu, array, axis1, axis2, k)


def packbits(a: NamedArray, axis: AxisSelector, *, bitorder: str = "big") -> NamedArray:
    """Named ``jnp.packbits`` along ``axis``, which shrinks to ``ceil(size / 8)``."""
    _check_named(a, "packbits")
    pos = a._index_of(axis)
    old = a.axes[pos]
    out = jnp.packbits(a.array, axis=pos, bitorder=bitorder)
    axes = a.axes[:pos] + (Axis(old.name, (old.size + 7) // 8),) + a.axes[pos + 1 :]
    return NamedArray._new(out, axes)


def unpackbits(
    a: NamedArray, axis: AxisSelector, *, count: int | None = None, bitorder: str = "big"
) -> NamedArray:
    """Named ``jnp.unpackbits`` along ``axis``, which grows to ``8 * size`` (or ``count``)."""
    _check_named(a, "unpackbits")
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
                    f"Polynomial coefficients must be one-dimensional, got axes {_describe(x.axes)}"
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
    _check_named(x, "vander")
    if x.ndim != 1:
        raise ValueError(f"vander needs a one-dimensional array, got axes {_describe(x.axes)}")
    col = degree if isinstance(degree, Axis) else Axis(degree, x.axes[0].size)
    if col.name == x.axes[0].name:
        raise ValueError(f"vander: the degree axis must differ from the row axis {col.name!r}")
    return NamedArray._new(jnp.vander(x.array, N=col.size), (x.axes[0], col))


__all__ = [
    *UNARY_OPS,
    *BINARY_OPS,
    "round", "ndim",
    "sum", "prod", "mean", "nansum", "nanprod", "nanmean", "max", "min", "amax", "amin",
    "nanmax", "nanmin", "all", "any", "ptp", "std", "var", "nanstd", "nanvar",
    "argmax", "argmin", "nanargmax", "nanargmin",
    "cumsum", "cumprod", "nancumsum", "nancumprod", "sort", "argsort",
    "where", "clip", "isclose", "allclose", "array_equal", "array_equiv",
    "top_k", "nonzero", "searchsorted", "bincount", "pad", "trace", "tril", "triu",
    "packbits", "unpackbits",
    "DEFAULT_POLY_AXIS_NAME", "poly", "polyadd", "polysub", "polymul", "polydiv", "polyint",
    "polyder", "polyval", "polyfit", "roots", "trim_zeros", "vander",
]  # fmt: skip

"""Dtype-and-axes annotations for named arrays, checked at run time (``hax.haxtyping``).

In the style of jaxtyping: ``Float[NamedArray, "batch embed"]`` is a floating-point
NamedArray whose axes are ``batch, embed`` in that order; ``"batch ... embed"`` allows
any axes in between, ``{"batch", "embed"}`` any order, and ``f32``/``i32``/... pin an exact
dtype. ``Named["batch embed"]`` accepts any dtype. Each annotation is a class, so
``isinstance(x, Float[NamedArray, "b e"])`` checks an array, and the ``typecheck``
decorator checks a function's annotated arguments and result on every call, also
requiring one size per axis name across all of them (like jaxtyping's dimension binding).
A positional ``jax.Array``/NumPy array may be annotated the same way (``f32[jax.Array,
"b e"]``): its rank must equal the number of names (``...`` allows more) and its dimensions
bind to those names.

Static type checkers see the annotations as ``typing.Annotated`` (so
``Float[NamedArray, "b e"]`` is simply ``NamedArray`` to them).
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxcore.named._array import AxesSpec, NamedArray, as_axes_spec, describe_axes

# typing's class of Annotated[...] forms (private in every Python, stable since 3.9)
_AnnotatedAlias: Any = typing.__dict__["_AnnotatedAlias"]

__all__ = [
    "Bool",
    "Complex",
    "Float",
    "Int",
    "Named",
    "Num",
    "Shaped",
    "UInt",
    "bf16",
    "bool_",
    "c64",
    "c128",
    "f16",
    "f32",
    "f64",
    "i8",
    "i16",
    "i32",
    "i64",
    "typecheck",
    "u8",
    "u16",
    "u32",
    "u64",
]


class _DTypeRule:
    """A set of dtypes (``Float``: any floating dtype; ``f32``: exactly float32)."""

    def __init__(self, name: str, test: Callable[[np.dtype], bool], dtype: Any = None):
        self.name = name
        self.test = test
        # what ``typing.get_args(ann)[1].dtype`` reports, as Haliax: the exact dtype, a
        # category name (``"float"``) or None for any dtype
        self.dtype = dtype

    def __getitem__(self, item: Any) -> Any:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], type):
            array_type, spec = item
        elif isinstance(item, tuple) and len(item) == 2 and not isinstance(item[0], str):
            raise TypeError(
                f"{self.name}[...]: the array type must be NamedArray, jax.Array or "
                f"np.ndarray, got {item[0]!r}"
            )
        else:  # Haliax's short form: f32["batch embed"] is a NamedArray annotation
            array_type, spec = NamedArray, item
        if array_type is not NamedArray and not (
            isinstance(array_type, type) and issubclass(array_type, (jax.Array, np.ndarray))
        ):
            raise TypeError(
                f"{self.name}[...]: the array type must be NamedArray, jax.Array or "
                f"np.ndarray, got {array_type!r}"
            )
        base = as_axes_spec(spec)
        return _annotation(
            self, typing.cast(Any, array_type), AxesSpec(base.names, base.ordered, self)
        )

    def __repr__(self) -> str:
        return self.name


def _kind(*kinds: str) -> Callable[[np.dtype], bool]:
    return lambda dt: dt.kind in kinds


def _exact(dtype: Any) -> Callable[[np.dtype], bool]:
    want = np.dtype(dtype)
    return lambda dt: dt == want


# ``typing.Annotated[array_type, spec]`` that ``isinstance`` can check: get_args/get_origin,
# get_type_hints(include_extras=True) and static checkers see a plain Annotated (as Haliax's
# annotations are), while isinstance(x, Float[NamedArray, "b e"]) checks dtype and axes.
class _Annotation(_AnnotatedAlias, _root=True):  # type: ignore[call-arg]  # typing requires _root to subclass its special forms
    def __instancecheck__(self, x: Any) -> bool:
        return _problem(self, x, None) is None

    def __repr__(self) -> str:
        spec = self.__metadata__[0]
        body = " ".join("..." if n is Ellipsis else n for n in spec.names)
        if not spec.ordered:
            body = "{" + body + "}"
        return f"{spec.rule.name}[{self.__origin__.__name__}, {body!r}]"


@functools.cache
def _annotation(rule: _DTypeRule, array_type: Any, spec: AxesSpec) -> Any:
    return _Annotation(array_type, (spec,))


def _problem(ann: Any, x: Any, sizes: dict[str, int] | None) -> str | None:
    """Why ``x`` does not fit annotation ``ann`` (``None`` if it does); binds axis sizes."""
    names: tuple[str, ...] | None
    spec: AxesSpec = ann.__metadata__[0]
    if ann.__origin__ is NamedArray:
        if not isinstance(x, NamedArray):
            return f"expected a NamedArray, got {type(x).__name__}"
        names = x._names
        dims = [a.size for a in x.axes]
        shown = describe_axes(x.axes)
    else:
        if not isinstance(x, (jax.Array, np.ndarray, np.generic)):
            return f"expected an array, got {type(x).__name__}"
        fixed = [n for n in spec.names if n is not Ellipsis]
        has_ellipsis = len(fixed) != len(spec.names)
        if len(fixed) > np.ndim(x) or (not has_ellipsis and len(fixed) != np.ndim(x)):
            return f"expected rank {len(fixed)} for axes {fixed}, got shape {np.shape(x)}"
        names = tuple(fixed) if not has_ellipsis else None
        dims = list(np.shape(x))
        shown = str(tuple(np.shape(x)))
    dtype = np.dtype(x.dtype)
    if not spec.accepts_dtype(dtype):
        return f"expected dtype {spec.rule.name}, got {dtype.name} (axes {shown})"
    if names is not None and not spec.matches(tuple(names)):
        return f"expected axes {ann!r}, got {shown}"
    if sizes is not None and names is not None:
        for name, size in zip(names, dims):
            bound = sizes.setdefault(name, size)
            if bound != size:
                return f"axis {name!r} has size {size} here but {bound} in an earlier argument"
    return None


def _is_annotation(t: Any) -> bool:
    return isinstance(t, _Annotation)


def typecheck(fn: Callable) -> Callable:
    """Checks ``fn``'s haxtyping-annotated arguments and result on every call.

    Axis names bind sizes across the whole call: two arguments with an axis ``batch`` must
    agree on its size, and so must the result.

    Args:
        fn: A function whose parameters/return may be annotated with ``Float[...]`` etc.

    Returns:
        The wrapped function.

    Raises:
        TypeError: (from the wrapper) naming the parameter and what was wrong with it.
    """
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except (NameError, TypeError):  # an annotation that does not resolve: use them raw
        hints = dict(getattr(fn, "__annotations__", {}))
    checked = {k: v for k, v in hints.items() if _is_annotation(v)}
    signature = inspect.signature(fn)
    ret = checked.pop("return", None)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        sizes: dict[str, int] = {}
        for name, ann in checked.items():
            if name in bound.arguments:
                why = _problem(ann, bound.arguments[name], sizes)
                if why is not None:
                    raise TypeError(f"{fn.__qualname__}: argument {name!r}: {why}")
        out = fn(*args, **kwargs)
        if ret is not None:
            why = _problem(ret, out, sizes)
            if why is not None:
                raise TypeError(f"{fn.__qualname__}: return value: {why}")
        return out

    return wrapper


class _NamedRule(_DTypeRule):
    """``Named["b e"]`` (any dtype) as well as ``Named[NamedArray, "b e"]``."""

    def __getitem__(self, item: Any) -> Any:
        return super().__getitem__(item)


if TYPE_CHECKING:  # static checkers read the annotations as the array type itself
    from typing import Annotated as Bool
    from typing import Annotated as Complex
    from typing import Annotated as Float
    from typing import Annotated as Int
    from typing import Annotated as Named
    from typing import Annotated as Num
    from typing import Annotated as Shaped
    from typing import Annotated as UInt
    from typing import Annotated as bf16
    from typing import Annotated as bool_
    from typing import Annotated as c64
    from typing import Annotated as c128
    from typing import Annotated as f16
    from typing import Annotated as f32
    from typing import Annotated as f64
    from typing import Annotated as i8
    from typing import Annotated as i16
    from typing import Annotated as i32
    from typing import Annotated as i64
    from typing import Annotated as u8
    from typing import Annotated as u16
    from typing import Annotated as u32
    from typing import Annotated as u64
else:
    Shaped = _DTypeRule("Shaped", lambda dt: True)
    Named = _NamedRule("Named", lambda dt: True)
    Bool = _DTypeRule("Bool", _kind("b"), "bool")
    Float = _DTypeRule("Float", lambda dt: jnp.issubdtype(dt, jnp.floating), "float")
    Complex = _DTypeRule("Complex", _kind("c"), "complex")
    Int = _DTypeRule("Int", _kind("i", "u"), "int")
    UInt = _DTypeRule("UInt", _kind("u"), "uint")
    Num = _DTypeRule(
        "Num", lambda dt: dt.kind in "iufc" or jnp.issubdtype(dt, jnp.floating), "number"
    )
    bool_ = _DTypeRule("bool_", _exact(np.bool_), np.dtype(np.bool_))
    bf16 = _DTypeRule("bf16", _exact(jnp.bfloat16), np.dtype(jnp.bfloat16))
    f16 = _DTypeRule("f16", _exact(np.float16), np.dtype(np.float16))
    f32 = _DTypeRule("f32", _exact(np.float32), np.dtype(np.float32))
    f64 = _DTypeRule("f64", _exact(np.float64), np.dtype(np.float64))
    c64 = _DTypeRule("c64", _exact(np.complex64), np.dtype(np.complex64))
    c128 = _DTypeRule("c128", _exact(np.complex128), np.dtype(np.complex128))
    i8 = _DTypeRule("i8", _exact(np.int8), np.dtype(np.int8))
    i16 = _DTypeRule("i16", _exact(np.int16), np.dtype(np.int16))
    i32 = _DTypeRule("i32", _exact(np.int32), np.dtype(np.int32))
    i64 = _DTypeRule("i64", _exact(np.int64), np.dtype(np.int64))
    u8 = _DTypeRule("u8", _exact(np.uint8), np.dtype(np.uint8))
    u16 = _DTypeRule("u16", _exact(np.uint16), np.dtype(np.uint16))
    u32 = _DTypeRule("u32", _exact(np.uint32), np.dtype(np.uint32))
    u64 = _DTypeRule("u64", _exact(np.uint64), np.dtype(np.uint64))

"""Writes the named element-wise and reduction ops of ``jaxcore.named`` as real ``def``s.

``jaxcore/named/_unary.py``, ``_binary.py`` and ``_reductions.py`` are generated from the
tables below (one line per op: its name, the positional function it wraps and, for
reductions, its kind and summary) so that every op is a plain function an IDE, a type
checker and ``help()`` can find, while the hundred near-identical bodies are written once
here. The files are checked in; ``tests/named_generated_ops_test.py`` fails when they differ
from what this script writes.

Run from the repository root after editing a table::

    python3 tools/gen_named_ops.py          # rewrite the three files
    python3 tools/gen_named_ops.py --check  # exit 1 if any file is out of date
"""

from __future__ import annotations

import argparse
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "jaxcore" / "named"

# name -> positional function (an expression in the generated module's namespace).
UNARY = {
    "abs": "jnp.abs",
    "absolute": "jnp.absolute",
    "angle": "jnp.angle",
    "arccos": "jnp.arccos",
    "arccosh": "jnp.arccosh",
    "arcsin": "jnp.arcsin",
    "arcsinh": "jnp.arcsinh",
    "arctan": "jnp.arctan",
    "arctanh": "jnp.arctanh",
    "around": "jnp.around",
    "bitwise_count": "jnp.bitwise_count",
    "bitwise_invert": "jnp.bitwise_invert",
    "bitwise_not": "jnp.bitwise_not",
    "cbrt": "jnp.cbrt",
    "ceil": "jnp.ceil",
    "conj": "jnp.conj",
    "conjugate": "jnp.conjugate",
    "copy": "jnp.copy",
    "cos": "jnp.cos",
    "cosh": "jnp.cosh",
    "deg2rad": "jnp.deg2rad",
    "degrees": "jnp.degrees",
    "exp": "jnp.exp",
    "exp2": "jnp.exp2",
    "expm1": "jnp.expm1",
    "fabs": "jnp.fabs",
    "fix": "jnp.trunc",  # numpy.fix rounds toward zero, which is trunc
    "floor": "jnp.floor",
    "frexp": "jnp.frexp",
    "i0": "jnp.i0",
    "imag": "jnp.imag",
    "invert": "jnp.invert",
    "iscomplex": "jnp.iscomplex",
    "isfinite": "jnp.isfinite",
    "isinf": "jnp.isinf",
    "isnan": "jnp.isnan",
    "isneginf": "jnp.isneginf",
    "isposinf": "jnp.isposinf",
    "isreal": "jnp.isreal",
    "log": "jnp.log",
    "log10": "jnp.log10",
    "log1p": "jnp.log1p",
    "log2": "jnp.log2",
    "logical_not": "jnp.logical_not",
    "negative": "jnp.negative",
    "positive": "jnp.positive",
    "rad2deg": "jnp.rad2deg",
    "radians": "jnp.radians",
    "real": "jnp.real",
    "reciprocal": "jnp.reciprocal",
    "rint": "jnp.rint",
    "rsqrt": "positional_rsqrt",
    "sign": "jnp.sign",
    "signbit": "jnp.signbit",
    "sin": "jnp.sin",
    "sinc": "jnp.sinc",
    "sinh": "jnp.sinh",
    "square": "jnp.square",
    "sqrt": "jnp.sqrt",
    "tan": "jnp.tan",
    "tanh": "jnp.tanh",
    "trunc": "jnp.trunc",
}

BINARY = {
    "add": "jnp.add",
    "arctan2": "jnp.arctan2",
    "bitwise_and": "jnp.bitwise_and",
    "bitwise_left_shift": "jnp.bitwise_left_shift",
    "bitwise_or": "jnp.bitwise_or",
    "bitwise_right_shift": "jnp.bitwise_right_shift",
    "bitwise_xor": "jnp.bitwise_xor",
    "divide": "jnp.divide",
    "divmod": "jnp.divmod",
    "equal": "jnp.equal",
    "float_power": "jnp.float_power",
    "floor_divide": "jnp.floor_divide",
    "fmax": "jnp.fmax",
    "fmin": "jnp.fmin",
    "fmod": "jnp.fmod",
    "greater": "jnp.greater",
    "greater_equal": "jnp.greater_equal",
    "hypot": "jnp.hypot",
    "left_shift": "jnp.left_shift",
    "less": "jnp.less",
    "less_equal": "jnp.less_equal",
    "logaddexp": "jnp.logaddexp",
    "logaddexp2": "jnp.logaddexp2",
    "logical_and": "jnp.logical_and",
    "logical_or": "jnp.logical_or",
    "logical_xor": "jnp.logical_xor",
    "maximum": "jnp.maximum",
    "minimum": "jnp.minimum",
    "mod": "jnp.mod",
    "multiply": "jnp.multiply",
    "nextafter": "jnp.nextafter",
    "not_equal": "jnp.not_equal",
    "power": "jnp.power",
    "remainder": "jnp.remainder",
    "right_shift": "jnp.right_shift",
    "subtract": "jnp.subtract",
    "true_divide": "jnp.true_divide",
}

_LOWEST = " Elements masked out by ``where`` count as the dtype's lowest value."
_HIGHEST = " Elements masked out by ``where`` count as the dtype's highest value."

# name -> (positional function, kind, summary). Kinds: "dtype" (takes dtype=), "plain",
# "ddof" (takes ddof= and dtype=), "arg" (argmax-style), "scan" (cumsum-style, dtype=),
# "along" (sort-style, one axis, no dtype).
REDUCTIONS = {
    "sum": ("jnp.sum", "dtype", "Named version of ``jax.numpy.sum``."),
    "prod": ("jnp.prod", "dtype", "Named version of ``jax.numpy.prod``."),
    "mean": ("jnp.mean", "dtype", "Named version of ``jax.numpy.mean``."),
    "nansum": ("jnp.nansum", "dtype", "Named version of ``jax.numpy.nansum``."),
    "nanprod": ("jnp.nanprod", "dtype", "Named version of ``jax.numpy.nanprod``."),
    "nanmean": ("jnp.nanmean", "dtype", "Named version of ``jax.numpy.nanmean``."),
    "max": ("masked_max", "plain", "Named version of ``jax.numpy.max``." + _LOWEST),
    "min": ("masked_min", "plain", "Named version of ``jax.numpy.min``." + _HIGHEST),
    "amax": ("masked_max", "plain", "Alias of ``max``." + _LOWEST),
    "amin": ("masked_min", "plain", "Alias of ``min``." + _HIGHEST),
    "nanmax": ("masked_nanmax", "plain", "Named version of ``jax.numpy.nanmax``." + _LOWEST),
    "nanmin": ("masked_nanmin", "plain", "Named version of ``jax.numpy.nanmin``." + _HIGHEST),
    "all": ("jnp.all", "plain", "True where all elements along the axes are true."),
    "any": ("jnp.any", "plain", "True where any element along the axes is true."),
    "ptp": ("masked_ptp", "plain", "Peak to peak (max - min) along the axes."),
    "std": ("jnp.std", "ddof", "Named version of ``jax.numpy.std``."),
    "var": ("jnp.var", "ddof", "Named version of ``jax.numpy.var``."),
    "nanstd": ("jnp.nanstd", "ddof", "Named version of ``jax.numpy.nanstd``."),
    "nanvar": ("jnp.nanvar", "ddof", "Named version of ``jax.numpy.nanvar``."),
    "argmax": ("jnp.argmax", "arg", "Named version of ``jax.numpy.argmax``."),
    "argmin": ("jnp.argmin", "arg", "Named version of ``jax.numpy.argmin``."),
    "nanargmax": ("jnp.nanargmax", "arg", "Named version of ``jax.numpy.nanargmax``."),
    "nanargmin": ("jnp.nanargmin", "arg", "Named version of ``jax.numpy.nanargmin``."),
    "cumsum": ("jnp.cumsum", "scan", "Named version of ``jax.numpy.cumsum`` along one axis."),
    "cumprod": ("jnp.cumprod", "scan", "Named version of ``jax.numpy.cumprod`` along one axis."),
    "nancumsum": (
        "jnp.nancumsum",
        "scan",
        "Named version of ``jax.numpy.nancumsum`` along one axis.",
    ),
    "nancumprod": (
        "jnp.nancumprod",
        "scan",
        "Named version of ``jax.numpy.nancumprod`` along one axis.",
    ),
    "sort": ("jnp.sort", "along", "Named version of ``jax.numpy.sort`` along one axis."),
}

_BUILTIN_NAMES = {"abs", "all", "any", "divmod", "max", "min", "sum", "round"}

_HEADER = '''"""{summary}

GENERATED by tools/gen_named_ops.py from its tables: edit the tables there and rerun it
(``python3 tools/gen_named_ops.py``); tests/named_generated_ops_test.py checks this file is
current.
"""

from __future__ import annotations
'''


def _def_line(name: str, params: str, ret: str) -> str:
    """A ``def`` line as ruff formats it: one line if it fits, else one parameter a line."""
    noqa = "  # noqa: A001 - NumPy's name" if name in _BUILTIN_NAMES else ""
    line = f"def {name}({params}) -> {ret}:"
    if len(line) <= 100:
        return line + noqa
    body = "".join(f"    {p.strip()},\n" for p in params.split(","))
    return f"def {name}(\n{body}) -> {ret}:{noqa}"


def _names_tuple(var: str, names: list[str], doc: str) -> str:
    body = "".join(f'    "{n}",\n' for n in names)
    return f'{var} = (\n{body})\n"""{doc}"""\n'


def unary_module() -> str:
    """The source of ``jaxcore/named/_unary.py``."""
    out = [
        _HEADER.format(summary="Named element-wise functions of one array (``hax.exp``, ...)."),
        "\nfrom typing import Any\n\nimport jax.numpy as jnp\nfrom jax import lax\n\n",
        "from jaxcore.named._array import NamedOrNumeric\n",
        "from jaxcore.named._broadcast import elementwise_unary\n\n",
        _names_tuple("UNARY_OPS", list(UNARY), "Names of the one-array element-wise ops."),
        "\n\ndef positional_rsqrt(x: Any) -> Any:\n",
        '    """``1 / sqrt(x)`` for a positional array; integers are promoted to float."""\n',
        "    x = jnp.asarray(x)\n",
        "    if not jnp.issubdtype(x.dtype, jnp.inexact):\n",
        "        x = x.astype(jnp.result_type(float))\n",
        "    return lax.rsqrt(x)\n",
    ]
    for name, fn in UNARY.items():
        shown = "jax.lax.rsqrt" if name == "rsqrt" else f"jax.numpy.{name}"
        out.append(
            f"\n\n{_def_line(name, 'a: NamedOrNumeric', 'Any')}\n"
            f'    """Named ``{shown}``, element-wise: ``{shown}(a)``, named like ``a``.\n\n'
            "    Args:\n"
            "        a: A NamedArray (its axes are kept), a scalar or a positional array.\n"
            '    """\n'
            f"    return elementwise_unary({fn}, a)\n"
        )
    return "".join(out)


def binary_module() -> str:
    """The source of ``jaxcore/named/_binary.py``."""
    out = [
        _HEADER.format(
            summary="Named element-wise functions of two operands matched by axis name (``hax.add``, ...)."
        ),
        "\nfrom typing import Any\n\nimport jax.numpy as jnp\n\n",
        "from jaxcore.named._array import NamedOrNumeric\n",
        "from jaxcore.named._broadcast import EAGER_KERNEL_FNS, elementwise_binary\n\n",
        _names_tuple("BINARY_OPS", list(BINARY), "Names of the two-operand element-wise ops."),
        "\n# Misaligned operands of these functions go through the cached eager kernels.\n",
        "EAGER_KERNEL_FNS.update(\n    (\n",
        "".join(f"        {fn},\n" for fn in BINARY.values()),
        "    )\n)\n",
    ]
    for name, fn in BINARY.items():
        out.append(
            f"\n\n{_def_line(name, 'x1: NamedOrNumeric, x2: NamedOrNumeric', 'Any')}\n"
            f'    """Named ``jax.numpy.{name}``; the operands are aligned by axis name.\n\n'
            "    Args:\n"
            "        x1: A NamedArray or a scalar.\n"
            "        x2: A NamedArray or a scalar.\n\n"
            "    Returns:\n"
            "        The result over the axes of the operand whose axes contain the other's.\n\n"
            "    Raises:\n"
            "        ValueError: if neither operand's axes contain the other's, or same-named\n"
            "            axes differ in size.\n"
            '    """\n'
            f"    return elementwise_binary({fn}, x1, x2)\n"
        )
    return "".join(out)


_REDUCE_DOC = (
    "\n\n    Args:\n"
    "        array: The NamedArray to reduce.\n"
    "        axis: Axis or axes to reduce; ``None`` reduces all (giving a NamedArray with no axes).\n"
    "        where: Optional boolean NamedArray (matched by name) of elements to include.\n"
    "{extra}"
    "\n    Returns:\n"
    "        A NamedArray without the reduced axes.\n\n"
    "    Raises:\n"
    "        ValueError: if a selected axis is missing.\n"
    '    """\n'
)


def _reduction(name: str, fn: str, kind: str, summary: str) -> str:
    head = (
        "array: NamedArray, axis: AxisSelection | None = None, *, where: NamedArray | None = None"
    )
    if kind == "dtype":
        params = head + ", dtype: DTypeLike | None = None"
        extra = "        dtype: The accumulation and result dtype.\n"
        body = (
            "    if type(axis) is str and where is None and dtype is None and fast_axis(array, axis):\n"
            f"        return reduce_one_axis({fn}, array, axis)\n"
            f'    return general_reduce(\n        {fn}, "{name}", array, axis, where, '
            '{} if dtype is None else {"dtype": dtype}\n    )\n'
        )
    elif kind == "plain":
        params = head
        extra = ""
        body = (
            "    if type(axis) is str and where is None and fast_axis(array, axis):\n"
            f"        return reduce_one_axis({fn}, array, axis)\n"
            f'    return general_reduce({fn}, "{name}", array, axis, where, {{}})\n'
        )
    else:  # ddof
        params = head + ", ddof: int = 0, dtype: DTypeLike | None = None"
        extra = (
            "        ddof: Delta degrees of freedom (the divisor is ``N - ddof``).\n"
            "        dtype: The accumulation and result dtype.\n"
        )
        body = f'    return general_reduce({fn}, "{name}", array, axis, where, {{"ddof": ddof, "dtype": dtype}})\n'
    return (
        f"\n\n{_def_line(name, params, 'NamedArray')}\n"
        f'    """{summary}' + _REDUCE_DOC.format(extra=extra) + body
    )


def _arg_reduction(name: str, fn: str, summary: str) -> str:
    return (
        f"\n\n{_def_line(name, 'array: NamedArray, axis: AxisSelector | None = None', 'NamedArray')}\n"
        f'    """{summary}\n\n'
        "    Args:\n"
        "        array: The NamedArray.\n"
        "        axis: The axis to reduce; ``None`` gives the index into the flattened array.\n\n"
        "    Returns:\n"
        "        Integer indices along ``axis`` as a NamedArray without that axis.\n"
        '    """\n'
        f'    return arg_reduce({fn}, "{name}", array, axis)\n'
    )


def _along(name: str, fn: str, kind: str, summary: str) -> str:
    if kind == "scan":
        params = "a: NamedArray, axis: AxisSelector, *, dtype: DTypeLike | None = None"
        extra = "        dtype: The accumulation and result dtype.\n"
        call = f'along_axis({fn}, "{name}", a, axis, dtype=dtype)'
    else:
        params = "a: NamedArray, axis: AxisSelector"
        extra = ""
        call = f'along_axis({fn}, "{name}", a, axis)'
    return (
        f"\n\n{_def_line(name, params, 'NamedArray')}\n"
        f'    """{summary}\n\n'
        "    Args:\n"
        "        a: The NamedArray.\n"
        "        axis: The axis to work along.\n"
        f"{extra}\n"
        "    Returns:\n"
        "        A NamedArray with ``a``'s axes.\n\n"
        "    Raises:\n"
        "        ValueError: if the axis is missing.\n"
        '    """\n'
        f"    return {call}\n"
    )


def reductions_module() -> str:
    """The source of ``jaxcore/named/_reductions.py``."""
    out = [
        _HEADER.format(
            summary="Named reductions and single-axis scans (``hax.sum``, ``hax.argmax``, ``hax.cumsum``, ...)."
        ),
        "\nimport jax.numpy as jnp\nfrom jax.typing import DTypeLike\n\n",
        "from jaxcore.named._array import NamedArray\n",
        "from jaxcore.named._axis import AxisSelection, AxisSelector\n",
        "from jaxcore.named._reduce_impl import (\n",
        "    along_axis,\n    arg_reduce,\n    fast_axis,\n    general_reduce,\n    masked_max,\n    masked_min,\n",
        "    masked_nanmax,\n    masked_nanmin,\n    masked_ptp,\n",
        "    reduce_one_axis,\n)\n\n",
        _names_tuple("REDUCTION_OPS", list(REDUCTIONS), "Names of the reductions and scans."),
    ]
    for name, (fn, kind, summary) in REDUCTIONS.items():
        if kind == "arg":
            out.append(_arg_reduction(name, fn, summary))
        elif kind in ("scan", "along"):
            out.append(_along(name, fn, kind, summary))
        else:
            out.append(_reduction(name, fn, kind, summary))
    return "".join(out)


FILES = {
    "_unary.py": unary_module,
    "_binary.py": binary_module,
    "_reductions.py": reductions_module,
}


def main(argv: list[str] | None = None) -> int:
    """Writes (or with ``--check`` compares) the generated files; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale files")
    args = parser.parse_args(argv)
    stale = []
    for fname, make in FILES.items():
        path = PACKAGE / fname
        text = make()
        if path.exists() and path.read_text() == text:
            continue
        stale.append(fname)
        if not args.check:
            path.write_text(text)
    if args.check and stale:
        print(f"out of date: {', '.join(stale)}; run python3 tools/gen_named_ops.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Materialization: turning implicit arrays into dense ones, and the fallback handlers.

Sits above the interpreter (:mod:`._trace`): an implicit array whose children are
implicit arrays materializes by running its ``materialize`` with those children
wrapped, so the primitives it applies to them dispatch. The package installs
:func:`materialize_full` as :mod:`._base`'s materializer when it is assembled.
"""

from __future__ import annotations

import typing as tp

from jaxcore.implicit import _aval, _base, _fields, _trace

# Kept here too: the name was public to handlers written against earlier releases.
has_implicit_children = _aval.has_implicit_children


def materialize_one_layer(x: _base.ImplicitArray) -> tp.Any:
    """Calls ``x.materialize()``; primitives it applies to nested implicit children dispatch.

    When ``x`` has implicit children, ``materialize`` runs under the implicit
    interpreter with those children wrapped, so ``self.inner * 2`` inside
    ``materialize`` works like any implicit-array operation.
    """
    if _aval.has_implicit_children(x):
        return _trace.call_with_nested_dispatch(type(x).materialize, (x,), {})
    return x.materialize()


def materialize_nested(implicit_arr: tp.Any, full: bool = False) -> tp.Any:
    """Materializes an implicit array one layer, or (``full=True``) until it is dense.

    Args:
        implicit_arr: An implicit array (other values are returned unchanged).
        full: If ``True``, keep materializing while the result is still implicit.

    Returns:
        The materialized value.
    """
    while _fields.is_implicit(implicit_arr):
        implicit_arr = materialize_one_layer(implicit_arr)
        if not full:
            break
    return implicit_arr


def materialize_full(x: tp.Any) -> tp.Any:
    """Materializes ``x`` until it is dense; the materializer the package installs in ``_base``."""
    return materialize_nested(x, full=True)


def materialize_all(values: tp.Sequence[tp.Any]) -> list[tp.Any]:
    """Fully materializes every implicit array in a flat sequence of operands."""
    return [materialize_nested(v, full=True) if _fields.is_implicit(v) else v for v in values]


def default_handler(primitive: tp.Any, *args: tp.Any, **params: tp.Any) -> tp.Any:
    """Applies ``primitive`` to ``args`` as JAX normally would (no implicit dispatch).

    Useful inside a handler to defer to the plain primitive for dense operands.

    Args:
        primitive: A JAX primitive, e.g. ``jax.lax.mul_p``.
        *args: Dense operands.
        **params: The primitive's parameters.

    Returns:
        ``primitive.bind(*args, **params)``.
    """
    return primitive.bind(*args, **params)


def materialize_handler(primitive: tp.Any, *vals: tp.Any, params: dict[str, tp.Any]) -> tp.Any:
    """Fallback handler: materializes every implicit operand, then applies ``primitive``.

    Args:
        primitive: The JAX primitive being applied.
        *vals: Operands, some of which may be implicit arrays.
        params: The primitive's parameters.

    Returns:
        The primitive's result on dense operands.
    """
    return primitive.bind(*materialize_all(vals), **params)

"""The only module allowed to import ``jax._src``: one file to update on a JAX upgrade.

Everything else in jaxcore uses public JAX API. When a private JAX symbol is truly
needed, it gets a small, named wrapper here, and :func:`check_jax_version` pins the
JAX versions these wrappers were written against, so an upgrade fails loudly in
``tests/jax_version_test.py`` instead of silently misbehaving.
"""

from __future__ import annotations

import typing as tp

import jax
from jax._src import api_util as _api_util  # the one sanctioned jax._src import site
from jax._src import config as _config
from jax._src import core as _core
from jax._src import linear_util as _lu
from jax._src import source_info_util as _source_info_util
from jax._src.interpreters import partial_eval as _pe

# Inclusive lower bound, exclusive upper bound of the JAX versions whose internals
# the wrappers below were checked against.
SUPPORTED_JAX_VERSIONS: tuple[tuple[int, ...], tuple[int, ...]] = ((0, 10, 2), (0, 11, 0))


def parse_version(version: str) -> tuple[int, ...]:
    """Parses the numeric release part of a version string (``"0.10.2rc1"`` -> ``(0, 10, 2)``).

    Args:
        version: A PEP 440 style version string.

    Returns:
        The leading dot-separated integers of ``version``.

    Raises:
        ValueError: If ``version`` does not start with an integer.
    """
    parts = []
    for piece in version.split("."):
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):
            break
    if not parts:
        raise ValueError(f"cannot parse a release number from version string {version!r}")
    return tuple(parts)


def check_jax_version(version: str | None = None) -> tuple[int, ...]:
    """Checks that the installed JAX is in the range :data:`SUPPORTED_JAX_VERSIONS`.

    Args:
        version: Version to check; defaults to the installed ``jax.__version__``.

    Returns:
        The parsed version tuple.

    Raises:
        RuntimeError: If the version is outside the supported range; the message names
            the installed version, the supported range and this file.
    """
    version = jax.__version__ if version is None else version
    parsed = parse_version(version)
    low, high = SUPPORTED_JAX_VERSIONS
    if not low <= parsed < high:
        raise RuntimeError(
            f"jaxcore uses JAX internals checked against jax>={'.'.join(map(str, low))},"
            f"<{'.'.join(map(str, high))}, but jax=={version} is installed. Update "
            f"jaxcore/_jax_internals.py (and SUPPORTED_JAX_VERSIONS) for this JAX."
        )
    return parsed


def jax_version_supported(version: str | None = None) -> bool:
    """Returns whether ``version`` (default: the installed JAX) is in the supported range."""
    try:
        check_jax_version(version)
    except (RuntimeError, ValueError):
        return False
    return True


def is_eval_trace(trace: object) -> bool:
    """Returns whether ``trace`` is JAX's eager evaluation trace (no transformation active).

    ``jax.extend.core.take_current_trace()`` gives the trace object; JAX has no public
    predicate for "this is eager evaluation", which decides whether compiling a
    sub-computation pays off.
    """
    return type(trace) is _core.EvalTrace or isinstance(trace, _core.EvalTrace)


def current_trace() -> object:
    """Returns the current trace without swapping it out.

    The public ``jax.extend.core.take_current_trace()`` is a context manager that
    installs the eval trace for its body; reading the trace directly is several times
    cheaper, and the implicit interpreter does it on every intercepted operation.
    """
    return _core.trace_ctx.trace


def equation_contexts(eqn: object) -> tuple[tp.Any, tp.Any]:
    """The two contexts ``jax.core.eval_jaxpr`` evaluates a jaxpr equation in.

    That is the equation's user source information and name stack, and its
    ``JaxprEqnContext`` (compute type, metadata, mesh), so a jaxpr re-evaluated by the
    implicit interpreter stages out equations with the same metadata as JAX's own.
    Use as ``with first, second:``.
    """
    name_stack = _source_info_util.current_name_stack() + eqn.source_info.name_stack
    return (
        _source_info_util.user_context(eqn.source_info.traceback, name_stack=name_stack),
        eqn.ctx.manager,
    )


def trace_context() -> tp.Any:
    """The hashable JAX configuration state that JAX's own tracing caches key on.

    A cache of traced jaxprs must key on it too: a trace made under one setting (say,
    ``jax.default_matmul_precision``) is wrong to replay under another.
    """
    return _config.trace_context()


def lowering_for_export(ctx: tp.Any) -> bool:
    """Whether a lowering rule's ``ctx`` lowers the program for ``jax.export``."""
    return bool(ctx.module_context.lowering_parameters.for_export)


def is_staging_trace(trace: object) -> bool:
    """Returns whether ``trace`` stages primitives into a jaxpr (``jit``, ``make_jaxpr``...)."""
    return type(trace) is _pe.DynamicJaxprTrace


def trace_to_jaxpr(
    fn: tp.Callable[..., tp.Sequence[tp.Any]], in_avals: tp.Sequence[tp.Any], name: str
) -> tuple[tp.Any, list[tp.Any]]:
    """Traces ``fn`` (flat arrays in, a flat list out) at ``in_avals`` into an open jaxpr.

    The public ``jax.make_jaxpr`` takes example values, which cannot carry every
    abstract-value attribute (weak types, shardings, varying manual axes) exactly.

    Returns:
        ``(jaxpr, consts)``, the jaxpr with its constants kept separate.
    """
    debug = _api_util.debug_info(name, fn, tuple(in_avals), {})
    jaxpr, _, consts = _pe.trace_to_jaxpr_dynamic(
        _lu.wrap_init(fn, debug_info=debug), list(in_avals)
    )
    return jaxpr, consts


def inline_jaxpr(
    trace: tp.Any, jaxpr: tp.Any, consts: tp.Sequence[tp.Any], args: tp.Sequence[tp.Any]
) -> list[tp.Any]:
    """Stages ``jaxpr``'s equations into ``trace`` (a staging trace) on ``args``.

    What JAX does for an inline ``jit`` under ``jit``: the equations are copied with
    their recorded output types, without re-running abstract evaluation, under the
    caller's current source information and name stack.
    """
    source_info = _source_info_util.current()
    tracers = [trace.to_jaxpr_tracer(a, source_info) for a in args]
    out = _pe.inline_jaxpr_into_trace(trace, source_info, jaxpr, consts, *tracers)
    return [trace.to_jaxpr_tracer(o, source_info) for o in out]

"""The only module allowed to import ``jax._src``: one file to update on a JAX upgrade.

Everything else in jaxcore uses public JAX API. When a private JAX symbol is truly
needed, it gets a small, named wrapper here, and :func:`check_jax_version` pins the
JAX versions these wrappers were written against, so an upgrade fails loudly in
``tests/jax_version_test.py`` instead of silently misbehaving.
"""

from __future__ import annotations

import jax
from jax._src import core as _core  # the one sanctioned jax._src import site

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
    return isinstance(trace, _core.EvalTrace)

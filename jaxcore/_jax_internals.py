"""The one module that knows about JAX internals and JAX releases: one file per JAX upgrade.

Everything else in jaxcore uses public JAX API. When a private JAX symbol is truly
needed, it gets a small, named wrapper here; where JAX releases differ, the adapter
lives here too, each branch named by the release that needs it (``_JAX_0_11``...).
No other module compares JAX versions.

jaxcore is tested against every JAX release from :data:`OLDEST_TESTED_JAX` to
:data:`NEWEST_TESTED_JAX` (both ends in CI). Another release imports with one
:class:`UntestedJaxWarning` naming that range, never an error.
"""

from __future__ import annotations

import contextlib
import sys
import types
import typing as tp
import warnings

import jax
from jax._src import api_util as _api_util  # the one sanctioned jax._src import site
from jax._src import config as _config
from jax._src import core as _core
from jax._src import linear_util as _lu
from jax._src import mesh as _mesh_lib
from jax._src import source_info_util as _source_info_util
from jax._src.interpreters import partial_eval as _pe

# The tested range, both ends inclusive. The wheels' Requires-Dist
# (jaxcore/tools/BUILD.bazel) and the two hash-locked requirement files
# (build/requirements_lock.txt: Python 3.11 + the oldest, build/requirements_lock_3_13.txt:
# Python 3.13 + the newest) follow these; tests/jax_version_test.py checks they agree.
OLDEST_TESTED_JAX = "0.10.2"
NEWEST_TESTED_JAX = "0.12.0.1"


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


def _next_patch(version: tuple[int, ...]) -> tuple[int, ...]:
    """The first release after every post-release of ``version`` (0.12.0.1 -> 0.12.1)."""
    release = (version + (0, 0, 0))[:3]
    return (*release[:2], release[2] + 1)


# Inclusive lower bound, exclusive upper bound of the JAX versions jaxcore accepts
# without a warning: the tested range, plus post-releases of its newest end
# (0.12.0.2 is a rebuild of 0.12.0, like 0.12.0.1), so the wheels can say
# `jax>=0.10.2,<0.12.1`.
SUPPORTED_JAX_VERSIONS: tuple[tuple[int, ...], tuple[int, ...]] = (
    parse_version(OLDEST_TESTED_JAX),
    _next_patch(parse_version(NEWEST_TESTED_JAX)),
)

# The installed JAX, parsed once; the release branches below test it.
JAX_VERSION: tuple[int, ...] = parse_version(jax.__version__)

# jax 0.11.0 changed three things jaxcore meets:
#   - scan_p's ``num_consts``/``num_carry`` parameters became the flat trees
#     ``ft_in``/``ft_out`` (:func:`scan_operand_counts`);
#   - jit_p's boolean ``inline`` became the ``jax.Inline`` enum, where only
#     ``JAX_EARLY`` inlines while tracing (:func:`jit_inlines_when_traced`);
#   - Pallas' Triton lowering reads the target GPU from the abstract mesh, so lowering
#     for cuda/rocm on a machine without that GPU needs an abstract device
#     (:func:`lowering_target`).
_JAX_0_11 = JAX_VERSION >= (0, 11, 0)


class UntestedJaxWarning(RuntimeWarning):
    """The installed JAX release is outside the range jaxcore is tested against."""


def tested_range() -> str:
    """The tested JAX range in words, e.g. ``"jax 0.10.2 through 0.12.0.1"``."""
    return f"jax {OLDEST_TESTED_JAX} through {NEWEST_TESTED_JAX}"


def requirement(dist: str = "jax") -> str:
    """The PEP 508 requirement on ``dist`` (jax or jaxlib) matching the tested range."""
    low, high = SUPPORTED_JAX_VERSIONS
    return f"{dist}>={'.'.join(map(str, low))},<{'.'.join(map(str, high))}"


def check_jax_version(version: str | None = None) -> tuple[int, ...]:
    """Checks that a JAX version is in the range :data:`SUPPORTED_JAX_VERSIONS`.

    Args:
        version: Version to check; defaults to the installed ``jax.__version__``.

    Returns:
        The parsed version tuple.

    Raises:
        RuntimeError: If the version is outside the supported range; the message names
            the installed version, the tested range and this file.
        ValueError: If ``version`` has no release number.
    """
    version = jax.__version__ if version is None else version
    parsed = parse_version(version)
    low, high = SUPPORTED_JAX_VERSIONS
    if not low <= parsed < high:
        raise RuntimeError(
            f"jaxcore is tested with {tested_range()} ({requirement()}), but "
            f"jax=={version} is installed; it may work, but nothing checked it. Install a "
            f"jax in that range, or update jaxcore/_jax_internals.py (and its tested range) "
            f"for this JAX."
        )
    return parsed


def jax_version_supported(version: str | None = None) -> bool:
    """Returns whether ``version`` (default: the installed JAX) is in the supported range."""
    try:
        check_jax_version(version)
    except (RuntimeError, ValueError):
        return False
    return True


def version_report() -> str:
    """One line for ``python -m jaxcore``: the JAX jaxcore runs on, and whether it is tested."""
    try:
        import jaxlib  # noqa: PLC0415  (only for its version)

        jaxlib_version = getattr(jaxlib, "__version__", None) or jaxlib.version.__version__
    except (ImportError, AttributeError):
        jaxlib_version = "unknown"
    where = "inside" if jax_version_supported() else "OUTSIDE"
    return (
        f"jax {jax.__version__}, jaxlib {jaxlib_version}: {where} the tested range "
        f"({tested_range()})"
    )


def _warn_if_untested() -> None:
    """Warns once (this module is imported once) when the installed JAX is not tested."""
    try:
        check_jax_version()
    except (RuntimeError, ValueError) as e:
        warnings.warn(str(e), UntestedJaxWarning, stacklevel=3)


_warn_if_untested()


# --- Adapters for JAX releases --------------------------------------------------------------


def scan_operand_counts(params: tp.Mapping[str, tp.Any]) -> tuple[int, int]:
    """``(num_consts, num_carry)`` of a ``scan`` equation's parameters.

    Its operands are ``num_consts`` constants, ``num_carry`` carries, then the scanned
    inputs.
    """
    if _JAX_0_11:
        # jax 0.11.0: the operands' layout is the flat tree ``ft_in`` = (consts, carry, xs).
        consts, carry, _ = params["ft_in"].unpack()
        return len(consts), len(carry)
    return params["num_consts"], params["num_carry"]


if _JAX_0_11:
    _JAX_EARLY = jax.Inline.JAX_EARLY  # type: ignore[attr-defined]  # jax >= 0.11 only

    def jit_inlines_when_traced(inline: tp.Any) -> bool:
        """Whether a ``jit`` equation's ``inline`` parameter inlines it while tracing.

        jax 0.11.0: ``inline`` is a ``jax.Inline``; only ``JAX_EARLY`` (what jax.numpy's own
        jits use) inlines while tracing, ``jax.jit(inline=True)`` now means ``JAX_LATE``.
        """
        return inline is _JAX_EARLY

else:

    def jit_inlines_when_traced(inline: tp.Any) -> bool:
        """Whether a ``jit`` equation's ``inline`` parameter inlines it while tracing."""
        return bool(inline)


def jit_inline_option(inline: bool) -> tp.Any:
    """The ``jax.jit(inline=...)`` value that inlines into enclosing jaxprs while tracing."""
    if _JAX_0_11 and inline:
        # jax 0.11.0: ``inline=True`` became JAX_LATE (a jit equation, inlined when lowering).
        return jax.Inline.JAX_EARLY  # type: ignore[attr-defined]  # jax >= 0.11 only
    return inline


# Devices that ``jax.export`` lowers Pallas kernels for where the machine has none of them
# (jax >= 0.11 asks for one): the GPUs this project benchmarks on, and AMD's MI300.
_ABSTRACT_DEVICE_KINDS = {"cuda": "NVIDIA H100", "rocm": "gfx942"}


def lowering_target(platform: str) -> tp.ContextManager[None]:
    """A context in which ``jax.export(..., platforms=[platform])`` lowers on any machine.

    jax 0.10 lowers Pallas' Triton kernels for cuda/rocm without a GPU (assuming
    compute capability 9.0); from jax 0.11.0 the lowering reads the target GPU from the
    abstract mesh (``jax.sharding.use_abstract_mesh``) when no GPU is attached, so this
    installs an abstract H100 (cuda) or MI300 (rocm). Elsewhere, and for other
    platforms, it does nothing.

    Args:
        platform: The platform exported for: ``cuda``, ``rocm``, ``tpu`` or ``cpu``.
    """
    kind = _ABSTRACT_DEVICE_KINDS.get(platform)
    if not _JAX_0_11 or kind is None or _has_devices(platform):
        return contextlib.nullcontext()
    device = jax.sharding.AbstractDevice(device_kind=kind, num_cores=None, platform=platform)
    mesh = jax.sharding.AbstractMesh((), (), abstract_device=device)
    return jax.sharding.use_abstract_mesh(mesh)


def lowering_context_key() -> tp.Hashable:
    """What a cache of traced kernel jaxprs must key on besides shapes, to lower correctly.

    From jax 0.11.0 a jaxpr records the abstract mesh it was traced under, and Pallas'
    Triton lowering targets that mesh's abstract device (see :func:`lowering_target`): a
    jaxpr traced outside :func:`lowering_target` must not be reused inside it. jax 0.10
    lowers the same jaxpr for any target.
    """
    if _JAX_0_11:
        return jax.sharding.get_abstract_mesh()
    return None


def _has_devices(platform: str) -> bool:
    try:
        return bool(jax.devices(platform))
    except RuntimeError:
        return False


# --- Wrappers around private JAX symbols --------------------------------------------------


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


def equation_contexts(eqn: _core.JaxprEqn) -> tuple[tp.Any, tp.Any]:
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


def classic_context_mesh() -> tp.Any:
    """The mesh of JAX's classic ``with mesh:`` block, or ``None`` outside one.

    JAX deprecated ``with mesh:`` in favor of ``jax.set_mesh`` but still installs the mesh
    in its thread resources, where ``jax.sharding.get_mesh`` does not look; code written for
    Haliax uses the classic form. Releases without the thread resources give ``None``.
    """
    resources = getattr(_mesh_lib, "thread_resources", None)
    mesh = None if resources is None else getattr(resources.env, "physical_mesh", None)
    return None if mesh is None or mesh.empty else mesh


def _store_occupied(store: tp.Any) -> bool:
    try:
        _ = store.val
    except _lu.StoreException:  # an empty store
        return False
    return True


def forget_function_output_type(subfuns: tp.Sequence[tp.Any]) -> None:
    """Lets a ``custom_jvp``/``custom_vjp`` call read its output type from its rule.

    Reaches into ``WrappedFun.stores`` (linear_util), a JAX internal.

    The caller (``custom_jvp.__call__``) reads the output structure from whichever of
    the function and its rule ran, and both must not have. Staging the call traced
    the function; under an eager ``jvp``/``grad`` the rule ran too, from the staged
    equation. Then the function's record is dropped: it is never run again (the
    staged jaxpr stands for it), whereas the rule's record is read again when the
    staged equation is differentiated once more.
    """
    fun, *rules = subfuns
    if any(_store_occupied(st) for rule in rules for st in rule.stores if st is not None):
        for st in fun.stores:
            if st is not None:
                st.reset()


class _WantsDevices:
    """Stands for a primitive in JAX's set of primitives that need the program's devices
    during lowering: equal to it only where the program has devices (``device_assignment``
    in ``pxla.lower_sharding_computation``). JAX refuses a program lowered without devices
    (``jax.export`` under an abstract mesh) when it holds such a primitive; ours lower
    without them there (on no device to split over), so they must not count."""

    __slots__ = ("prim",)

    def __init__(self, prim: tp.Any):
        self.prim = prim

    def __hash__(self) -> int:
        return hash(self.prim)

    def __eq__(self, other: object) -> bool:
        return other is self.prim and _lowering_has_devices()


def _lowering_has_devices() -> bool:
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "lower_sharding_computation":
            return frame.f_locals.get("device_assignment", ()) is not None
        frame = frame.f_back
    return True


def request_devices_during_lowering(prim: tp.Any) -> None:
    """Makes ``jit`` hand ``prim``'s lowering rule the program's devices where it has them
    (as it does for ``custom_partitioning``, which a rule that lowers through it needs);
    a program lowered without devices still lowers (see :class:`_WantsDevices`).

    A JAX without that set (it is private) leaves ``prim`` as it is. From jax 0.11 its
    lowering then sees no devices, `lowering_is_partitioned` is false, and a program split
    over devices calls the kernel on gathered operands: correct, without the per-shard rule
    (jax 0.10 hands every lowering its devices).
    """
    try:
        from jax._src import dispatch as _dispatch

        wanting = _dispatch.prim_requires_devices_during_lowering
    except (ImportError, AttributeError):
        return
    wants: tp.Any = _WantsDevices(prim)
    wanting.add(wants)


def lowering_is_partitioned(ctx: tp.Any) -> bool:
    """Whether a lowering rule's ``ctx`` lowers a program that XLA's SPMD partitioner splits
    over several devices: not a one-device program, not the body of a ``shard_map`` that is
    manual over every mesh axis, not one lowered without its devices (``jax.export``)."""
    axis_context = ctx.module_context.axis_context
    if hasattr(axis_context, "num_devices"):  # ShardingContext
        return axis_context.num_devices > 1 and axis_context.device_assignment is not None
    mesh = getattr(axis_context, "mesh", None)  # SPMDAxisContext
    if mesh is None or mesh.size <= 1:
        return False
    return set(getattr(axis_context, "manual_axes", ())) != set(mesh.axis_names)

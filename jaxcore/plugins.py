"""Backend plugin discovery: entry-point group ``jaxcore_plugins`` plus the source tree.

A backend plugin is a Python package that exposes ``__version__`` and
``initialize(platforms=...)``; ``initialize`` registers the plugin's kernels with
:mod:`jaxcore.kernels` for each platform it is asked to serve. Plugins are found in two
places:

* installed wheels announce themselves in the entry-point group ``jaxcore_plugins``
  (entry-point name = the platform, value = the module, e.g. ``cuda = jaxcore_cuda12``);
* when running from the repository (Bazel or pytest, no wheels installed) the source
  packages ``jaxcore_gpu``, ``jaxcore_tpu`` and ``jaxcore_cpu`` are picked up if
  importable, for the platforms no entry-point plugin already serves (a wheel that
  installs the same package, like ``jaxcore-cpu``, is listed once, as the wheel).

A plugin whose version differs from jaxcore's, or that fails to import or initialize
(including by raising ``SystemExit``), produces one :class:`PluginWarning` naming the
package and the versions, and is skipped: the portable reference kernels keep working.
Loading is transactional: kernels a plugin registered before it failed are unregistered
(replaced ones come back), so a skipped plugin leaves no trace. ``KeyboardInterrupt``
still propagates, after that rollback. An installed distribution whose
``entry_points.txt`` cannot be parsed (any distribution, not only a plugin) is listed as
skipped with the parse error, instead of breaking ``import jaxcore``. A plugin whose ``initialize`` raises
:class:`PluginUnavailable` (e.g. the CPU plugin from a checkout whose native library was
not built) is skipped quietly, its message kept as the reason. The environment variable
``JAXCORE_PLUGINS`` selects what loads: unset, empty or ``all`` loads everything,
``none`` loads nothing, and a comma-separated list (``cuda,tpu``) loads only plugins for
those platforms (a plugin name such as ``gpu`` selects all of that plugin's platforms).
:func:`info` reports what was found, what loaded and what was skipped, and why, plus a
loaded plugin's own one-line ``describe()`` when it has one.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.metadata
import importlib.util
import os
import pathlib
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from jaxcore._version import __version__ as _JAXCORE_VERSION

__all__ = [
    "ENTRY_POINT_GROUP",
    "ENV_VAR",
    "PluginInfo",
    "PluginStatus",
    "PluginUnavailable",
    "PluginWarning",
    "info",
    "load_plugins",
    "plugin_imported",
]

ENTRY_POINT_GROUP = "jaxcore_plugins"
"""The entry-point group plugin wheels register under."""

ENV_VAR = "JAXCORE_PLUGINS"
"""Environment variable selecting which plugins load (``none``, ``all`` or a list)."""

# Plugins that live in the repository; loaded from source when importable.
# Maps the name shown in `info()` to the importable package name.
_SOURCE_PLUGINS = {"gpu": "jaxcore_gpu", "tpu": "jaxcore_tpu", "cpu": "jaxcore_cpu"}

_KNOWN_PLATFORMS = frozenset({"cpu", "cuda", "rocm", "tpu"})


class PluginWarning(UserWarning):
    """A jaxcore plugin was skipped (wrong version, import error, failed initialize)."""


class PluginUnavailable(Exception):
    """Raised by a plugin's ``initialize`` to be skipped without a warning.

    For an expected absence, not a fault: e.g. the CPU plugin running from a checkout
    whose native library has not been built. The message becomes the skip reason shown
    by :func:`info`.
    """


@dataclasses.dataclass(frozen=True)
class PluginStatus:
    """What happened to one discovered plugin.

    Attributes:
      name: entry-point name (``cuda``, ``rocm``, ``tpu``) or source-tree name
        (``gpu``, ``tpu``).
      module: the importable module name (``jaxcore_cuda12``, ``jaxcore_gpu``, ...).
      origin: ``"entry_point"`` for an installed wheel, ``"source"`` for the repository,
        ``"metadata"`` for an installed distribution whose entry points cannot be read.
      distribution: ``"<dist name> <version>"`` of the wheel, or ``None`` from source.
      version: the plugin's ``__version__`` (or its distribution version when the
        module was never imported), ``None`` when unknown.
      platforms: platforms the plugin registered kernels for (empty unless loaded).
      loaded: whether ``initialize`` ran successfully.
      reason: why the plugin was skipped (``None`` when loaded).
      detail: what the loaded plugin says about itself through its optional
        ``describe()`` (e.g. the CPU plugin's instruction set), else ``None``.
    """

    name: str
    module: str
    origin: str
    distribution: str | None
    version: str | None
    platforms: tuple[str, ...]
    loaded: bool
    reason: str | None
    detail: str | None = None


@dataclasses.dataclass(frozen=True)
class PluginInfo:
    """Result of plugin discovery, as returned by :func:`info`.

    Attributes:
      jaxcore_version: the version every plugin must match.
      selection: the effective ``JAXCORE_PLUGINS`` value (``"all"`` when unset).
      plugins: one :class:`PluginStatus` per plugin found, in discovery order.
    """

    jaxcore_version: str
    selection: str
    plugins: tuple[PluginStatus, ...]

    @property
    def loaded(self) -> tuple[PluginStatus, ...]:
        """The plugins whose ``initialize`` ran."""
        return tuple(p for p in self.plugins if p.loaded)

    @property
    def skipped(self) -> tuple[PluginStatus, ...]:
        """The plugins that were found but not loaded."""
        return tuple(p for p in self.plugins if not p.loaded)

    @property
    def platforms(self) -> tuple[str, ...]:
        """Every platform some loaded plugin registered kernels for."""
        out: list[str] = []
        for p in self.loaded:
            out.extend(x for x in p.platforms if x not in out)
        return tuple(out)

    def format(self) -> str:
        """A human-readable, one-line-per-plugin report."""
        lines = [f"jaxcore {self.jaxcore_version}; {ENV_VAR}={self.selection}"]
        if not self.plugins:
            lines.append("  no plugins found")
        for p in self.plugins:
            where = p.distribution or f"{p.origin} package"
            if p.loaded:
                state = f"loaded for {', '.join(p.platforms)}"
                if p.detail:
                    state += f" ({p.detail})"
            else:
                state = f"skipped: {p.reason}"
            lines.append(f"  {p.name} ({p.module}, {where}): {state}")
        return "\n".join(lines)


_DEFERRED_REASON = "still being imported; it initializes when its import completes"

_lock = threading.RLock()  # re-entrant: a plugin's initialize may call info()
_info: PluginInfo | None = None
# Plugins found half-imported (imported by user code before jaxcore), by module name,
# with the selection in force when they were found.
_deferred: dict[str, frozenset[str] | None] = {}


def _is_initializing(module: ModuleType) -> bool:
    """Whether the module's body is still executing (CPython's import system marks such
    modules with ``__spec__._initializing``; it is how it reports circular imports)."""
    spec = getattr(module, "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def plugin_imported(module_name: str) -> None:
    """Completes the loading of a plugin that was imported before jaxcore.

    A plugin package calls this as the last line of its ``__init__``. When user code
    imports the plugin first, the plugin's import of jaxcore runs discovery while the
    plugin is still half-initialized; discovery defers it, and this call then checks
    its version and runs its ``initialize``. For a plugin loaded normally it does
    nothing.

    Args:
      module_name: the plugin package's ``__name__``.
    """
    global _info
    with _lock:
        if _info is None or module_name not in _deferred:
            return
        selection = _deferred.pop(module_name)
        module = sys.modules.get(module_name)
        statuses = list(_info.plugins)
        for i, status in enumerate(statuses):
            if status.module == module_name and status.reason == _DEFERRED_REASON:
                if module is None:
                    statuses[i] = _skip("import did not complete", status, warn=True)
                else:
                    statuses[i] = _transaction(
                        functools.partial(
                            _check_and_initialize, status, module, selection, set(_info.platforms)
                        )
                    )
                break
        _info = dataclasses.replace(_info, plugins=tuple(statuses))


def info() -> PluginInfo:
    """Reports the installed plugins, which loaded and which were skipped, and why.

    Runs discovery first if :func:`load_plugins` has not run yet.

    Returns:
      A :class:`PluginInfo`; ``print(jaxcore.plugins.info().format())`` for a summary.
    """
    return _info if _info is not None else load_plugins()


def load_plugins(*, force: bool = False) -> PluginInfo:
    """Discovers, version-checks and initializes the backend plugins.

    Called once by ``import jaxcore``. Later calls return the first result unless
    ``force`` is true. Never raises for a bad plugin: it warns once and skips it.

    Args:
      force: run discovery again (re-reading ``JAXCORE_PLUGINS`` and the installed
        entry points), e.g. after installing a plugin into a running process. It only
        adds: kernels that plugins registered in an earlier discovery stay registered
        even when the new selection skips those plugins (drop them with
        ``jaxcore.kernels.unregister_kernel``).

    Returns:
      The :class:`PluginInfo` describing what was found and loaded.
    """
    global _info
    with _lock:
        if _info is not None and not force:
            return _info
        _deferred.clear()
        selection_text, selection = _parse_selection(os.environ.get(ENV_VAR))
        statuses: list[PluginStatus] = []
        served: set[str] = set()
        entry_points, broken = _entry_points()
        for ep in entry_points:
            status = _load_entry_point(ep, selection, served)
            statuses.append(status)
            served.update(status.platforms)
        installed = {s.module for s in statuses}
        statuses.extend(broken)
        for name, module_name in _SOURCE_PLUGINS.items():
            if module_name in installed:  # a wheel of the same package (jaxcore_cpu, jaxcore_tpu)
                continue
            source_status = _load_source_plugin(name, module_name, selection, served)
            if source_status is not None:
                statuses.append(source_status)
                served.update(source_status.platforms)
        _warn_unknown_selection(selection, statuses)
        _info = PluginInfo(_JAXCORE_VERSION, selection_text, tuple(statuses))
        return _info


def _parse_selection(raw: str | None) -> tuple[str, frozenset[str] | None]:
    """Parses ``JAXCORE_PLUGINS``: ``None`` means all, an empty set means none."""
    text = (raw or "").strip().lower()
    if text in ("", "all"):
        return "all", None
    if text == "none":
        return "none", frozenset()
    tokens = frozenset(t.strip() for t in text.split(",") if t.strip())
    if "none" in tokens or "all" in tokens:
        warnings.warn(
            f"{ENV_VAR}={raw!r}: 'none' and 'all' cannot be combined with other names; "
            "loading no plugins.",
            PluginWarning,
            stacklevel=3,
        )
        return text, frozenset()
    return ",".join(sorted(tokens)), tokens


def _warn_unknown_selection(
    selection: frozenset[str] | None, statuses: Sequence[PluginStatus]
) -> None:
    """Warns about ``JAXCORE_PLUGINS`` names that match no platform and no plugin."""
    if not selection:
        return
    known = _KNOWN_PLATFORMS | set(_SOURCE_PLUGINS) | {s.name for s in statuses}
    unknown = sorted(selection - known)
    if unknown:
        warnings.warn(
            f"{ENV_VAR} names {unknown}, which match no platform and no plugin found; "
            f"known names: {sorted(known)}",
            PluginWarning,
            stacklevel=3,
        )


def _entry_points() -> tuple[list[importlib.metadata.EntryPoint], list[PluginStatus]]:
    """The installed entry points of group ``jaxcore_plugins``, deduplicated by module.

    Returns:
      ``(entry points, skipped statuses)``: one skipped status per installed distribution
      whose ``entry_points.txt`` cannot be parsed (it warns only when that file mentions
      ``jaxcore_plugins``; another package's broken metadata is merely listed).
    """
    try:
        found = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
        broken: list[PluginStatus] = []
    except Exception:  # noqa: BLE001 - some distribution's metadata is broken: find which
        found, broken = _entry_points_one_by_one()
    unique: list[importlib.metadata.EntryPoint] = []
    seen: set[tuple[str, str]] = set()
    for ep in found:
        key = (ep.name, ep.value)
        if key not in seen:  # the same dist can be on sys.path twice
            seen.add(key)
            unique.append(ep)
    return unique, broken


def _entry_points_one_by_one() -> tuple[list[importlib.metadata.EntryPoint], list[PluginStatus]]:
    """`_entry_points` the slow way, one distribution at a time, isolating broken ones."""
    found: list[importlib.metadata.EntryPoint] = []
    broken: list[PluginStatus] = []
    seen: set[str] = set()
    for dist in importlib.metadata.distributions():
        try:
            name, version = dist.metadata["Name"], dist.version
        except Exception:  # noqa: BLE001 - unreadable METADATA: still look at its entry points
            name, version = None, None
        key = (name or "").lower().replace("-", "_").replace(".", "_")
        if name and key in seen:  # first on sys.path wins, as in importlib.metadata
            continue
        seen.add(key)
        try:
            found.extend(ep for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP)
        except Exception as e:  # noqa: BLE001 - a broken distribution must not break jaxcore
            where = getattr(dist, "_path", None)
            file = pathlib.Path(where, "entry_points.txt") if where else "entry_points.txt"
            status = PluginStatus(
                name=name or "?",
                module="entry_points.txt",
                origin="metadata",
                distribution=f"{name or '?'} {version or '?'}",
                version=version,
                platforms=(),
                loaded=False,
                reason=None,
            )
            reason = (
                f"cannot parse {file} ({type(e).__name__}: {e}); no plugin this distribution "
                "may announce is loaded; fix or reinstall it"
            )
            broken.append(_skip(reason, status, warn=_mentions_group(file)))
    return found, broken


def _mentions_group(file: pathlib.Path | str) -> bool:
    """Whether an entry-points file names the ``jaxcore_plugins`` group (False if unreadable)."""
    try:
        return ENTRY_POINT_GROUP.encode() in pathlib.Path(file).read_bytes()
    except OSError:
        return False


def _wanted(
    name: str, platforms: Sequence[str], selection: frozenset[str] | None
) -> tuple[str, ...]:
    """The subset of ``platforms`` the selection asks for (all when the name is listed)."""
    if selection is None or name in selection:
        return tuple(platforms)
    return tuple(p for p in platforms if p in selection)


def _skip(reason: str, status: PluginStatus, *, warn: bool) -> PluginStatus:
    if warn:
        warnings.warn(
            f"jaxcore plugin {status.module!r} ({status.distribution or status.origin}) "
            f"skipped: {reason}",
            PluginWarning,
            stacklevel=4,
        )
    return dataclasses.replace(status, loaded=False, reason=reason, platforms=(), detail=None)


def _load_entry_point(
    ep: importlib.metadata.EntryPoint,
    selection: frozenset[str] | None,
    served: set[str],
) -> PluginStatus:
    """Checks and loads one entry-point plugin (platform = entry-point name)."""
    dist = getattr(ep, "dist", None)
    dist_text = f"{dist.name} {dist.version}" if dist is not None else None
    module_name = ep.value.split(":")[0].strip()
    status = PluginStatus(
        name=ep.name,
        module=module_name,
        origin="entry_point",
        distribution=dist_text,
        version=dist.version if dist is not None else None,
        platforms=(),
        loaded=False,
        reason=None,
    )
    # Selection first: a plugin the user switched off is skipped quietly, even a mismatched one.
    if not _wanted(ep.name, (ep.name,), selection):
        return _skip(f"not selected by {ENV_VAR}", status, warn=False)
    if dist is not None and dist.version != _JAXCORE_VERSION:
        return _skip(
            f"distribution {dist.name} is version {dist.version} but jaxcore is "
            f"{_JAXCORE_VERSION}; install {dist.name}=={_JAXCORE_VERSION}",
            status,
            warn=True,
        )
    return _import_and_initialize(status, ep.load, selection, served)


def _is_namespace_only(spec) -> bool:
    """A directory without ``__init__.py`` (e.g. an empty checkout folder)."""
    return spec.origin is None and spec.submodule_search_locations is not None


def _load_source_plugin(
    name: str,
    module_name: str,
    selection: frozenset[str] | None,
    served: set[str],
) -> PluginStatus | None:
    """Loads a repository plugin package if importable; ``None`` when it is absent."""
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        spec = None
    if spec is None or _is_namespace_only(spec):
        return None
    status = PluginStatus(
        name=name,
        module=module_name,
        origin="source",
        distribution=None,
        version=None,
        platforms=(),
        loaded=False,
        reason=None,
    )
    if selection is not None and not selection:
        return _skip(f"not selected by {ENV_VAR}", status, warn=False)
    return _import_and_initialize(
        status, lambda: importlib.import_module(module_name), selection, served
    )


def _transaction(attempt: Callable[[], PluginStatus]) -> PluginStatus:
    """Runs ``attempt``; unless it loaded the plugin, undoes the kernels it registered.

    A deferred plugin (still importing) keeps what its import registered so far: its load
    completes in `plugin_imported`, itself a transaction. ``KeyboardInterrupt`` (and any
    other exception ``attempt`` lets through) rolls back too, then propagates.
    """
    from jaxcore.kernels import _registry  # here: `import jaxcore` without plugins stays light

    saved = _registry.snapshot()
    try:
        status = attempt()
    except BaseException:
        _registry.restore(saved)
        raise
    if not status.loaded and status.reason != _DEFERRED_REASON:
        _registry.restore(saved)
    return status


# What a plugin may raise and still be skipped: every error, and SystemExit (a plugin must
# not end the interpreter). KeyboardInterrupt and GeneratorExit propagate.
_PLUGIN_ERRORS = (Exception, SystemExit)


def _import_and_initialize(
    status: PluginStatus,
    load: Callable[[], Any],
    selection: frozenset[str] | None,
    served: set[str],
) -> PluginStatus:
    """Imports a plugin, checks its version and runs ``initialize`` for its platforms."""
    return _transaction(
        functools.partial(_import_and_initialize_once, status, load, selection, served)
    )


def _import_and_initialize_once(
    status: PluginStatus,
    load: Callable[[], Any],
    selection: frozenset[str] | None,
    served: set[str],
) -> PluginStatus:
    try:
        module = load()
    except _PLUGIN_ERRORS as e:  # a broken plugin must never break jaxcore
        return _skip(f"import failed: {type(e).__name__}: {e}", status, warn=True)
    if not isinstance(module, ModuleType):
        return _skip(
            f"entry point does not name a module (got {type(module).__name__})",
            status,
            warn=True,
        )
    if _is_initializing(module):
        # User code imported the plugin before jaxcore: the plugin's own import led
        # here, so it is half-initialized. It calls `plugin_imported` when complete.
        _deferred[module.__name__] = selection
        return dataclasses.replace(status, reason=_DEFERRED_REASON, loaded=False, platforms=())
    return _check_and_initialize(status, module, selection, served)


def _check_and_initialize(
    status: PluginStatus,
    module: ModuleType,
    selection: frozenset[str] | None,
    served: set[str],
) -> PluginStatus:
    """Checks an imported plugin's version and runs its ``initialize``."""
    version = getattr(module, "__version__", None)
    status = dataclasses.replace(status, version=version)
    if version is None:
        return _skip(
            f"module has no __version__ (it must equal jaxcore's version {_JAXCORE_VERSION})",
            status,
            warn=True,
        )
    if version != _JAXCORE_VERSION:
        return _skip(
            f"plugin version {version} does not match jaxcore version {_JAXCORE_VERSION}",
            status,
            warn=True,
        )
    initialize = getattr(module, "initialize", None)
    if not callable(initialize):
        return _skip("module has no initialize() function", status, warn=True)
    declared = _declared_platforms(module, status)
    unknown = [p for p in declared if p not in _KNOWN_PLATFORMS]
    if unknown:
        return _skip(
            f"declares unknown platform(s) {unknown}; known: {sorted(_KNOWN_PLATFORMS)}",
            status,
            warn=True,
        )
    platforms = _wanted(status.name, declared, selection)
    if not platforms:
        return _skip(f"not selected by {ENV_VAR}", status, warn=False)
    fresh = tuple(p for p in platforms if p not in served)
    if not fresh:
        return _skip(
            f"platform(s) {', '.join(platforms)} already served by an installed plugin",
            status,
            warn=False,
        )
    try:
        initialize(platforms=fresh)
    except PluginUnavailable as e:
        return _skip(f"unavailable: {e}", status, warn=False)
    except _PLUGIN_ERRORS as e:  # see above; the caller's transaction unregisters its kernels
        return _skip(f"initialize() failed: {type(e).__name__}: {e}", status, warn=True)
    return dataclasses.replace(
        status, platforms=fresh, loaded=True, reason=None, detail=_describe(module)
    )


def _describe(module: ModuleType) -> str | None:
    """A loaded plugin's optional ``describe()`` line; never raises."""
    describe = getattr(module, "describe", None)
    if not callable(describe):
        return None
    try:
        return str(describe())
    except _PLUGIN_ERRORS as e:  # a report must not break loading
        return f"describe() failed: {type(e).__name__}: {e}"


def _declared_platforms(module: ModuleType, status: PluginStatus) -> tuple[str, ...]:
    """The platforms a plugin serves: its ``PLATFORMS``, else its entry-point name."""
    platforms = getattr(module, "PLATFORMS", None)
    if platforms is None:
        return (status.name,)
    return tuple(platforms)

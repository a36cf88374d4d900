"""The kernel registry: implementations keyed by (kernel name, platform).

Plugins (`jaxcore_gpu`, `jaxcore_tpu`) register their fused kernels here at import; the
dispatchers in this package read the registry at trace time, so a kernel registered before
a function is traced is used by that trace. Every change bumps
:mod:`jaxcore._registry_version`, so jaxcore's own trace caches do not replay a trace
made with the old kernels.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from jaxcore import _registry_version

PLATFORMS: tuple[str, ...] = ("cpu", "cuda", "rocm", "tpu")

_lock = threading.Lock()
# name -> {platform: impl}; dicts keep registration order, which "first registered" uses.
_registry: dict[str, dict[str, Callable]] = {}


def _check_name_platform(name: str, platform: str) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"kernel name must be a non-empty string, got {name!r}")
    if platform not in PLATFORMS:
        raise ValueError(
            f"unknown platform {platform!r} for kernel {name!r}; expected one of {PLATFORMS}"
        )


def register_kernel(name: str, platform: str, impl: Callable) -> None:
    """Registers ``impl`` as kernel ``name`` for ``platform``, replacing any previous one.

    Args:
      name: kernel name, e.g. ``"quantized_matmul"``.
      platform: one of ``"cpu"``, ``"cuda"``, ``"rocm"``, ``"tpu"``.
      impl: the implementation. For ``"quantized_matmul"`` its signature is
        ``impl(x2d, qvalue, scale, *, fmt, block_size, out_dtype, interpret=False) -> (M, N)``.

    Raises:
      ValueError: for an empty name or an unknown platform.
      TypeError: if ``impl`` is not callable.
    """
    _check_name_platform(name, platform)
    if not callable(impl):
        raise TypeError(f"impl for kernel {name!r} on {platform!r} must be callable, got {impl!r}")
    with _lock:
        _registry.setdefault(name, {})[platform] = impl
        _registry_version.bump()


def unregister_kernel(name: str, platform: str) -> Callable:
    """Removes and returns the implementation of ``name`` for ``platform``.

    Raises:
      KeyError: if none is registered.
    """
    _check_name_platform(name, platform)
    with _lock:
        impls = _registry.get(name, {})
        if platform not in impls:
            raise KeyError(f"no kernel {name!r} registered for platform {platform!r}")
        impl = impls.pop(platform)
        _registry_version.bump()
        return impl


def registered_kernels(name: str) -> dict[str, Callable]:
    """Returns a copy of ``{platform: impl}`` for kernel ``name``, in registration order."""
    with _lock:
        return dict(_registry.get(name, {}))


def snapshot() -> dict[str, dict[str, Callable]]:
    """A copy of every registration, for `restore`.

    `jaxcore.plugins` takes one before a plugin's import and ``initialize`` and restores it
    when the plugin fails, so a failed plugin leaves no kernel behind.
    """
    with _lock:
        return {name: dict(impls) for name, impls in _registry.items()}


def restore(saved: dict[str, dict[str, Callable]]) -> None:
    """Puts the registry back to `snapshot` ``saved``: later registrations go, replaced ones return.

    Bumps the registry version only when something changed.
    """
    with _lock:
        current = {name: impls for name, impls in _registry.items() if impls}
        if current == {name: impls for name, impls in saved.items() if impls}:
            return
        _registry.clear()
        _registry.update({name: dict(impls) for name, impls in saved.items()})
        _registry_version.bump()

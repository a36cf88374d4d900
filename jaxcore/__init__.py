"""jaxcore: pytree dataclasses, implicit and quantized arrays, named axes, fused kernels.

Submodules are imported lazily (``jaxcore.named``, ``jaxcore.quant``, ...) so that
``import jaxcore`` stays cheap; installed backend plugins are discovered at import.
"""

import importlib as _importlib

from jaxcore._version import __version__ as __version__

_SUBMODULES = frozenset(
    {"implicit", "io", "kernels", "launch", "lens", "named", "plugins", "quant", "tree", "utils"}
)


__all__ = [
    "__version__",
    "implicit",
    "io",
    "kernels",
    "launch",
    "lens",
    "named",
    "plugins",
    "quant",
    "tree",
    "utils",
]


def __getattr__(name):
    if name in _SUBMODULES:
        return _importlib.import_module(f"jaxcore.{name}")
    raise AttributeError(f"module 'jaxcore' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _SUBMODULES)


from jaxcore import plugins as _plugins  # noqa: E402 - after the environment set-up above

_plugins.load_plugins()

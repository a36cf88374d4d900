"""Build configuration of the GPU plugin, as seen from the source tree.

The wheel build replaces this file with literal values: the CUDA wheel (package
``jaxcore_cuda12``) gets ``PLATFORMS = ("cuda",)``, the ROCm wheel (``jaxcore_rocm6``)
``PLATFORMS = ("rocm",)``, each with its ``VERSION`` and ``DIST_NAME``.
"""

from jaxcore._version import __version__ as _jaxcore_version

PLATFORMS = ("cuda", "rocm")
"""Platforms this package registers its kernels for."""

VERSION = _jaxcore_version
"""The plugin's version; jaxcore loads the plugin only if it equals its own."""

DIST_NAME = None
"""The wheel's distribution name, or None when running from source."""

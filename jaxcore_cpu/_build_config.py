"""Build configuration of the CPU plugin, as seen from the source tree.

The wheel build replaces this file with literal values: the ``jaxcore-cpu`` wheel gets
``PLATFORMS = ("cpu",)``, its ``VERSION`` and ``DIST_NAME = "jaxcore-cpu"``.
"""

from jaxcore._version import __version__ as _jaxcore_version

PLATFORMS = ("cpu",)
"""Platforms this package registers its kernels for."""

VERSION = _jaxcore_version
"""The plugin's version; jaxcore loads the plugin only if it equals its own."""

DIST_NAME = None
"""The wheel's distribution name, or None when running from source."""

"""Build configuration of the TPU plugin, as seen from the source tree.

The wheel build replaces this file with literal values (``PLATFORMS = ("tpu",)``,
``VERSION``, ``DIST_NAME = "jaxcore-tpu"``).
"""

from jaxcore._version import __version__ as _jaxcore_version

PLATFORMS = ("tpu",)
"""Platforms this package registers its kernels for."""

VERSION = _jaxcore_version
"""The plugin's version; jaxcore loads the plugin only if it equals its own."""

DIST_NAME = None
"""The wheel's distribution name, or None when running from source."""

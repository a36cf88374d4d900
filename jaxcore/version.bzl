"""jaxcore's version for Bazel rules; must equal jaxcore/_version.py (the wheel build checks)."""

JAXCORE_VERSION = "0.1.0"

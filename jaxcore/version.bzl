"""jaxcore's version for Bazel rules; must equal jaxcore/_version.py (the wheel build checks)."""

JAXCORE_VERSION = "0.1.0"

# The JAX releases jaxcore is tested against, as the wheels' Requires-Dist: jax 0.10.2 through
# 0.12.0.x. Must equal jaxcore/_jax_internals.py's SUPPORTED_JAX_VERSIONS (tests/jax_version_test.py
# checks). The library wheel requires both; each plugin wheel requires the jaxlib it runs on.
JAX_REQUIREMENT = "jax>=0.10.2,<0.12.1"
JAXLIB_REQUIREMENT = "jaxlib>=0.10.2,<0.12.1"

"""The installed JAX must be the version range jaxcore's JAX-internal wrappers were written for."""

import jax
import pytest

from jaxcore import _jax_internals


def test_installed_jax_is_in_the_pinned_range():
    # Fails loudly on a JAX upgrade: update jaxcore/_jax_internals.py, then the range.
    parsed = _jax_internals.check_jax_version()
    low, high = _jax_internals.SUPPORTED_JAX_VERSIONS
    assert low <= parsed < high
    assert _jax_internals.jax_version_supported()
    assert parsed == _jax_internals.parse_version(jax.__version__)


@pytest.mark.parametrize(
    "version, expected",
    [("0.10.2", (0, 10, 2)), ("0.10.3rc1", (0, 10, 3)), ("1.2", (1, 2)), ("0.10.2.dev20260101", (0, 10, 2))],
)
def test_parse_version(version, expected):
    assert _jax_internals.parse_version(version) == expected


@pytest.mark.parametrize("version", ["0.10.1", "0.11.0", "1.0.0", "0.4.38"])
def test_versions_outside_the_range_are_rejected(version):
    with pytest.raises(RuntimeError, match=f"jax=={version} is installed.*_jax_internals.py"):
        _jax_internals.check_jax_version(version)
    assert not _jax_internals.jax_version_supported(version)


def test_unparseable_version_is_rejected():
    with pytest.raises(ValueError, match="cannot parse a release number from version string 'dev'"):
        _jax_internals.parse_version("dev")
    assert not _jax_internals.jax_version_supported("dev")

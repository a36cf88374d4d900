"""jaxcore's tested JAX range: one range, stated alike everywhere, and the release adapters.

The range lives in ``jaxcore/_jax_internals.py``; the wheels' Requires-Dist
(``jaxcore/version.bzl``) and the two hash-locked requirement files (one per end) must say
the same. The installed JAX must be inside it (CI runs this suite at both ends); a JAX
outside it imports with one warning, never an error. No module but ``_jax_internals`` compares
JAX versions.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import pytest

import jaxcore
from jaxcore import _jax_internals

REPO = Path(__file__).resolve().parents[1]
# The hash-locked requirements of each end of the range: (file, Python version it is for).
LOCKS = {
    _jax_internals.OLDEST_TESTED_JAX: "build/requirements_lock.txt",
    _jax_internals.NEWEST_TESTED_JAX: "build/requirements_lock_3_13.txt",
}


def test_installed_jax_is_in_the_tested_range():
    # Fails loudly on a JAX upgrade: update jaxcore/_jax_internals.py, then the range.
    parsed = _jax_internals.check_jax_version()
    low, high = _jax_internals.SUPPORTED_JAX_VERSIONS
    assert low <= parsed < high
    assert _jax_internals.jax_version_supported()
    assert parsed == _jax_internals.parse_version(jax.__version__) == _jax_internals.JAX_VERSION


@pytest.mark.parametrize(
    "version, expected",
    [
        ("0.10.2", (0, 10, 2)),
        ("0.10.3rc1", (0, 10, 3)),
        ("1.2", (1, 2)),
        ("0.10.2.dev20260101", (0, 10, 2)),
        ("0.12.0.1", (0, 12, 0, 1)),
    ],
)
def test_parse_version(version, expected):
    assert _jax_internals.parse_version(version) == expected


@pytest.mark.parametrize(
    "version", ["0.10.2", "0.10.3", "0.11.0", "0.11.2", "0.12.0", "0.12.0.1", "0.12.0.2"]
)
def test_versions_inside_the_range_are_accepted(version):
    assert _jax_internals.check_jax_version(version) == _jax_internals.parse_version(version)
    assert _jax_internals.jax_version_supported(version)


@pytest.mark.parametrize("version", ["0.10.1", "0.12.1", "0.13.0", "1.0.0", "0.4.38"])
def test_versions_outside_the_range_are_rejected(version):
    with pytest.raises(
        RuntimeError, match=rf"tested with jax 0\.10\.2 through 0\.12\.0\.1 .*jax=={version} is"
    ):
        _jax_internals.check_jax_version(version)
    assert not _jax_internals.jax_version_supported(version)


def test_unparseable_version_is_rejected():
    with pytest.raises(ValueError, match="cannot parse a release number from version string 'dev'"):
        _jax_internals.parse_version("dev")
    assert not _jax_internals.jax_version_supported("dev")


def test_requirement_spells_the_range():
    assert _jax_internals.requirement() == "jax>=0.10.2,<0.12.1"
    assert _jax_internals.requirement("jaxlib") == "jaxlib>=0.10.2,<0.12.1"
    assert _jax_internals.tested_range() == "jax 0.10.2 through 0.12.0.1"


def test_wheels_require_the_tested_range():
    """jaxcore/version.bzl gives the wheels' Requires-Dist; it must be the same range."""
    text = (REPO / "jaxcore" / "version.bzl").read_text()
    found = dict(re.findall(r'^(JAX\w*_REQUIREMENT) = "([^"]+)"', text, re.MULTILINE))
    assert found == {
        "JAX_REQUIREMENT": _jax_internals.requirement("jax"),
        "JAXLIB_REQUIREMENT": _jax_internals.requirement("jaxlib"),
    }


@pytest.mark.parametrize("version", sorted(LOCKS))
def test_each_end_has_a_hash_locked_requirements_file(version):
    """The oldest end is locked for Python 3.11, the newest for Python 3.13."""
    text = (REPO / LOCKS[version]).read_text()
    for dist in ("jax", "jaxlib"):
        pins = re.findall(rf"^{dist}==(\S+) \\$", text, re.MULTILINE)
        assert pins == [version], (LOCKS[version], dist, pins)
    pinned = re.findall(r"^[\w.-]+==\S+", text, re.MULTILINE)
    hashed = re.findall(r"^[\w.-]+==\S+ \\\n\s+--hash=sha256:[0-9a-f]{64}", text, re.MULTILINE)
    assert pinned and len(hashed) == len(pinned)


def test_no_other_module_compares_jax_versions():
    """Release differences live in _jax_internals only (one file to update per JAX release)."""
    check = re.compile(
        r"(jax|jaxlib)(\.version)?\.(__version__|_version|__version_info__)\s*(<|>|==|!=|\[)"
        r"|(<|>|==|!=)\s*(jax|jaxlib)\.(version\.)?__version__"
        r"|version\(\s*[\"']jax(lib)?[\"']\s*\)"
        r"|parse_version\(|_JAX_0_\d"
    )
    offenders = []
    for package in ("jaxcore", "jaxcore_cpu", "jaxcore_gpu", "jaxcore_tpu"):
        for path in sorted((REPO / package).rglob("*.py")):
            if path.name == "_jax_internals.py" and path.parent.name == "jaxcore":
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if check.search(line):
                    offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not offenders, "JAX version checks outside jaxcore/_jax_internals.py:\n" + "\n".join(
        offenders
    )


def _run_python(code, **env):
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    environ.update(env)
    environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), environ.get("PYTHONPATH", "")) if p
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environ, timeout=300
    )


# Pretends the installed JAX is another release before jaxcore is imported.
_FAKE_VERSION = """\
import sys, warnings
import jax
jax.__version__ = sys.argv[1] if len(sys.argv) > 1 else {version!r}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import jaxcore, jaxcore.implicit, jaxcore.named
    import jaxcore.__main__
    jaxcore.__main__.main()
for w in caught:
    if issubclass(w.category, RuntimeWarning):
        print("WARNING", w.category.__name__, w.message)
"""


def test_an_untested_jax_imports_with_one_clear_warning():
    # A release past the newest end, or before the oldest: on the installed JAX's side of
    # jax 0.11.0, so the release adapters still describe the JAX really running.
    untested = "0.13.0" if _jax_internals.JAX_VERSION >= (0, 11) else "0.10.1"
    result = _run_python(_FAKE_VERSION.format(version=untested))
    assert result.returncode == 0, result.stderr
    warned = [line for line in result.stdout.splitlines() if line.startswith("WARNING")]
    assert len(warned) == 1, result.stdout
    assert "UntestedJaxWarning" in warned[0]
    assert "jax 0.10.2 through 0.12.0.1" in warned[0]
    assert f"jax=={untested} is installed" in warned[0]
    assert f"jax {untested}, jaxlib" in result.stdout
    assert "OUTSIDE the tested range" in result.stdout


def test_a_tested_jax_imports_without_a_warning():
    result = _run_python(_FAKE_VERSION.format(version=jax.__version__))
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stdout, result.stdout


def test_python_m_jaxcore_names_the_jax_and_the_range():
    result = subprocess.run(
        [sys.executable, "-m", "jaxcore"],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(
                p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
            ),
        ),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"jaxcore {jaxcore.__version__}")
    line = result.stdout.strip().splitlines()[-1]
    assert line.startswith(f"jax {jax.__version__}, jaxlib ")
    assert line.endswith("inside the tested range (jax 0.10.2 through 0.12.0.1)")


# --- The release adapters -------------------------------------------------------------------


def test_scan_operand_counts():
    k = jax.numpy.float32(3.0)
    jaxpr = jax.make_jaxpr(
        lambda k_, xs: jax.lax.scan(lambda c, x: ((c[0] + x * k_, c[1] * x), x), (0.0, 1.0), xs)
    )(k, jax.numpy.arange(4.0))
    (eqn,) = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "scan"]
    num_consts, num_carry = _jax_internals.scan_operand_counts(eqn.params)
    assert (num_consts, num_carry) == (1, 2)
    assert len(eqn.invars) == num_consts + num_carry + 1


def test_jit_inline_option_inlines_while_tracing():
    inner = jax.jit(lambda x: x * 2.0 + 1.0, inline=_jax_internals.jit_inline_option(True))
    outer = jax.make_jaxpr(lambda x: inner(x) * x)(1.0)
    assert "jit" not in [e.primitive.name for e in outer.jaxpr.eqns]
    kept = jax.make_jaxpr(lambda x: jax.jit(lambda y: y * 2.0)(x) * x)(1.0)
    (eqn,) = [e for e in kept.jaxpr.eqns if e.primitive.name == "jit"]
    assert not _jax_internals.jit_inlines_when_traced(eqn.params["inline"])
    assert not _jax_internals.jit_inlines_when_traced(_jax_internals.jit_inline_option(False))


def test_lowering_target_is_inert_for_cpu_and_tpu():
    for platform in ("cpu", "tpu"):
        with _jax_internals.lowering_target(platform):
            assert float(jax.jit(lambda x: x + 1.0)(1.0)) == 2.0


def test_a_jax_without_the_devices_during_lowering_set_still_registers(monkeypatch):
    """``request_devices_during_lowering`` uses a private JAX set; where a release lacks it,
    registering a primitive is a no-op (the kernel then runs on gathered operands)."""
    from jax._src import dispatch

    from jaxcore.kernels import _matmul

    monkeypatch.delattr(dispatch, "prim_requires_devices_during_lowering")
    _jax_internals.request_devices_during_lowering(_matmul._matmul_p)  # no error

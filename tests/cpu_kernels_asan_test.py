"""The native kernels' FFI handlers under AddressSanitizer and UBSan.

``bazel test --config=asan //tests:cpu_kernels_asan_test_cpu`` (the ASan job,
``ci/run_bazel_test_asan.sh``) builds the kernel library with both sanitizers. The C++ test
(``//jaxcore_cpu:qmm_native_test``) covers the kernels; the FFI handlers in ``ffi.cc`` (the
checks of shapes, dtypes, layer counts and indices every call from XLA passes through) run
only inside a JAX process. This test runs the FFI-level test files against the
instrumented library in a child Python that starts with the sanitizer runtimes preloaded
(an ASan library only loads into such a process), failing on the first report. Leak
detection is off there: the interpreter's and XLA's allocations alive at exit are not the
kernels'.

Every other run (a library built without ``--config=asan``, or none) skips it.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

from jaxcore_cpu import _library  # its search path only: importing it loads nothing

FFI_TEST_FILES = (
    "cpu_kernels_test.py",
    "cpu_kernels_dq_test.py",
    "cpu_kernels_half_scales_test.py",
    "cpu_kernels_int8_test.py",
    "cpu_kernels_isa_test.py",
    "cpu_kernels_stacked_test.py",
    "cpu_kernels_transposed_test.py",
)
RUNTIMES = ("libasan", "libubsan")


def _instrumented_library() -> str | None:
    """The library jaxcore_cpu would load, where it is built with the sanitizers."""
    explicit = os.environ.get(_library.ENV_VAR)
    paths = [explicit] if explicit else _library.candidates()
    return next((p for p in paths if os.path.isfile(p) and _library._needs_asan(p)), None)


def _runtimes(library: str) -> list[str]:
    """The sanitizer runtimes the library was linked against, as `ldd` resolves them."""
    out = subprocess.run(["ldd", library], capture_output=True, text=True, check=True).stdout
    found = []
    for name in RUNTIMES:
        match = re.search(rf"^\s*{name}\.so\S* => (\S+)", out, re.M)
        assert match, f"{library} is instrumented but `ldd` finds no {name}:\n{out}"
        found.append(match.group(1))
    return found


def test_ffi_handlers_run_clean_under_the_sanitizers():
    library = _instrumented_library()
    if library is None:
        pytest.skip("the kernel library is not built with --config=asan")
    here = pathlib.Path(__file__).resolve().parent
    env = dict(os.environ)
    env.update(
        LD_PRELOAD=":".join(_runtimes(library)),
        ASAN_OPTIONS="halt_on_error=1:detect_leaks=0:detect_stack_use_after_return=1",
        UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1",
        JAXCORE_CPU_KERNELS_LIB=library,
        JAXCORE_CPU_KERNELS_REQUIRED="1",
    )
    env.pop("PYTEST_XDIST_WORKER", None)
    files = [str(here / name) for name in FFI_TEST_FILES]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *files],
        env=env,
        cwd=here.parent,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    output = proc.stdout + proc.stderr
    assert "Sanitizer" not in output and "runtime error:" not in output, output[-8000:]
    assert proc.returncode == 0, output[-8000:]
    # The files ran their tests against the instrumented library (JAXCORE_CPU_KERNELS_REQUIRED
    # turns a library that fails to load into errors, not skips).
    passed = re.search(r"\b(\d+) passed\b", output)
    assert passed and int(passed.group(1)) >= 50, output[-8000:]

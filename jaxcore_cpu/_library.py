"""Finding, loading and registering the native kernel library ``libjaxcore_cpu_kernels.so``.

The library (built by Bazel as ``//jaxcore_cpu:libjaxcore_cpu_kernels.so``) exports the XLA
FFI handler ``JaxcoreCpuQuantizedMatmul`` and three C helpers that report and restrict the
instruction set its kernels use. It is looked up, in order:

1. at the path in ``JAXCORE_CPU_KERNELS_LIB``, when that variable is set (a missing file
   is then an error: the user asked for that library);
2. next to this package's ``__init__.py`` (the ``jaxcore-cpu`` wheel, and Bazel's runfiles,
   where the ``//jaxcore_cpu`` py_library carries it as data);
3. from the source tree only: ``<repository>/bazel-bin/jaxcore_cpu/``, so pytest run from
   a checkout uses the library Bazel built.

It is loaded with ctypes once per process and its handler registered with XLA as the FFI
target :data:`TARGET_NAME` for platform ``cpu``. A build instrumented with AddressSanitizer
(``--config=asan``) is passed over unless the ASan runtime is already in the process:
loading it into a plain Python would abort the process.
"""

from __future__ import annotations

import ctypes
import os
import threading

import jax

from . import _build_config
from ._setting import Setting

LIBRARY_NAME = "libjaxcore_cpu_kernels.so"
"""File name of the native library."""

ENV_VAR = "JAXCORE_CPU_KERNELS_LIB"
"""Environment variable naming the library to load instead of the bundled one."""

TARGET_NAME = "jaxcore_cpu_quantized_matmul"
"""The XLA FFI custom-call target the kernels are registered as."""
DQ_TARGET_NAME = "jaxcore_cpu_quantized_matmul_dq"
"""The FFI target taking NF4's double-quantized scales (codes, group scales, offset)."""
STACKED_TARGET_NAME = "jaxcore_cpu_quantized_matmul_stacked"
DQ_STACKED_TARGET_NAME = "jaxcore_cpu_quantized_matmul_dq_stacked"
"""The two targets above on one matrix of a stack (an int32 index after x, every weight
operand with the stack's axis first)."""

# Each architecture's instruction sets, least capable first (what available_isas() slices).
_X86_ISAS = ("portable", "avx2", "avxvnni", "avx512", "amx")
_AARCH64_ISAS = ("portable", "dotprod")

ISAS: tuple[str, ...] = _X86_ISAS + _AARCH64_ISAS[1:]
"""Instruction sets the kernels are compiled for: ``portable`` everywhere, x86-64's least
capable first, then aarch64's. ``avxvnni`` is the AVX2 table with 256-bit int8-activation
kernels built on ``vpdpbusd``: AVX-VNNI (Intel Alder Lake and later client cores) or, encoded
for AVX-512, any CPU that has ``avx512``. ``avx512`` needs AVX-512 F/BW/VL/DQ and VNNI (Ice
Lake and later Intel server cores, AMD Zen 4 and later); its table is the AVX2 one with
512-bit int8-activation kernels built on ``vpdpbusd``. ``amx`` is the ``avx512`` table whose
float32 GEMV (M = 5 to 16 for int8 and int4, 12 to 16 for NF4) runs on AMX tiles in bf16
products with each activation (and NF4 code) split into three bf16 parts (float32's precision): Intel Sapphire Rapids and later
server cores, where Linux grants the process the tile state. ``dotprod`` (aarch64 with the
dot-product extension: Neoverse N1 and later, Apple M1 and later) is the portable table with
its int8-activation kernel on NEON's ``sdot``."""

BUILD_HINT = "bazel build //jaxcore_cpu:libjaxcore_cpu_kernels.so"

_HANDLER = "JaxcoreCpuQuantizedMatmul"
_DQ_HANDLER = "JaxcoreCpuQuantizedMatmulDq"
_TARGETS = (
    (TARGET_NAME, _HANDLER),
    (DQ_TARGET_NAME, _DQ_HANDLER),
    (STACKED_TARGET_NAME, "JaxcoreCpuQuantizedMatmulStacked"),
    (DQ_STACKED_TARGET_NAME, "JaxcoreCpuQuantizedMatmulDqStacked"),
)
_HELPERS = ("JaxcoreCpuIsa", "JaxcoreCpuDetectedIsa", "JaxcoreCpuSetIsa")

_lock = threading.Lock()
_loaded: tuple[ctypes.CDLL, str] | None = None


class LibraryNotFoundError(FileNotFoundError):
    """The native kernel library is not where it is looked for.

    Attributes:
      searched: the paths that were tried, in order.
      explicit: whether ``JAXCORE_CPU_KERNELS_LIB`` named the missing file.
    """

    def __init__(self, message: str, searched: tuple[str, ...], explicit: bool):
        super().__init__(message)
        self.searched = searched
        self.explicit = explicit


def _package_dir() -> str:
    return os.path.dirname(os.path.abspath(__file__))


def from_source() -> bool:
    """Whether this package runs from the repository (not from an installed wheel)."""
    return _build_config.DIST_NAME is None


def candidates() -> tuple[str, ...]:
    """The paths searched for the library when ``JAXCORE_CPU_KERNELS_LIB`` is unset."""
    package_dir = _package_dir()
    paths = [os.path.join(package_dir, LIBRARY_NAME)]
    if from_source():
        repo_root = os.path.dirname(package_dir)
        paths.append(os.path.join(repo_root, "bazel-bin", "jaxcore_cpu", LIBRARY_NAME))
    return tuple(paths)


def _needs_asan(path: str) -> bool:
    """Whether the library was built with AddressSanitizer (it imports the ASan runtime)."""
    with open(path, "rb") as f:
        data = f.read()
    return b"__asan_init" in data or b"libasan.so" in data


def _asan_loaded() -> bool:
    try:
        with open("/proc/self/maps") as f:
            return "libasan" in f.read()
    except OSError:
        return False


def _loadable(path: str) -> bool:
    return os.path.isfile(path) and (not _needs_asan(path) or _asan_loaded())


def _asan_note(path: str) -> str:
    return (
        f"{path} is built with AddressSanitizer, which only loads into a process started "
        f"with the ASan runtime (LD_PRELOAD)"
    )


def find_library() -> str:
    """Returns the path of the library that :func:`load` would load.

    Raises:
      LibraryNotFoundError: ``JAXCORE_CPU_KERNELS_LIB`` names a missing file, or the
        library is in none of the searched places.
    """
    explicit = os.environ.get(ENV_VAR, "")
    if explicit:
        if _loadable(explicit):
            return os.path.abspath(explicit)
        problem = _asan_note(explicit) if os.path.isfile(explicit) else "does not name a file"
        raise LibraryNotFoundError(
            f"{ENV_VAR}={explicit!r}: {problem}; point it at a built {LIBRARY_NAME} or unset it",
            (explicit,),
            explicit=True,
        )
    searched = candidates()
    for path in searched:
        if _loadable(path):
            return path
    passed_over = [_asan_note(p) for p in searched if os.path.isfile(p)]
    if from_source():
        how = f"build it with `{BUILD_HINT}` or set {ENV_VAR}"
    else:
        how = f"the {_build_config.DIST_NAME} wheel is incomplete; reinstall it or set {ENV_VAR}"
    raise LibraryNotFoundError(
        f"native kernel library {LIBRARY_NAME} not found (looked in {', '.join(searched)}"
        f"{''.join('; ' + note for note in passed_over)}); {how}",
        searched,
        explicit=False,
    )


def load() -> ctypes.CDLL:
    """Loads the library once per process and registers its FFI target with XLA.

    Returns:
      The loaded library.

    Raises:
      LibraryNotFoundError: see :func:`find_library`.
      RuntimeError: the file is not a loadable library, or lacks one of the exported
        symbols (e.g. a stale build).
    """
    global _loaded
    with _lock:
        if _loaded is not None:
            return _loaded[0]
        path = find_library()
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise RuntimeError(f"cannot load {path}: {e}") from e
        handlers = [handler for _, handler in _TARGETS]
        missing = [s for s in (*handlers, *_HELPERS) if not hasattr(lib, s)]
        if missing:
            raise RuntimeError(
                f"{path} does not export {missing}; it is not a jaxcore CPU kernel library "
                f"of this version (rebuild it with `{BUILD_HINT}`)"
            )
        for name in ("JaxcoreCpuIsa", "JaxcoreCpuDetectedIsa"):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = ctypes.c_char_p, []
        lib.JaxcoreCpuSetIsa.restype = ctypes.c_int
        lib.JaxcoreCpuSetIsa.argtypes = [ctypes.c_char_p]
        for target, handler in _TARGETS:
            jax.ffi.register_ffi_target(
                target, jax.ffi.pycapsule(getattr(lib, handler)), platform="cpu"
            )
        _loaded = (lib, path)
        return lib


def is_loaded() -> bool:
    """Whether :func:`load` has succeeded in this process."""
    return _loaded is not None


def library_path() -> str | None:
    """The path of the loaded library, or ``None`` before :func:`load` succeeded."""
    return None if _loaded is None else _loaded[1]


def isa() -> str:
    """The instruction set the kernels use now (one of :data:`ISAS`, e.g. ``"avx2"``).

    Raises:
      LibraryNotFoundError, RuntimeError: as :func:`load`.
    """
    return load().JaxcoreCpuIsa().decode()


def detected_isa() -> str:
    """The best instruction set this CPU (and OS) supports among :data:`ISAS`."""
    return load().JaxcoreCpuDetectedIsa().decode()


def available_isas() -> tuple[str, ...]:
    """The instruction sets :func:`set_isa` accepts on this machine, least capable first."""
    detected = detected_isa()
    ladder = _AARCH64_ISAS if detected in _AARCH64_ISAS[1:] else _X86_ISAS
    return ladder[: ladder.index(detected) + 1]


class IsaSetting(Setting):
    """What :func:`set_isa` returns: used as a context manager, it restores the previous ISA."""


def _set(name: str) -> None:
    if name not in ISAS:
        raise ValueError(f"unknown instruction set {name!r}; expected one of {ISAS}")
    if not load().JaxcoreCpuSetIsa(name.encode()):
        raise ValueError(
            f"this CPU cannot run the {name!r} kernels (it supports up to {detected_isa()!r}; "
            f"choose one of {available_isas()})"
        )


def set_isa(name: str) -> IsaSetting:
    """Restricts the native kernels to instruction set ``name``, for the whole process.

    The choice is read when a kernel runs, not when it is traced, so compiled functions
    follow it without recompiling. Use it plainly (``set_isa("portable")``) or as a
    context manager that restores the previous choice::

        with jaxcore_cpu.set_isa("portable"):
            y = f(x, w)

    Args:
      name: one of :func:`available_isas`.

    Returns:
      An :class:`IsaSetting`.

    Raises:
      ValueError: an unknown name, or an instruction set this CPU lacks.
      LibraryNotFoundError, RuntimeError: as :func:`load`.
    """
    previous = isa()
    _set(name)
    return IsaSetting(previous, name, _set)

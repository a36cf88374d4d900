"""The generated bazelrc, .jaxcore_configure.bazelrc: this machine's settings for Bazel.

.bazelrc imports it last, so a plain `bazel build` or `bazel test` afterwards behaves exactly
like the commands build.py runs; build.py never repeats its settings on the command line.
"""

from _common import REPO_ROOT, log, write_atomically
from _toolchain import find_cxx_compiler, xla_ffi_include

CONFIGURE_BAZELRC = REPO_ROOT / ".jaxcore_configure.bazelrc"


def configure_bazelrc_text(
    *, python, cuda_major, cuda_version, cudnn_version, rocm_version, ffi_include, compiler
):
    """Returns the text of .jaxcore_configure.bazelrc: one line per setting."""
    lines = [
        "# Written by build/build.py; re-run it to change these settings. Do not edit.",
        f"# C++ compiler (Bazel's autoconfigured toolchain): {compiler}",
        f"build --repo_env=PYTHON_BIN_PATH={python}",
        f"build --action_env=PYTHON_BIN_PATH={python}",
        f"build --repo_env=JAXCORE_XLA_FFI_INCLUDE={ffi_include}",
        "build --action_env=SOURCE_DATE_EPOCH",
        f"build --define=jaxcore_cuda_major={cuda_major}",
        f"build:cuda --action_env=JAXCORE_CUDA_VERSION={cuda_version}",
        f"build:cuda --action_env=JAXCORE_CUDNN_VERSION={cudnn_version}",
        f"build:rocm --action_env=JAXCORE_ROCM_VERSION={rocm_version}",
    ]
    return "\n".join(lines) + "\n"


def write_configure_bazelrc(
    *,
    python,
    cuda_major,
    cuda_version,
    cudnn_version,
    rocm_version,
    ci_compiler_version,
    verbose,
    dry_run,
):
    """Finds the compiler and the FFI headers, then writes the generated bazelrc.

    Nothing is written unless every setting was found: a failure leaves an existing
    .jaxcore_configure.bazelrc exactly as it was (and no temporary file beside it).

    Args:
      python: the interpreter whose jaxlib gives the FFI headers; Bazel's PYTHON_BIN_PATH.
      cuda_major: --cuda_major_version.
      cuda_version: the full CUDA version of that major version.
      cudnn_version: the cuDNN version.
      rocm_version: --rocm_version.
      ci_compiler_version: the GCC version CI uses (another one is noted).
      verbose: whether to log what was written.
      dry_run: print the file instead of writing it.
    """
    compiler = find_cxx_compiler(ci_version=ci_compiler_version, verbose=verbose, dry_run=dry_run)
    ffi_include = xla_ffi_include(python, dry_run=dry_run)
    text = configure_bazelrc_text(
        python=python,
        cuda_major=cuda_major,
        cuda_version=cuda_version,
        cudnn_version=cudnn_version,
        rocm_version=rocm_version,
        ffi_include=ffi_include,
        compiler=compiler,
    )
    if dry_run:
        print(f"# would write {CONFIGURE_BAZELRC.name}:")
        print(text, end="")
        return
    write_atomically(CONFIGURE_BAZELRC, text)
    if verbose:
        log(f"wrote {CONFIGURE_BAZELRC}")

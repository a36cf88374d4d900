"""`python_configure`: a Python toolchain for the interpreter named by PYTHON_BIN_PATH.

Bazel 4 ignores `--python_path` once toolchains are in use, so tests would otherwise run
with whatever `python3` is first on PATH. This repository rule checks the interpreter and
generates a registered `py_runtime_pair` toolchain for it. build/build.py sets
PYTHON_BIN_PATH (through --repo_env) in .jaxcore_configure.bazelrc.
"""

_BUILD_TEMPLATE = """\
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")

package(default_visibility = ["//visibility:public"])

py_runtime(
    name = "py3_runtime",
    interpreter_path = "{python}",
    python_version = "PY3",
    stub_shebang = "#!{python}",
)

py_runtime_pair(
    name = "runtime_pair",
    py3_runtime = ":py3_runtime",
)

toolchain(
    name = "py_toolchain",
    toolchain = ":runtime_pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)
"""

_CHECK = "import sys; print(sys.executable); print('%d.%d' % sys.version_info[:2])"

def _fail(msg):
    fail("\n[python_configure] " + msg + "\n")

def _python_configure_impl(rctx):
    python = rctx.os.environ.get("PYTHON_BIN_PATH", "")
    if not python:
        python = rctx.which("python3")
        if not python:
            _fail("PYTHON_BIN_PATH is not set and no python3 is on PATH; run " +
                  "`python3 build/build.py build --configure_only` first.")
        python = str(python)
    if not python.startswith("/"):
        _fail("PYTHON_BIN_PATH must be an absolute path, got %r" % python)
    result = rctx.execute([python, "-c", _CHECK])
    if result.return_code != 0:
        _fail("PYTHON_BIN_PATH=%s does not run: %s" % (python, result.stderr))
    version = result.stdout.strip().split("\n")[-1]
    major, minor = [int(v) for v in version.split(".")]
    if major != 3 or minor < 9:
        _fail("PYTHON_BIN_PATH=%s is Python %s; jaxcore needs Python 3.9 or newer" % (python, version))
    rctx.file("BUILD.bazel", _BUILD_TEMPLATE.format(python = python))
    rctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % rctx.name)

python_configure = repository_rule(
    implementation = _python_configure_impl,
    environ = ["PYTHON_BIN_PATH", "PATH"],
    local = True,
    doc = "Generates a py_runtime_pair toolchain for $PYTHON_BIN_PATH.",
)

"""`jaxcore_test`: one test source, one `py_test` per backend (cpu, gpu, tpu)."""

BACKENDS = ["cpu", "gpu", "tpu"]

# Environment each backend's test process starts with. GPU targets serve CUDA and ROCm,
# so they leave JAX_PLATFORMS to JAX's own discovery.
_BACKEND_ENV = {
    "cpu": {"JAX_PLATFORMS": "cpu", "JAXCORE_TEST_BACKEND": "cpu"},
    "gpu": {"JAXCORE_TEST_BACKEND": "gpu"},
    "tpu": {"JAX_PLATFORMS": "tpu", "JAXCORE_TEST_BACKEND": "tpu"},
}

# Eight fake CPU devices, so sharding tests run on any machine.
_MULTI_DEVICE_XLA_FLAGS = "--xla_force_host_platform_device_count=8"

def _per_backend(value, backend, default):
    """Reads `value` as a plain value or as a {backend: value} dict."""
    if type(value) == "dict":
        return value.get(backend, default)
    return value if value != None else default

def jaxcore_test(
        name,
        srcs,
        deps = [],
        data = [],
        backends = BACKENDS,
        multiaccelerator = False,
        shard_count = None,
        tags = [],
        env = {},
        size = "medium",
        timeout = None,
        args = []):
    """Makes `<name>_cpu`, `<name>_gpu` and `<name>_tpu` from one pytest/absltest file.

    Args:
      name: base name of the targets.
      srcs: the test source (one file; helpers it imports go in `deps`).
      deps: libraries the test imports.
      data: runtime files.
      backends: backends the test is enabled on; the others get the `manual` tag, so
        they are built only when asked for by name and never run by a test suite.
      multiaccelerator: tags the targets `multiaccelerator` (run serially, every device
        visible) and gives the CPU target eight fake devices.
      shard_count: an int, or a dict from backend to int.
      tags: extra tags for every target.
      env: extra environment for every target.
      size: Bazel test size.
      timeout: Bazel test timeout.
      args: extra pytest arguments.
    """
    for backend in backends:
        if backend not in BACKENDS:
            fail("jaxcore_test %s: unknown backend %r (known: %s)" % (name, backend, BACKENDS))
    if len(srcs) != 1:
        fail("jaxcore_test %s: give exactly one test source, got %s" % (name, srcs))
    for backend in BACKENDS:
        backend_tags = ["jaxcore_test_" + backend]
        if backend not in backends:
            backend_tags.append("manual")
        if multiaccelerator:
            backend_tags.append("multiaccelerator")
        test_env = dict(_BACKEND_ENV[backend])
        if multiaccelerator and backend == "cpu":
            test_env["XLA_FLAGS"] = _MULTI_DEVICE_XLA_FLAGS
        test_env.update(env)
        native.py_test(
            name = "%s_%s" % (name, backend),
            srcs = srcs + ["//tests:pytest_main.py"],
            main = "pytest_main.py",
            args = ["$(location %s)" % srcs[0]] + args,
            deps = deps + ["//tests:test_support"],
            data = data,
            env = test_env,
            tags = backend_tags + tags,
            shard_count = _per_backend(shard_count, backend, None),
            size = size,
            timeout = timeout,
            python_version = "PY3",
            srcs_version = "PY3",
        )

"""jaxcore.plugins: discovery of backend plugins through entry points and the source tree.

Fake plugins are real distributions: a ``*.dist-info`` folder with ``METADATA`` and an
``entry_points.txt`` in group ``jaxcore_plugins``, next to the plugin module, on
``sys.path``, exactly what an installed wheel looks like to ``importlib.metadata``.
"""

import os
import shutil
import subprocess
import sys
import textwrap
import uuid
import warnings

import jax
import numpy as np
import pytest

import jaxcore
import jaxcore_cpu
import jaxcore_gpu
from jaxcore import kernels, plugins, quant


def _native_cpu_library():
    """The native CPU kernel library's path, or None when it was not built."""
    try:
        jaxcore_cpu.isa()
    except jaxcore_cpu.LibraryNotFoundError:
        return None
    return jaxcore_cpu.library_path()


NATIVE_CPU = _native_cpu_library()


def _fake_plugin(root, *, platform, body, dist_version=None, module=None):
    """Writes an installed-looking plugin: module + dist-info with one entry point.

    Returns:
      The (unique) module name.
    """
    module = module or f"fakeplugin_{uuid.uuid4().hex[:8]}"
    dist = module.replace("_", "-")
    (root / f"{module}.py").write_text(textwrap.dedent(body))
    info = root / f"{module}-{dist_version or jaxcore.__version__}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: {dist_version or jaxcore.__version__}\n"
    )
    (info / "entry_points.txt").write_text(f"[jaxcore_plugins]\n{platform} = {module}\n")
    return module


_GOOD = """
    import jaxcore
    __version__ = jaxcore.__version__
    PLATFORMS = ("tpu",)
    CALLS = []

    def impl(x2d, qvalue, scale, *, fmt, block_size, out_dtype, interpret=False):
        raise AssertionError("never run on CPU")

    def initialize(platforms):
        CALLS.append(tuple(platforms))
        from jaxcore import kernels
        for p in platforms:
            kernels.register_kernel("quantized_matmul", p, impl)
"""


@pytest.fixture
def sandbox(monkeypatch, tmp_path):
    """Fake plugins go in ``tmp_path``; jaxcore's plugin state and registry are restored."""
    saved_kernels = kernels.registered_kernels("quantized_matmul")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(plugins.ENV_VAR, raising=False)
    monkeypatch.setattr(plugins, "_info", plugins._info)
    yield tmp_path
    for platform in kernels.registered_kernels("quantized_matmul"):
        kernels.unregister_kernel("quantized_matmul", platform)
    for platform, impl in saved_kernels.items():
        kernels.register_kernel("quantized_matmul", platform, impl)


def _load():
    """Runs discovery again; returns (info, the PluginWarnings it raised)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        info = plugins.load_plugins(force=True)
    return info, [w for w in caught if issubclass(w.category, plugins.PluginWarning)]


def _status(info, module):
    (status,) = [p for p in info.plugins if p.module == module]
    return status


def test_source_tree_plugins_load_at_import():
    info = plugins.info()
    gpu = _status(info, "jaxcore_gpu")
    tpu = _status(info, "jaxcore_tpu")
    assert (gpu.name, gpu.origin, gpu.loaded, gpu.platforms) == (
        "gpu",
        "source",
        True,
        ("cuda", "rocm"),
    )
    assert (tpu.name, tpu.loaded, tpu.platforms, tpu.version) == (
        "tpu",
        True,
        ("tpu",),
        jaxcore.__version__,
    )
    assert info.jaxcore_version == jaxcore.__version__
    registered = kernels.registered_kernels("quantized_matmul")
    assert registered["cuda"] is jaxcore_gpu.IMPLS["cuda"]
    assert "gpu (jaxcore_gpu, source package): loaded for cuda, rocm" in info.format()
    assert plugins.load_plugins() is info  # discovery runs once unless forced


def test_source_cpu_plugin_loads_or_says_why():
    info = plugins.info()
    cpu = _status(info, "jaxcore_cpu")
    assert (cpu.name, cpu.origin) == ("cpu", "source")
    impl = kernels.registered_kernels("quantized_matmul")["cpu"]
    if NATIVE_CPU is None:  # not built: skipped quietly, the reference serves CPU
        assert not cpu.loaded and cpu.reason.startswith("unavailable: native kernel library")
        assert jaxcore_cpu.ENV_VAR in cpu.reason and "bazel build //jaxcore_cpu" in cpu.reason
        assert impl is kernels.reference_quantized_matmul
        return
    assert (cpu.loaded, cpu.platforms, cpu.version) == (True, ("cpu",), jaxcore.__version__)
    assert impl is jaxcore_cpu.IMPLS["cpu"]
    assert cpu.detail == jaxcore_cpu.describe()
    assert f"ISA {jaxcore_cpu.isa()}" in cpu.detail and NATIVE_CPU in cpu.detail
    assert (
        f"cpu (jaxcore_cpu, source package): loaded for cpu (native kernels, "
        f"ISA {jaxcore_cpu.isa()}"
    ) in info.format()


def test_unavailable_plugin_is_skipped_quietly(sandbox):
    body = _GOOD.replace(
        "        CALLS.append(tuple(platforms))",
        "        from jaxcore import plugins\n"
        "        raise plugins.PluginUnavailable('libfoo.so was not built')",
    )
    module = _fake_plugin(sandbox, platform="tpu", body=body)
    info, caught = _load()
    assert caught == []
    status = _status(info, module)
    assert not status.loaded and status.reason == "unavailable: libfoo.so was not built"
    assert status.detail is None and status in info.skipped


def test_good_plugin_registers_its_platform(sandbox):
    module = _fake_plugin(sandbox, platform="tpu", body=_GOOD)
    info, caught = _load()
    assert caught == []
    status = _status(info, module)
    assert (status.origin, status.loaded, status.platforms) == ("entry_point", True, ("tpu",))
    assert status.distribution == f"{module.replace('_', '-')} {jaxcore.__version__}"
    assert sys.modules[module].CALLS == [("tpu",)]
    assert kernels.registered_kernels("quantized_matmul")["tpu"] is sys.modules[module].impl
    # The source-tree TPU plugin yields to the installed one.
    tpu = _status(info, "jaxcore_tpu")
    assert not tpu.loaded and "already served by an installed plugin" in tpu.reason
    assert info.loaded == tuple(p for p in info.plugins if p.loaded)
    assert f"tpu ({module}, {status.distribution}): loaded for tpu" in info.format()


def test_distribution_version_mismatch_skips_without_importing(sandbox):
    module = _fake_plugin(sandbox, platform="tpu", body=_GOOD, dist_version="9.9.9")
    info, caught = _load()
    assert len(caught) == 1
    message = str(caught[0].message)
    dist = module.replace("_", "-")
    assert f"distribution {dist} is version 9.9.9 but jaxcore is {jaxcore.__version__}" in message
    assert f"install {dist}=={jaxcore.__version__}" in message
    assert module not in sys.modules
    status = _status(info, module)
    assert not status.loaded and status.version == "9.9.9" and status in info.skipped
    assert _status(info, "jaxcore_tpu").loaded  # the source plugin still serves tpu


def test_module_version_mismatch(sandbox):
    body = _GOOD.replace("__version__ = jaxcore.__version__", '__version__ = "0.0.1"')
    module = _fake_plugin(sandbox, platform="tpu", body=body)
    info, caught = _load()
    assert len(caught) == 1
    assert f"plugin version 0.0.1 does not match jaxcore version {jaxcore.__version__}" in str(
        caught[0].message
    )
    assert module in str(caught[0].message)
    assert sys.modules[module].CALLS == []  # never initialized


@pytest.mark.parametrize(
    "body,reason",
    [
        (
            "raise ImportError('missing libtriton')\n",
            "import failed: ImportError: missing libtriton",
        ),
        ("def initialize(platforms):\n    pass\n", "module has no __version__"),
        (
            "import jaxcore\n__version__ = jaxcore.__version__\n",
            "module has no initialize() function",
        ),
        (
            "import jaxcore\n__version__ = jaxcore.__version__\n"
            "def initialize(platforms):\n    raise RuntimeError('no device')\n",
            "initialize() failed: RuntimeError: no device",
        ),
        (
            "import jaxcore\n__version__ = jaxcore.__version__\nPLATFORMS = ('metal',)\n"
            "def initialize(platforms):\n    pass\n",
            "declares unknown platform(s) ['metal']",
        ),
    ],
)
def test_broken_plugin_warns_once_and_jaxcore_keeps_working(sandbox, body, reason):
    module = _fake_plugin(sandbox, platform="tpu", body=body)
    info, caught = _load()
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert reason in str(caught[0].message) and module in str(caught[0].message)
    status = _status(info, module)
    assert not status.loaded and reason in status.reason and status.platforms == ()
    # The portable reference still serves CPU.
    w = jax.random.normal(jax.random.key(1), (64, 32))
    q = quant.ArrayInt8.quantize(w)
    x = jax.random.normal(jax.random.key(2), (3, 64))
    np.testing.assert_allclose(
        np.asarray(jax.jit(kernels.quantized_matmul)(x, q)),
        np.asarray(x @ q.materialize()),
        rtol=1e-5,
        atol=1e-5,
    )


def test_entry_point_that_is_not_a_module(sandbox):
    module = _fake_plugin(sandbox, platform="tpu", body="def make():\n    return 1\n")
    entry = sandbox / f"{module}-{jaxcore.__version__}.dist-info" / "entry_points.txt"
    entry.write_text(f"[jaxcore_plugins]\ntpu = {module}:make\n")
    info, caught = _load()
    assert len(caught) == 1
    assert "entry point does not name a module (got function)" in str(caught[0].message)


def test_selection_none_loads_nothing(sandbox, monkeypatch):
    module = _fake_plugin(sandbox, platform="tpu", body=_GOOD)
    monkeypatch.setenv(plugins.ENV_VAR, "none")
    info, caught = _load()
    assert caught == [] and info.selection == "none" and info.loaded == ()
    assert all(p.reason == f"not selected by {plugins.ENV_VAR}" for p in info.plugins)
    assert module not in sys.modules
    assert info.platforms == ()


def test_deselected_mismatched_plugin_is_skipped_quietly(sandbox, monkeypatch):
    module = _fake_plugin(sandbox, platform="tpu", body=_GOOD, dist_version="9.9.9")
    monkeypatch.setenv(plugins.ENV_VAR, "cuda")
    info, caught = _load()
    assert caught == []  # switched off by the user: no version warning
    status = _status(info, module)
    assert not status.loaded and status.reason == f"not selected by {plugins.ENV_VAR}"
    assert module not in sys.modules


def test_selection_by_platform(sandbox, monkeypatch):
    module = _fake_plugin(sandbox, platform="tpu", body=_GOOD)
    monkeypatch.setenv(plugins.ENV_VAR, " CUDA ")
    info, caught = _load()
    assert caught == [] and info.selection == "cuda"
    assert info.platforms == ("cuda",)
    assert _status(info, "jaxcore_gpu").platforms == ("cuda",)  # rocm filtered out
    assert not _status(info, "jaxcore_tpu").loaded
    assert module not in sys.modules  # an unselected entry point is never imported


def test_selection_by_plugin_name(sandbox, monkeypatch):
    monkeypatch.setenv(plugins.ENV_VAR, "gpu,tpu")
    info, caught = _load()
    assert caught == []
    assert info.platforms == ("cuda", "rocm", "tpu")


@pytest.mark.parametrize(
    "value,message",
    [
        ("cuda,vulkan", "names ['vulkan'], which match no platform and no plugin found"),
        ("none,tpu", "'none' and 'all' cannot be combined with other names"),
    ],
)
def test_selection_errors_warn(sandbox, monkeypatch, value, message):
    monkeypatch.setenv(plugins.ENV_VAR, value)
    info, caught = _load()
    assert len(caught) == 1 and message in str(caught[0].message)


def test_info_format_lists_skips():
    info = plugins.PluginInfo(
        "1.0",
        "all",
        (
            plugins.PluginStatus(
                "cuda",
                "jaxcore_cuda12",
                "entry_point",
                "jaxcore-cuda12 0.9",
                "0.9",
                (),
                False,
                "wrong version",
            ),
        ),
    )
    assert info.format().splitlines() == [
        "jaxcore 1.0; JAXCORE_PLUGINS=all",
        "  cuda (jaxcore_cuda12, jaxcore-cuda12 0.9): skipped: wrong version",
    ]
    assert plugins.PluginInfo("1.0", "none", ()).format().endswith("no plugins found")


def _run(code, env_extra, cwd):
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXCORE_")}
    env.update(env_extra)
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _paths_without_jaxcore():
    """PYTHONPATH entries (e.g. Bazel's third-party paths) that hold no jaxcore sources."""
    return [
        p
        for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
        if p and not any(os.path.exists(os.path.join(p, d)) for d in ("jaxcore", "jaxcore_gpu"))
    ]


def _repo_root():
    return os.path.dirname(os.path.dirname(os.path.abspath(jaxcore.__file__)))


def test_plugin_imported_before_jaxcore(tmp_path):
    out = _run(
        """
        import warnings
        warnings.simplefilter("error")
        import jaxcore_gpu            # imports jaxcore, whose discovery finds it half-imported
        from jaxcore import kernels, plugins
        status = [p for p in plugins.info().plugins if p.module == "jaxcore_gpu"][0]
        print(status.loaded, status.platforms)
        print(kernels.registered_kernels("quantized_matmul")["rocm"] is jaxcore_gpu.IMPLS["rocm"])
        """,
        {"PYTHONPATH": os.pathsep.join([_repo_root(), os.environ.get("PYTHONPATH", "")])},
        tmp_path,
    )
    assert out.split("\n")[:2] == ["True ('cuda', 'rocm')", "True"]


def test_renamed_wheels_work_without_the_source_tree(tmp_path):
    """The CUDA and ROCm wheels: jaxcore_gpu's files as jaxcore_cuda12 / jaxcore_rocm6."""
    site = tmp_path / "site"
    site.mkdir()
    os.symlink(os.path.dirname(os.path.abspath(jaxcore.__file__)), site / "jaxcore")
    gpu_src = os.path.dirname(os.path.abspath(jaxcore_gpu.__file__))
    for package, platform, dist in [
        ("jaxcore_cuda12", "cuda", "jaxcore-cuda12"),
        ("jaxcore_rocm6", "rocm", "jaxcore-rocm6"),
    ]:
        (site / package).mkdir()
        for name in os.listdir(gpu_src):
            if name.endswith(".py") and name != "_build_config.py":
                shutil.copy(os.path.join(gpu_src, name), site / package / name)
        (site / package / "_build_config.py").write_text(
            f'PLATFORMS = ("{platform}",)\nVERSION = "{jaxcore.__version__}"\n'
            f'DIST_NAME = "{dist}"\n'
        )
        info = site / f"{package}-{jaxcore.__version__}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {dist}\nVersion: {jaxcore.__version__}\n"
        )
        (info / "entry_points.txt").write_text(f"[jaxcore_plugins]\n{platform} = {package}\n")
    out = _run(
        """
        import sys, warnings
        warnings.simplefilter("error")
        import jax, jax.numpy as jnp, numpy as np
        import jaxcore
        from jaxcore import kernels, plugins, quant
        info = plugins.info()
        for p in info.plugins:
            print(p.name, p.module, p.origin, p.distribution, p.loaded, p.platforms)
        impls = kernels.registered_kernels("quantized_matmul")
        print(impls["cuda"].__module__, impls["rocm"].__module__)
        print("jaxcore_gpu" in sys.modules)
        kernel_module = sys.modules["jaxcore_cuda12._matmul"]
        real, modes = kernel_module._pallas_matmul, []
        def spy(*args):
            modes.append(args[-1])  # `interpret`
            return real(*args)
        kernel_module._pallas_matmul = spy
        w = jax.random.normal(jax.random.key(0), (256, 64))
        q = quant.ArrayNF4.quantize(w, 64)
        x = jax.random.normal(jax.random.key(1), (2, 3, 256))
        got = jax.jit(lambda x, q: kernels.quantized_matmul(x, q))(x, q)
        want = jnp.einsum("btk,kn->btn", x, q.materialize(), precision="highest")
        print(float(jnp.max(jnp.abs(got - want))) < 1e-4 * float(jnp.max(jnp.abs(want))))
        print(True in modes)
        """,
        {
            "PYTHONPATH": os.pathsep.join([str(site), *_paths_without_jaxcore()]),
            "JAXCORE_PALLAS_INTERPRET": "cuda",
        },
        site,
    )
    lines = out.splitlines()
    version = jaxcore.__version__
    assert f"cuda jaxcore_cuda12 entry_point jaxcore-cuda12 {version} True ('cuda',)" in lines
    assert f"rocm jaxcore_rocm6 entry_point jaxcore-rocm6 {version} True ('rocm',)" in lines
    assert "jaxcore_cuda12 jaxcore_rocm6" in lines
    # Self-contained (no source tree); the renamed Triton kernel ran interpreted on CPU
    # and its NF4 result matches the dense reference.
    assert lines[-3:] == ["False", "True", "True"]


def test_forced_reload_finds_the_source_plugins_again(monkeypatch):
    monkeypatch.setattr(plugins, "_info", plugins._info)
    monkeypatch.delenv(plugins.ENV_VAR, raising=False)
    info = plugins.load_plugins(force=True)
    native = {"cpu"} if NATIVE_CPU else set()
    assert set(info.platforms) == {"cuda", "rocm", "tpu"} | native
    assert plugins.info() is info


def _cpu_site(tmp_path, *, wheel, library):
    """A site dir with jaxcore and a copy of jaxcore_cpu: from source, or as the installed
    jaxcore-cpu wheel; with or without the native library next to its __init__.py."""
    site = tmp_path / "site"
    (site / "jaxcore_cpu").mkdir(parents=True)
    os.symlink(os.path.dirname(os.path.abspath(jaxcore.__file__)), site / "jaxcore")
    src = os.path.dirname(os.path.abspath(jaxcore_cpu.__file__))
    for name in os.listdir(src):
        if name.endswith(".py") and name != "_build_config.py":
            shutil.copy(os.path.join(src, name), site / "jaxcore_cpu" / name)
    dist = "jaxcore-cpu" if wheel else None
    (site / "jaxcore_cpu" / "_build_config.py").write_text(
        f'PLATFORMS = ("cpu",)\nVERSION = "{jaxcore.__version__}"\nDIST_NAME = {dist!r}\n'
    )
    if library:
        shutil.copy(library, site / "jaxcore_cpu" / "libjaxcore_cpu_kernels.so")
    if wheel:
        info = site / f"jaxcore_cpu-{jaxcore.__version__}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: jaxcore-cpu\nVersion: {jaxcore.__version__}\n"
        )
        (info / "entry_points.txt").write_text("[jaxcore_plugins]\ncpu = jaxcore_cpu\n")
    return site


_CPU_REPORT = """
    import warnings
    warnings.simplefilter("{warnings}")
    {first_import}
    import jax, jax.numpy as jnp, numpy as np
    from jaxcore import kernels, plugins, quant
    (status,) = [p for p in plugins.info().plugins if p.module == "jaxcore_cpu"]
    print(status.origin, status.loaded, status.platforms)
    print(status.reason)
    impl = kernels.registered_kernels("quantized_matmul")["cpu"]
    print("reference" if impl is kernels.reference_quantized_matmul else impl.__module__)
    w = jax.random.normal(jax.random.key(0), (128, 24))
    q = quant.ArrayNF4.quantize(w, 64)
    x = jax.random.normal(jax.random.key(1), (3, 128))
    got = jax.jit(kernels.quantized_matmul)(x, q)
    want = jnp.dot(x, q.materialize(), precision="highest")
    print(float(jnp.max(jnp.abs(got - want))) < 1e-5 * float(jnp.max(jnp.abs(want))))
"""


@pytest.mark.parametrize("first_import", ["import jaxcore", "import jaxcore_cpu"])
def test_source_cpu_plugin_without_library_is_skipped_quietly(tmp_path, first_import):
    site = _cpu_site(tmp_path, wheel=False, library=None)
    out = _run(
        _CPU_REPORT.format(warnings="error", first_import=first_import),
        {"PYTHONPATH": os.pathsep.join([str(site), *_paths_without_jaxcore()])},
        site,
    )
    origin_loaded, reason, impl, matches = out.splitlines()[:4]
    assert origin_loaded == "source False ()"
    assert reason.startswith(
        "unavailable: native kernel library libjaxcore_cpu_kernels.so not found"
    )
    assert str(site / "bazel-bin" / "jaxcore_cpu" / "libjaxcore_cpu_kernels.so") in reason
    assert (impl, matches) == ("reference", "True")


def test_cpu_wheel_without_library_warns_and_uses_the_reference(tmp_path):
    site = _cpu_site(tmp_path, wheel=True, library=None)
    out = _run(
        _CPU_REPORT.format(warnings="always", first_import="import jaxcore"),
        {"PYTHONPATH": os.pathsep.join([str(site), *_paths_without_jaxcore()])},
        site,
    )
    origin_loaded, reason, impl, matches = out.splitlines()[:4]
    assert origin_loaded == "entry_point False ()"
    assert reason.startswith("initialize() failed: LibraryNotFoundError: native kernel library")
    assert "the jaxcore-cpu wheel is incomplete; reinstall it" in reason
    assert (impl, matches) == ("reference", "True")


def test_missing_library_named_by_env_var_warns(tmp_path):
    site = _cpu_site(tmp_path, wheel=False, library=None)
    missing = str(tmp_path / "nowhere.so")
    out = _run(
        _CPU_REPORT.format(warnings="always", first_import="import jaxcore"),
        {
            "PYTHONPATH": os.pathsep.join([str(site), *_paths_without_jaxcore()]),
            jaxcore_cpu.ENV_VAR: missing,
        },
        site,
    )
    origin_loaded, reason, impl, matches = out.splitlines()[:4]
    assert origin_loaded == "source False ()"
    assert reason == (
        f"initialize() failed: LibraryNotFoundError: {jaxcore_cpu.ENV_VAR}="
        f"{missing!r}: does not name a file; point it at a built "
        f"libjaxcore_cpu_kernels.so or unset it"
    )
    assert (impl, matches) == ("reference", "True")


@pytest.mark.skipif(NATIVE_CPU is None, reason="the native CPU kernel library is not built")
@pytest.mark.parametrize("first_import", ["import jaxcore", "import jaxcore_cpu"])
def test_cpu_wheel_with_library_loads(tmp_path, first_import):
    site = _cpu_site(tmp_path, wheel=True, library=NATIVE_CPU)
    out = _run(
        _CPU_REPORT.format(warnings="error", first_import=first_import),
        {"PYTHONPATH": os.pathsep.join([str(site), *_paths_without_jaxcore()])},
        site,
    )
    assert out.splitlines()[:4] == [
        "entry_point True ('cpu',)",
        "None",
        "jaxcore_cpu._matmul",
        "True",
    ]


@pytest.mark.parametrize("selection", ["none", "cuda"])
def test_deselected_cpu_plugin_leaves_the_reference(tmp_path, selection):
    out = _run(
        _CPU_REPORT.format(warnings="error", first_import="import jaxcore"),
        {
            "PYTHONPATH": os.pathsep.join([_repo_root(), os.environ.get("PYTHONPATH", "")]),
            plugins.ENV_VAR: selection,
        },
        tmp_path,
    )
    assert out.splitlines()[:4] == [
        "source False ()",
        f"not selected by {plugins.ENV_VAR}",
        "reference",
        "True",
    ]


# ------------------------------------------------ hardening: transactions, hostile metadata


def _probe_kernel():
    """A kernel name of this test only, registered for cpu; returns (name, its impl)."""
    name = f"probe_{uuid.uuid4().hex[:8]}"

    def original(*args, **kwargs):
        return "original"

    kernels.register_kernel(name, "cpu", original)
    return name, original


def _registering_plugin(name, failure, *, at_import=False):
    """A plugin body that registers kernel ``name`` (replacing cpu, adding tpu), then fails."""
    register = (
        "from jaxcore import kernels\n"
        f"kernels.register_kernel({name!r}, 'cpu', lambda *a, **k: 'plugin')\n"
        f"kernels.register_kernel({name!r}, 'tpu', lambda *a, **k: 'plugin')\n"
    )
    if at_import:
        return "import jaxcore\n__version__ = jaxcore.__version__\n" + register + failure + "\n"
    indented = textwrap.indent(register + failure, "    ")
    return (
        "import jaxcore\n__version__ = jaxcore.__version__\nPLATFORMS = ('tpu',)\n"
        "def initialize(platforms):\n" + indented + "\n"
    )


@pytest.mark.parametrize("at_import", [False, True], ids=["initialize", "import"])
@pytest.mark.parametrize(
    "failure,reason",
    [
        ("raise RuntimeError('no device')", "RuntimeError: no device"),
        ("raise SystemExit(3)", "SystemExit: 3"),
        ("from jaxcore import plugins\nraise plugins.PluginUnavailable('not built')", "not built"),
    ],
    ids=["error", "system_exit", "unavailable"],
)
def test_failed_plugin_leaves_no_kernel_behind(sandbox, failure, reason, at_import):
    name, original = _probe_kernel()
    try:
        module = _fake_plugin(
            sandbox, platform="tpu", body=_registering_plugin(name, failure, at_import=at_import)
        )
        info, _ = _load()
        status = _status(info, module)
        assert not status.loaded and reason in status.reason
        # The replaced cpu kernel is back; the added tpu kernel is gone.
        assert kernels.registered_kernels(name) == {"cpu": original}
    finally:
        for platform in kernels.registered_kernels(name):
            kernels.unregister_kernel(name, platform)


def test_keyboard_interrupt_in_a_plugin_propagates_after_rollback(sandbox):
    name, original = _probe_kernel()
    try:
        _fake_plugin(
            sandbox, platform="tpu", body=_registering_plugin(name, "raise KeyboardInterrupt")
        )
        with pytest.raises(KeyboardInterrupt):
            plugins.load_plugins(force=True)
        assert kernels.registered_kernels(name) == {"cpu": original}
    finally:
        for platform in kernels.registered_kernels(name):
            kernels.unregister_kernel(name, platform)


def _broken_distribution(root, text: bytes, name="unrelated-tool"):
    info = root / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_bytes(text)
    return info / "entry_points.txt"


@pytest.mark.parametrize(
    "text,error",
    [
        (b"[console_scripts]\nno_equals_sign\n", "TypeError"),
        (b"\xff\xfe[console_scripts]\n", "UnicodeDecodeError"),
    ],
    ids=["no_value", "not_utf8"],
)
def test_unrelated_distribution_with_malformed_entry_points_is_listed_not_fatal(
    sandbox, text, error
):
    broken = _broken_distribution(sandbox, text)
    good = _fake_plugin(sandbox, platform="tpu", body=_GOOD)
    info, caught = _load()
    assert caught == []  # not ours: listed, not warned about
    assert _status(info, good).loaded  # the other plugins still load
    (status,) = [p for p in info.plugins if p.origin == "metadata"]
    assert status.name == "unrelated-tool" and not status.loaded
    assert f"cannot parse {broken} ({error}" in status.reason
    assert (
        f"unrelated-tool (entry_points.txt, unrelated-tool 1.0): skipped: cannot parse {broken}"
        in info.format()
    )


def test_malformed_entry_points_naming_our_group_warn(sandbox):
    _broken_distribution(sandbox, b"[jaxcore_plugins]\ntpu\n", name="jaxcore-broken")
    info, caught = _load()
    assert len(caught) == 1 and "cannot parse" in str(caught[0].message)
    assert [p.name for p in info.plugins if p.origin == "metadata"] == ["jaxcore-broken"]


@pytest.mark.parametrize(
    "body,reason",
    [
        (None, "cannot parse"),
        ("raise SystemExit('bye')\n", "import failed: SystemExit: bye"),
    ],
    ids=["malformed_metadata", "system_exit_at_import"],
)
def test_python_m_jaxcore_reports_the_skip(tmp_path, body, reason):
    if body is None:
        _broken_distribution(tmp_path, b"[console_scripts]\nno_equals_sign\n")
    else:
        _fake_plugin(tmp_path, platform="tpu", body=body)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXCORE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), _repo_root(), env.get("PYTHONPATH", "")])
    result = subprocess.run(
        [sys.executable, "-m", "jaxcore"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert reason in result.stdout and "skipped" in result.stdout

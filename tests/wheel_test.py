"""The four wheels: PEP 427 layout, metadata, RECORD hashes, reproducibility, and a real install.

Under Bazel the wheels are this test's data (`//:wheels`); under pytest they are read from
`bazel-bin/` (the README's test command runs Bazel first), or the test is skipped with a
note saying how to build them.
"""

import base64
import csv
import hashlib
import io
import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "build" / "wheel"))
import build_wheel  # noqa: E402

VERSION = "0.1.0"
WHEELS = {
    "jaxcore": ("jaxcore-0.1.0-py3-none-any.whl", "jaxcore", None),
    "jaxcore-cuda12": ("jaxcore_cuda12-0.1.0-py3-none-any.whl", "jaxcore_cuda12", "cuda"),
    "jaxcore-rocm6": ("jaxcore_rocm6-0.1.0-py3-none-any.whl", "jaxcore_rocm6", "rocm"),
    "jaxcore-tpu": ("jaxcore_tpu-0.1.0-py3-none-any.whl", "jaxcore_tpu", "tpu"),
}


def _wheel_dir():
    for candidate in (REPO / "jaxcore" / "tools", REPO / "bazel-bin" / "jaxcore" / "tools"):
        if all((candidate / w[0]).is_file() for w in WHEELS.values()):
            return candidate
    return None


@pytest.fixture(scope="module")
def wheel_dir():
    found = _wheel_dir()
    if found is None:
        pytest.skip("wheels not built: run `bazel build //:wheels` (the README's test command does)")
    return found


def _read(wheel_path):
    with zipfile.ZipFile(wheel_path) as zf:
        return {info.filename: (info, zf.read(info)) for info in zf.infolist()}


@pytest.mark.parametrize("dist", sorted(WHEELS))
def test_wheel_layout_metadata_and_record(wheel_dir, dist):
    filename, package, platform = WHEELS[dist]
    entries = _read(wheel_dir / filename)
    dist_info = f"{package}-{VERSION}.dist-info"

    # Every file lies in the package or its dist-info; nothing from another package leaks in.
    tops = {name.split("/", 1)[0] for name in entries}
    assert tops == {package, dist_info}
    assert f"{package}/__init__.py" in entries
    assert f"{package}/py.typed" in entries

    meta = Parser().parsestr(entries[f"{dist_info}/METADATA"][1].decode())
    assert meta["Metadata-Version"] == "2.1"
    assert meta["Name"] == dist
    assert meta["Version"] == VERSION
    assert meta["Requires-Python"] == ">=3.11"
    requires = meta.get_all("Requires-Dist")
    if platform is None:
        assert "jax==0.10.2" in requires and "jaxlib==0.10.2" in requires
        assert any(r.startswith("numpy") for r in requires)
    else:
        assert requires == [f"jaxcore=={VERSION}"]

    wheel_meta = Parser().parsestr(entries[f"{dist_info}/WHEEL"][1].decode())
    assert wheel_meta["Wheel-Version"] == "1.0"
    assert wheel_meta["Root-Is-Purelib"] == "true"
    assert wheel_meta["Tag"] == "py3-none-any"

    # RECORD: every other file, with its urlsafe-base64 sha256 and size; itself unhashed.
    record = list(csv.reader(io.StringIO(entries[f"{dist_info}/RECORD"][1].decode())))
    listed = {row[0]: row for row in record}
    assert set(listed) == set(entries)
    for name, (info, data) in entries.items():
        if name == f"{dist_info}/RECORD":
            assert listed[name][1:] == ["", ""]
            continue
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert listed[name][1] == f"sha256={digest}", name
        assert listed[name][2] == str(len(data)), name
        assert info.date_time == (1980, 1, 1, 0, 0, 0), name
        assert (info.external_attr >> 16) & 0o777 == 0o644, name

    if platform is None:
        assert f"{dist_info}/entry_points.txt" not in entries
    else:
        entry_points = entries[f"{dist_info}/entry_points.txt"][1].decode()
        assert entry_points.splitlines()[:2] == ["[jaxcore_plugins]", f"{platform} = {package}"]
        config = entries[f"{package}/_build_config.py"][1].decode()
        namespace = {}
        exec(config, namespace)
        assert namespace["PLATFORMS"] == (platform,)
        assert namespace["VERSION"] == VERSION
        assert namespace["DIST_NAME"] == dist


def test_gpu_wheels_share_one_source_tree(wheel_dir):
    cuda = _read(wheel_dir / WHEELS["jaxcore-cuda12"][0])
    rocm = _read(wheel_dir / WHEELS["jaxcore-rocm6"][0])
    strip = lambda entries, pkg: {
        n[len(pkg) + 1:]: d for n, (_, d) in entries.items()
        if n.startswith(pkg + "/") and not n.endswith("_build_config.py")
    }
    assert strip(cuda, "jaxcore_cuda12") == strip(rocm, "jaxcore_rocm6")
    source = {p.name for p in (REPO / "jaxcore_gpu").glob("*.py")}
    assert source <= set(strip(cuda, "jaxcore_cuda12")) | {"_build_config.py"}


def _manifest(tmp_path, src_dir, order):
    files = [[str(src_dir / name), f"pkg/{name}"] for name in order]
    return {
        "dist_name": "demo-pkg", "version": "1.2.3", "summary": "demo", "license": "MIT",
        "classifiers": [], "requires_python": ">=3.11", "requires": ["numpy"],
        "python_tag": "py3", "abi_tag": "none", "platform_tag": "any",
        "entry_points": {"jaxcore_plugins": {"cuda": "pkg"}}, "files": files,
        "generated": {"pkg/_build_config.py": "X = 1\n"}, "version_file": "", "description_file": "",
    }


def test_wheel_builder_is_reproducible(tmp_path, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    for name, text in {"__init__.py": "A = 1\n", "b.py": "B = 2\n", "_build_config.py": "X = 0\n"}.items():
        (src / name).write_text(text)
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    first = tmp_path / "first.whl"
    build_wheel.write_wheel(_manifest(tmp_path, src, ["__init__.py", "b.py", "_build_config.py"]), first)
    # Different mtimes and a different input order must not change a byte.
    for path in src.iterdir():
        os.utime(path, (2_000_000_000, 2_000_000_000))
    second = tmp_path / "second.whl"
    build_wheel.write_wheel(_manifest(tmp_path, src, ["b.py", "_build_config.py", "__init__.py"]), second)
    assert first.read_bytes() == second.read_bytes()
    with zipfile.ZipFile(first) as zf:
        assert zf.read("pkg/_build_config.py") == b"X = 1\n"  # generated wins over the source
        assert zf.namelist()[-1] == "demo_pkg-1.2.3.dist-info/RECORD"

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    third = tmp_path / "third.whl"
    build_wheel.write_wheel(_manifest(tmp_path, src, ["__init__.py", "b.py"]), third)
    with zipfile.ZipFile(third) as zf:
        assert {i.date_time for i in zf.infolist()} == {(2023, 11, 14, 22, 13, 20)}


def test_wheel_builder_errors_leave_no_file(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.py").write_text("")
    (tmp_path / "_version.py").write_text('__version__ = "9.9.9"\n')
    manifest = _manifest(tmp_path, src, ["a.py"])
    manifest["version_file"] = str(tmp_path / "_version.py")
    out = tmp_path / "out.whl"
    with pytest.raises(build_wheel.WheelError, match="version mismatch.*9.9.9.*1.2.3"):
        build_wheel.write_wheel(manifest, out)
    manifest["version_file"] = ""
    manifest["files"].append([str(src / "a.py"), "pkg/../evil.py"])
    with pytest.raises(build_wheel.WheelError, match="bad path in wheel"):
        build_wheel.write_wheel(manifest, out)
    assert list(tmp_path.glob("*.whl")) == [] and list(tmp_path.glob(".wheel-*")) == []


_INSTALLED_CHECK = """
import json, jax, jax.numpy as jnp, numpy as np
import jaxcore, jaxcore.plugins
from jaxcore import quant
w = np.random.default_rng(0).standard_normal((128, 32)).astype(np.float32)
x = np.random.default_rng(1).standard_normal((4, 128)).astype(np.float32)
q = quant.ArrayNF4.quantize(jnp.asarray(w), block_size=64)
y = jax.jit(jaxcore.kernels.quantized_matmul)(jnp.asarray(x), q)
ref = x @ np.asarray(q.materialize())
info = jaxcore.plugins.info()
print(json.dumps({
    "jaxcore_file": jaxcore.__file__,
    "max_err": float(np.max(np.abs(np.asarray(y) - ref))),
    "platforms": sorted(info.platforms),
    "loaded": sorted(s.name for s in info.loaded),
    "report": info.format(),
}))
"""


def test_wheels_install_into_a_fresh_venv_and_run(wheel_dir, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # jax and numpy come from this interpreter's site-packages (no network); jaxcore does not.
    Path(site, "outer_site.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JAXCORE_PLUGINS", "PYTHONSAFEPATH")}
    wheels = [str(wheel_dir / w[0]) for w in WHEELS.values()]
    install = subprocess.run([str(python), "-m", "pip", "install", "--no-index", "--disable-pip-version-check", *wheels],
                             capture_output=True, text=True, env=env, cwd=tmp_path)
    assert install.returncode == 0, install.stdout + install.stderr
    run = subprocess.run([str(python), "-c", _INSTALLED_CHECK], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["jaxcore_file"].startswith(site)
    assert result["max_err"] < 1e-3
    assert {"cuda", "rocm", "tpu"} <= set(result["platforms"]), result["report"]
    # `python -m jaxcore` lists the installed plugins, from their wheels.
    listing = subprocess.run([str(python), "-m", "jaxcore"], capture_output=True, text=True,
                             env=env, cwd=tmp_path, timeout=300)
    assert listing.returncode == 0, listing.stderr
    for dist, (_, package, platform) in WHEELS.items():
        if platform:
            assert f"{platform} ({package}, {dist} {VERSION}" in listing.stdout, listing.stdout

"""The five wheels: PEP 427 layout, metadata, RECORD hashes, reproducibility, and a real install.

jaxcore-cpu is the one wheel with native code: it carries libjaxcore_cpu_kernels.so and the
manylinux platform tag of jaxcore/tools/platform_tags.bzl, which the wheel builder checks
against the library's glibc needs (tested here on the built library and on made-up ones).

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
import platform
import re
import struct
import subprocess
import sys
import sysconfig
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "build" / "wheel"))
import build_wheel  # noqa: E402 - after the environment set-up above

VERSION = "0.1.0"
# The tested JAX range (jaxcore/version.bzl; tests/jax_version_test.py checks it against
# jaxcore/_jax_internals.py).
JAX_REQUIRES = "jax>=0.10.2,<0.12.1"
JAXLIB_REQUIRES = "jaxlib>=0.10.2,<0.12.1"


def _native_tag():
    text = (REPO / "jaxcore" / "tools" / "platform_tags.bzl").read_text()
    tags = dict(re.findall(r'"(\w+)": "(\w+)"', text))
    return tags.get(platform.machine(), "unknown")


NATIVE_TAG = _native_tag()
NATIVE_LIB = "jaxcore_cpu/libjaxcore_cpu_kernels.so"
WHEELS = {
    "jaxcore": ("jaxcore-0.1.0-py3-none-any.whl", "jaxcore", None),
    "jaxcore-cpu": (f"jaxcore_cpu-0.1.0-py3-none-{NATIVE_TAG}.whl", "jaxcore_cpu", "cpu"),
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
        pytest.skip(
            "wheels not built: run `bazel build //:wheels` (the README's test command does)"
        )
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
        assert JAX_REQUIRES in requires and JAXLIB_REQUIRES in requires
        assert any(r.startswith("numpy") for r in requires)
    else:
        assert requires == [f"jaxcore=={VERSION}", JAXLIB_REQUIRES]

    wheel_meta = Parser().parsestr(entries[f"{dist_info}/WHEEL"][1].decode())
    assert wheel_meta["Wheel-Version"] == "1.0"
    native = dist == "jaxcore-cpu"
    assert wheel_meta["Root-Is-Purelib"] == ("false" if native else "true")
    assert wheel_meta["Tag"] == f"py3-none-{NATIVE_TAG if native else 'any'}"
    binaries = sorted(n for n, (_, d) in entries.items() if build_wheel.is_elf(d))
    assert binaries == ([NATIVE_LIB] if native else [])

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


def test_cpu_wheel_ships_the_native_library_for_its_tag(wheel_dir):
    entries = _read(wheel_dir / WHEELS["jaxcore-cpu"][0])
    lib = entries[NATIVE_LIB][1]
    cpu, needed, versions = build_wheel.elf_dependencies(lib, NATIVE_LIB)
    assert cpu == platform.machine()
    # libstdc++ and libgcc are linked in: glibc is all it needs, as manylinux requires.
    assert set(needed) <= {
        "libc.so.6",
        "libm.so.6",
        "libpthread.so.0",
        "ld-linux-x86-64.so.2",
        "ld-linux-aarch64.so.1",
    }, needed
    glibc = [
        tuple(map(int, v[6:].split(".")[:2]))
        for vs in versions.values()
        for v in vs
        if v.startswith("GLIBC_")
    ]
    major, minor = map(int, re.match(r"manylinux_(\d+)_(\d+)_", NATIVE_TAG).groups())
    assert max(glibc) <= (major, minor)
    # Exactly the FFI handler and the ISA helpers are exported, and the build directory
    # (sandbox or checkout path) appears nowhere in the library.
    assert b"JaxcoreCpuQuantizedMatmul" in lib and b"JaxcoreCpuSetIsa" in lib
    for marker in (b"execroot", b"bazel-out", b"/proc/self/cwd", str(REPO).encode()):
        assert marker not in lib, marker
    # The Python sources beside it are the package's own.
    source = {p.name for p in (REPO / "jaxcore_cpu").glob("*.py")}
    shipped = {n.split("/", 1)[1] for n in entries if n.startswith("jaxcore_cpu/")}
    assert source | {"_build_config.py", "py.typed", "libjaxcore_cpu_kernels.so"} == shipped


def _fake_elf(machine=62, needed=("libc.so.6",), versions=(("libc.so.6", "GLIBC_2.17"),)):
    """A minimal little-endian ELF64 with a dynamic section and version needs."""
    strtab = b"\0"
    offsets = {}
    for name in [*needed, *[lib for lib, _ in versions], *[v for _, v in versions]]:
        if name not in offsets:
            offsets[name] = len(strtab)
            strtab += name.encode() + b"\0"
    dynamic = b"".join(struct.pack("<qQ", 1, offsets[n]) for n in needed) + struct.pack("<qQ", 0, 0)
    verneed = b""
    libs = list(dict.fromkeys(lib for lib, _ in versions))
    for i, lib in enumerate(libs):
        names = [v for owner, v in versions if owner == lib]
        nxt = 0 if i == len(libs) - 1 else 16 + 16 * len(names)
        verneed += struct.pack("<HHIII", 1, len(names), offsets[lib], 16, nxt)
        for j, v in enumerate(names):
            verneed += struct.pack("<IHHII", 0, 0, 0, offsets[v], 16 if j < len(names) - 1 else 0)
    body = strtab + dynamic + verneed
    shoff = 64 + len(body)
    header = _elf_header(machine, shoff, 4)
    sections = [
        struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, 64, len(strtab), 0, 0, 1, 0),
        struct.pack("<IIQQQQIIQQ", 0, 6, 0, 0, 64 + len(strtab), len(dynamic), 1, 0, 8, 16),
        struct.pack(
            "<IIQQQQIIQQ",
            0,
            0x6FFFFFFE,
            0,
            0,
            64 + len(strtab) + len(dynamic),
            len(verneed),
            1,
            len(libs),
            8,
            0,
        ),
    ]
    return header + body + b"".join(sections)


def _elf_header(machine, shoff, shnum):
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    return ident + struct.pack(
        "<HHIQQQIHHHHHH", 3, machine, 1, 0, 0, shoff, 0, 64, 0, 0, 64, shnum, 1
    )


@pytest.mark.parametrize(
    "tag, binary, message",
    [
        ("any", _fake_elf(), "cannot be tagged 'any'"),
        (
            "manylinux_2_17_x86_64",
            _fake_elf(versions=(("libc.so.6", "GLIBC_2.34"),)),
            "needs GLIBC_2.34, newer than manylinux_2_17_x86_64 allows; tag the wheel manylinux_2_34_x86_64",
        ),
        (
            "manylinux_2_35_x86_64",
            _fake_elf(needed=("libc.so.6", "libstdc++.so.6")),
            "needs libstdc++.so.6, which manylinux_2_35_x86_64 does not allow",
        ),
        (
            "manylinux_2_35_aarch64",
            _fake_elf(),
            "is x86_64 code but the wheel is tagged manylinux_2_35_aarch64",
        ),
        ("linux_aarch64", _fake_elf(), "is x86_64 code"),
        ("win_amd64", _fake_elf(), "unsupported platform tag 'win_amd64'"),
        (
            "manylinux_2_35_x86_64",
            b"\x7fELF" + bytes([1, 1]) + bytes(58),
            "only little-endian 64-bit",
        ),
        ("manylinux_2_35_x86_64", b"\x7fELF" + bytes([2, 1]) + bytes(20), "truncated or malformed"),
    ],
)
def test_wheel_builder_refuses_a_dishonest_platform_tag(tmp_path, tag, binary, message):
    src = tmp_path / "src"
    src.mkdir()
    (src / "__init__.py").write_text("")
    (src / "lib.so").write_bytes(binary)
    manifest = _manifest(tmp_path, src, ["__init__.py", "lib.so"])
    manifest["platform_tag"] = tag
    with pytest.raises(build_wheel.WheelError, match=re.escape(message)):
        build_wheel.write_wheel(manifest, tmp_path / "out.whl")
    assert list(tmp_path.glob("*.whl")) == [] and list(tmp_path.glob(".wheel-*")) == []


def test_wheel_builder_accepts_an_honest_platform_tag(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "__init__.py").write_text("")
    (src / "lib.so").write_bytes(
        _fake_elf(
            needed=("libc.so.6", "libm.so.6"),
            versions=(
                ("libc.so.6", "GLIBC_2.2.5"),
                ("libc.so.6", "GLIBC_2.17"),
                ("libm.so.6", "GLIBC_2.2.5"),
            ),
        )
    )
    assert build_wheel.elf_dependencies((src / "lib.so").read_bytes()) == (
        "x86_64",
        ["libc.so.6", "libm.so.6"],
        {"libc.so.6": ["GLIBC_2.2.5", "GLIBC_2.17"], "libm.so.6": ["GLIBC_2.2.5"]},
    )
    manifest = _manifest(tmp_path, src, ["__init__.py", "lib.so"])
    for tag in ("manylinux_2_17_x86_64", "linux_x86_64"):
        manifest["platform_tag"] = tag
        build_wheel.write_wheel(manifest, tmp_path / "out.whl")
        with zipfile.ZipFile(tmp_path / "out.whl") as zf:
            wheel = zf.read("demo_pkg-1.2.3.dist-info/WHEEL").decode()
        assert f"Tag: py3-none-{tag}\n" in wheel and "Root-Is-Purelib: false\n" in wheel


def test_gpu_wheels_share_one_source_tree(wheel_dir):
    cuda = _read(wheel_dir / WHEELS["jaxcore-cuda12"][0])
    rocm = _read(wheel_dir / WHEELS["jaxcore-rocm6"][0])
    strip = lambda entries, pkg: {
        n[len(pkg) + 1 :]: d
        for n, (_, d) in entries.items()
        if n.startswith(pkg + "/") and not n.endswith("_build_config.py")
    }
    assert strip(cuda, "jaxcore_cuda12") == strip(rocm, "jaxcore_rocm6")
    source = {p.name for p in (REPO / "jaxcore_gpu").glob("*.py")}
    assert source <= set(strip(cuda, "jaxcore_cuda12")) | {"_build_config.py"}


def _manifest(tmp_path, src_dir, order):
    files = [[str(src_dir / name), f"pkg/{name}"] for name in order]
    return {
        "dist_name": "demo-pkg",
        "version": "1.2.3",
        "summary": "demo",
        "license": "MIT",
        "classifiers": [],
        "requires_python": ">=3.11",
        "requires": ["numpy"],
        "python_tag": "py3",
        "abi_tag": "none",
        "platform_tag": "any",
        "entry_points": {"jaxcore_plugins": {"cuda": "pkg"}},
        "files": files,
        "generated": {"pkg/_build_config.py": "X = 1\n"},
        "version_file": "",
        "description_file": "",
    }


def test_wheel_builder_is_reproducible(tmp_path, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    for name, text in {
        "__init__.py": "A = 1\n",
        "b.py": "B = 2\n",
        "_build_config.py": "X = 0\n",
    }.items():
        (src / name).write_text(text)
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    first = tmp_path / "first.whl"
    build_wheel.write_wheel(
        _manifest(tmp_path, src, ["__init__.py", "b.py", "_build_config.py"]), first
    )
    # Different mtimes and a different input order must not change a byte.
    for path in src.iterdir():
        os.utime(path, (2_000_000_000, 2_000_000_000))
    second = tmp_path / "second.whl"
    build_wheel.write_wheel(
        _manifest(tmp_path, src, ["b.py", "_build_config.py", "__init__.py"]), second
    )
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
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # jax and numpy come from this interpreter's site-packages (no network); jaxcore does not.
    Path(site, "outer_site.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "JAXCORE_PLUGINS", "PYTHONSAFEPATH")
    }
    wheels = [str(wheel_dir / w[0]) for w in WHEELS.values()]
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-index", "--disable-pip-version-check", *wheels],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    run = subprocess.run(
        [str(python), "-c", _INSTALLED_CHECK],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["jaxcore_file"].startswith(site)
    assert result["max_err"] < 1e-3
    assert {"cpu", "cuda", "rocm", "tpu"} <= set(result["platforms"]), result["report"]
    # `python -m jaxcore` lists the installed plugins, from their wheels.
    listing = subprocess.run(
        [str(python), "-m", "jaxcore"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert listing.returncode == 0, listing.stderr
    for dist, (_, package, plat) in WHEELS.items():
        if plat:
            assert f"{plat} ({package}, {dist} {VERSION}" in listing.stdout, listing.stdout

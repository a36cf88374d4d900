#!/usr/bin/env python3
"""Writes a PEP 427 wheel from a JSON manifest, byte-for-byte reproducibly.

The manifest (written by the `py_wheel_dist` Bazel rule in build/wheel/wheel.bzl) lists the
files to package and their paths inside the wheel, files generated from text, and the
metadata. The same inputs always give the same bytes: entries are sorted, every timestamp
is SOURCE_DATE_EPOCH (default 1980-01-01, the earliest a zip can hold), permissions are
fixed, and the compression level is pinned.

A wheel with native code (ELF files) must carry an honest platform tag, and this builder
checks it the way `auditwheel show` would for the parts that decide a manylinux tag: every
ELF file is for the tag's CPU, needs no shared library beyond glibc's (libstdc++ and libgcc
linked statically), and no glibc symbol version newer than `manylinux_X_Y` allows. A
`linux_<arch>` tag only checks the CPU; `any` admits no ELF file at all. Such a wheel is not
pure Python, so its WHEEL file says `Root-Is-Purelib: false`.

Usage: build_wheel.py MANIFEST_JSON OUTPUT_WHL
"""

import base64
import hashlib
import json
import os
import re
import stat
import struct
import sys
import tempfile
import time
import zipfile

# The zip format cannot store times before 1980.
_ZIP_EPOCH = 315532800
_COMPRESSION_LEVEL = 6
_VERSION_RE = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)
_WHEEL_PATH_RE = re.compile(r"^[A-Za-z0-9_.\-/]+$")


class WheelError(Exception):
    """A problem with the manifest or its inputs; the message names it."""


# --- Native code: ELF files against the platform tag -----------------------------------------

_ELF_MAGIC = b"\x7fELF"
_ELF_MACHINES = {62: "x86_64", 183: "aarch64"}
_SHT_DYNAMIC = 6
_SHT_GNU_VERNEED = 0x6FFFFFFE
_DT_NEEDED = 1
# Shared libraries every manylinux system has: glibc's own (PEP 600).
_MANYLINUX_LIBS = frozenset(
    {
        "libc.so.6",
        "libm.so.6",
        "libpthread.so.0",
        "libdl.so.2",
        "librt.so.1",
        "libresolv.so.2",
        "libutil.so.1",
        "ld-linux-x86-64.so.2",
        "ld-linux-aarch64.so.1",
    }
)
_MANYLINUX_TAG_RE = re.compile(r"^manylinux_(\d+)_(\d+)_(\w+)$")
_LINUX_TAG_RE = re.compile(r"^linux_(\w+)$")


def is_elf(data):
    return data[:4] == _ELF_MAGIC


def elf_dependencies(data, name="ELF file"):
    """Returns (cpu, needed shared libraries, {library: [symbol versions]}) of an ELF file.

    Reads the section headers of a little-endian 64-bit ELF file: DT_NEEDED entries of the
    dynamic section and the version needs (.gnu.version_r), with names from their string
    tables. Raises WheelError for anything else.
    """

    def fail(what):
        raise WheelError(f"{name}: {what}")

    if not is_elf(data):
        fail("not an ELF file")
    if data[4] != 2 or data[5] != 1:
        fail("only little-endian 64-bit ELF files are supported")
    try:
        (machine,) = struct.unpack_from("<H", data, 18)
        (shoff,) = struct.unpack_from("<Q", data, 40)
        shentsize, shnum = struct.unpack_from("<HH", data, 58)
        sections = [
            struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)
        ]

        def section_bytes(sec):
            return data[sec[4] : sec[4] + sec[5]]

        def string(strtab, offset):
            end = strtab.index(b"\0", offset)
            return strtab[offset:end].decode("ascii")

        needed, versions = [], {}
        for sec in sections:
            kind, link = sec[1], sec[6]
            if kind not in (_SHT_DYNAMIC, _SHT_GNU_VERNEED):
                continue
            strtab = section_bytes(sections[link])
            body = section_bytes(sec)
            if kind == _SHT_DYNAMIC:
                for off in range(0, len(body) - 15, 16):
                    tag, value = struct.unpack_from("<qQ", body, off)
                    if tag == 0:
                        break
                    if tag == _DT_NEEDED:
                        needed.append(string(strtab, value))
                continue
            off = 0
            while True:
                _, count, file_off, aux, nxt = struct.unpack_from("<HHIII", body, off)
                library = string(strtab, file_off)
                aux_off = off + aux
                for _ in range(count):
                    _, _, _, name_off, aux_next = struct.unpack_from("<IHHII", body, aux_off)
                    versions.setdefault(library, []).append(string(strtab, name_off))
                    aux_off += aux_next
                if not nxt:
                    break
                off += nxt
    except (struct.error, ValueError, IndexError):
        fail("truncated or malformed ELF file")
    return _ELF_MACHINES.get(machine, f"machine {machine}"), needed, versions


def _glibc_version(version):
    found = re.fullmatch(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?", version)
    return (int(found.group(1)), int(found.group(2))) if found else None


def check_platform_tag(platform_tag, binaries):
    """Checks {path in wheel: ELF bytes} against `platform_tag`; raises WheelError if wrong."""
    if platform_tag == "any":
        if binaries:
            raise WheelError(
                f"{', '.join(sorted(binaries))} is native code; a wheel holding it cannot be "
                "tagged 'any' (give the rule a manylinux or linux platform_tag)"
            )
        return
    manylinux = _MANYLINUX_TAG_RE.match(platform_tag)
    linux = _LINUX_TAG_RE.match(platform_tag)
    if not manylinux and not linux:
        raise WheelError(
            f"unsupported platform tag {platform_tag!r}: use manylinux_X_Y_<arch>, linux_<arch> or any"
        )
    arch = (manylinux or linux).groups()[-1]
    for path, data in sorted(binaries.items()):
        cpu, needed, versions = elf_dependencies(data, path)
        if cpu != arch:
            raise WheelError(f"{path} is {cpu} code but the wheel is tagged {platform_tag}")
        if not manylinux:
            continue
        extra = [lib for lib in needed if lib not in _MANYLINUX_LIBS]
        if extra:
            raise WheelError(
                f"{path} needs {', '.join(extra)}, which {platform_tag} does not allow a wheel "
                "to assume (link it statically, or tag the wheel linux_" + arch + ")"
            )
        glibc = [v for vs in versions.values() for v in vs if _glibc_version(v)]
        newest = max(glibc, key=_glibc_version, default=None)
        allowed = (int(manylinux.group(1)), int(manylinux.group(2)))
        if newest and _glibc_version(newest) > allowed:
            need = "{}_{}".format(*_glibc_version(newest))
            raise WheelError(
                f"{path} needs {newest}, newer than {platform_tag} allows; tag the wheel "
                f"manylinux_{need}_{arch} (jaxcore/tools/platform_tags.bzl) or build on an older glibc"
            )


def _timestamp():
    raw = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if not raw:
        epoch = _ZIP_EPOCH
    else:
        try:
            epoch = int(raw)
        except ValueError:
            raise WheelError(f"SOURCE_DATE_EPOCH must be an integer, got {raw!r}") from None
        epoch = max(epoch, _ZIP_EPOCH)
    return time.gmtime(epoch)[:6]


def normalize_dist_name(name):
    """Returns the wheel-filename form of a distribution name (PEP 427/503)."""
    return re.sub(r"[-_.]+", "_", name)


def _record_hash(data):
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _metadata(m, description):
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {m['dist_name']}",
        f"Version: {m['version']}",
        f"Summary: {m['summary']}",
        f"Requires-Python: {m['requires_python']}",
        f"License: {m['license']}",
    ]
    lines += [f"Classifier: {c}" for c in m.get("classifiers", [])]
    lines += [f"Requires-Dist: {r}" for r in m["requires"]]
    if description:
        lines.append("Description-Content-Type: text/markdown")
        return "\n".join(lines) + "\n\n" + description
    return "\n".join(lines) + "\n"


def _wheel_file(m):
    tag = f"{m['python_tag']}-{m['abi_tag']}-{m['platform_tag']}"
    purelib = "true" if m["platform_tag"] == "any" else "false"
    return (
        "Wheel-Version: 1.0\n"
        "Generator: jaxcore build_wheel\n"
        f"Root-Is-Purelib: {purelib}\n"
        f"Tag: {tag}\n"
    )


def _entry_points(groups):
    out = []
    for group in sorted(groups):
        out.append(f"[{group}]")
        for name in sorted(groups[group]):
            out.append(f"{name} = {groups[group][name]}")
        out.append("")
    return "\n".join(out)


def collect_entries(m):
    """Returns {path in wheel: bytes} for every file of the wheel except RECORD."""
    entries = {}
    for src, dst in m["files"]:
        if not _WHEEL_PATH_RE.match(dst) or dst.startswith("/") or ".." in dst.split("/"):
            raise WheelError(f"bad path in wheel: {dst!r}")
        if dst in entries:
            raise WheelError(f"two files map to {dst!r} in the wheel")
        with open(src, "rb") as f:
            entries[dst] = f.read()
    for dst, text in m["generated"].items():
        # Generated files win over sources of the same path (e.g. _build_config.py).
        entries[dst] = text.encode("utf-8")
    if not entries:
        raise WheelError(f"wheel {m['dist_name']} would contain no files")
    check_platform_tag(m["platform_tag"], {p: d for p, d in entries.items() if is_elf(d)})

    version_file = m.get("version_file")
    if version_file:
        with open(version_file, encoding="utf-8") as f:
            found = _VERSION_RE.search(f.read())
        if not found:
            raise WheelError(f"{version_file} defines no __version__")
        if found.group(1) != m["version"]:
            raise WheelError(
                f"version mismatch: {version_file} says {found.group(1)!r} but the "
                f"wheel rule says {m['version']!r} (jaxcore/version.bzl); make them equal"
            )

    description = ""
    if m.get("description_file"):
        with open(m["description_file"], encoding="utf-8") as f:
            description = f.read()

    dist_info = f"{normalize_dist_name(m['dist_name'])}-{m['version']}.dist-info"
    entries[f"{dist_info}/METADATA"] = _metadata(m, description).encode("utf-8")
    entries[f"{dist_info}/WHEEL"] = _wheel_file(m).encode("utf-8")
    top_level = sorted(
        {p.split("/", 1)[0] for p in entries if "/" in p and not p.startswith(dist_info)}
    )
    entries[f"{dist_info}/top_level.txt"] = ("\n".join(top_level) + "\n").encode("utf-8")
    if m["entry_points"]:
        entries[f"{dist_info}/entry_points.txt"] = _entry_points(m["entry_points"]).encode("utf-8")
    return dist_info, entries


def write_wheel(m, output):
    """Writes the wheel described by manifest `m` to `output`, atomically."""
    dist_info, entries = collect_entries(m)
    record_path = f"{dist_info}/RECORD"
    record = [f"{p},{_record_hash(d)},{len(d)}" for p, d in sorted(entries.items())]
    record.append(f"{record_path},,")
    entries[record_path] = ("\n".join(record) + "\n").encode("utf-8")

    date_time = _timestamp()
    # dist-info last, as PEP 427 recommends, and RECORD very last.
    order = sorted(p for p in entries if not p.startswith(dist_info))
    order += sorted(p for p in entries if p.startswith(dist_info) and p != record_path)
    order.append(record_path)

    out_dir = os.path.dirname(os.path.abspath(output))
    fd, tmp = tempfile.mkstemp(prefix=".wheel-", suffix=".tmp", dir=out_dir)
    try:
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w") as zf:
            for path in order:
                info = zipfile.ZipInfo(path, date_time=date_time)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = (stat.S_IFREG | 0o644) << 16
                info.create_system = 3  # Unix, so the mode bits are honoured.
                zf.writestr(info, entries[path], compresslevel=_COMPRESSION_LEVEL)
        os.replace(tmp, output)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        with open(argv[1], encoding="utf-8") as f:
            manifest = json.load(f)
        write_wheel(manifest, argv[2])
    except (WheelError, OSError) as e:
        print(f"build_wheel: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

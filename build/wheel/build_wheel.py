#!/usr/bin/env python3
"""Writes a PEP 427 wheel from a JSON manifest, byte-for-byte reproducibly.

The manifest (written by the `py_wheel_dist` Bazel rule in build/wheel/wheel.bzl) lists the
files to package and their paths inside the wheel, files generated from text, and the
metadata. The same inputs always give the same bytes: entries are sorted, every timestamp
is SOURCE_DATE_EPOCH (default 1980-01-01, the earliest a zip can hold), permissions are
fixed, and the compression level is pinned.

Usage: build_wheel.py MANIFEST_JSON OUTPUT_WHL
"""

import base64
import hashlib
import json
import os
import re
import stat
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


def _timestamp():
    raw = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if not raw:
        epoch = _ZIP_EPOCH
    else:
        try:
            epoch = int(raw)
        except ValueError:
            raise WheelError(f"SOURCE_DATE_EPOCH must be an integer, got {raw!r}")
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
    return (
        "Wheel-Version: 1.0\n"
        "Generator: jaxcore build_wheel\n"
        "Root-Is-Purelib: true\n"
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
    top_level = sorted({p.split("/", 1)[0] for p in entries if "/" in p and not p.startswith(dist_info)})
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

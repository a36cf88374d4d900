"""The CI Dockerfiles are pinned and agree with build/build.py and .bazelrc.

build/build.py's toolchain constants, .bazelrc's accelerator versions and the Dockerfiles'
ARG defaults name the same versions in three places; these tests read all three and fail on
any mismatch. Every image pins the C++ compiler the native CPU kernels are built with
(`GCC_VERSION`), and the CPU image -- which builds the released jaxcore-cpu wheel -- pins
exactly build.py's CXX_COMPILER_VERSION. They also fail on what would make an image irreproducible: a base image
without an exact tag and digest, `:latest`, an `apt-get install` without a version, an
`ADD <url>`, a download whose checksum is not checked, or a source tree copied into the image.

The checks are plain functions over the files' text, so each failure mode is also tested
against a small Dockerfile that has exactly that fault.
"""

import ast
import re
import shlex
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCKER_DIR = REPO / "docker"
BACKENDS = ("cpu", "cuda", "rocm")
# The only files an image may COPY from the build context: the lock files run_docker.sh puts
# there (build/requirements_lock.txt, and build/requirements_lock_3_13.txt for the CPU image).
LOCK_COPY = re.compile(r"requirements_lock(_\d+_\d+)?\.txt")

DIGEST_REF = re.compile(
    r"^(?P<repo>[a-z0-9]+(?:[._/-][a-z0-9]+)*):(?P<tag>[\w][\w.-]*)@sha256:[0-9a-f]{64}$"
)
VAR = re.compile(r"\$\{(\w+)\}|\$(\w+)")


# ---- readers ------------------------------------------------------------------------------


def build_py_versions(text):
    """Returns the toolchain constants assigned at module level in build/build.py's text."""
    wanted = {
        "PYTHON_VERSION",
        "BAZEL_VERSION",
        "DEFAULT_CUDA_MAJOR_VERSION",
        "CUDA_VERSIONS",
        "CUDNN_VERSION",
        "ROCM_VERSION",
        "CXX_COMPILER_VERSION",
    }
    found = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id in wanted:
                found[target.id] = ast.literal_eval(node.value)
    missing = wanted - found.keys()
    if missing:
        raise ValueError(f"build/build.py does not define {sorted(missing)}")
    return found


def bazelrc_versions(text):
    """Returns {JAXCORE_CUDA_VERSION: ..., ...} from the `build:<config> --action_env` lines."""
    found = {}
    for _config, name, value in re.findall(
        r"^build:(cuda|rocm)\s+--action_env=(JAXCORE_\w+_VERSION)=(\S+)\s*$", text, re.MULTILINE
    ):
        found[name] = value
    return found


def instructions(text):
    """Splits a Dockerfile into (INSTRUCTION, arguments) pairs.

    Continuation lines are joined and comment lines dropped, as Docker does.
    """
    result = []
    current = ""
    for line in text.splitlines():
        if line.lstrip().startswith("#") or (not line.strip() and not current):
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        keyword, _, args = current.strip().partition(" ")
        result.append((keyword.upper(), args.strip()))
        current = ""
    if current.strip():
        keyword, _, args = current.strip().partition(" ")
        result.append((keyword.upper(), args.strip()))
    return result


def arg_defaults(instrs):
    """Returns {name: [default, ...]} for every `ARG name=default` (all stages)."""
    defaults = {}
    for keyword, args in instrs:
        if keyword == "ARG" and "=" in args:
            name, _, value = args.partition("=")
            defaults.setdefault(name.strip(), []).append(value.strip().strip('"'))
    return defaults


def expand(text, defaults):
    """Substitutes ${NAME} / $NAME with ARG defaults (names without one stay as they are)."""

    def sub(match):
        name = match.group(1) or match.group(2)
        values = defaults.get(name)
        return values[0] if values else match.group(0)

    return VAR.sub(sub, text)


def base_images(instrs):
    """Returns the image references the FROM lines pull (stage names excluded), expanded."""
    defaults = arg_defaults(instrs)
    stages = set()
    refs = []
    for keyword, args in instrs:
        if keyword != "FROM":
            continue
        words = args.split()
        image = words[0]
        if image not in stages:
            refs.append(expand(image, defaults))
        if len(words) == 3 and words[1].upper() == "AS":
            stages.add(words[2])
    return refs


def shell_commands(command):
    """Splits a RUN command into simple commands (on ;, &&, || and |)."""
    return [part.strip() for part in re.split(r";|&&|\|\||\|", command) if part.strip()]


def apt_installs(instrs):
    """Returns {package: version as written} for every `apt-get install` of the RUN lines."""
    packages = {}
    for keyword, args in instrs:
        if keyword != "RUN":
            continue
        for command in shell_commands(args):
            try:
                words = shlex.split(command)
            except ValueError:
                words = command.split()
            while words and re.match(r"^\w+=", words[0]):
                words = words[1:]
            if words and words[0] in ("apt-get", "apt") and "install" in words[1:]:
                for word in words[words.index("install") + 1 :]:
                    if not word.startswith("-"):
                        package, _, version = word.partition("=")
                        packages[package] = version
    return packages


# ---- checks -------------------------------------------------------------------------------


def pinning_problems(text, name):
    """Lists every way the Dockerfile `text` (called `name` in messages) is not pinned."""
    problems = []
    instrs = instructions(text)
    defaults = arg_defaults(instrs)
    if not any(keyword == "FROM" for keyword, _ in instrs):
        problems.append(f"{name}: no FROM instruction")
    for ref in base_images(instrs):
        match = DIGEST_REF.match(ref)
        if not match:
            problems.append(
                f"{name}: base image {ref!r} is not pinned as <image>:<tag>@sha256:<digest>"
            )
        elif match.group("tag") == "latest":
            problems.append(f"{name}: base image {ref!r} uses the tag 'latest'")
    for keyword, args in instrs:
        if re.search(r":latest\b", expand(args, defaults)):
            problems.append(f"{name}: {keyword} refers to ':latest': {args.splitlines()[0]!r}")
        if keyword == "ADD" and re.search(r"(^|\s)(https?|ftp)://|(^|\s)git@", args):
            problems.append(
                f"{name}: ADD fetches a URL ({args.splitlines()[0]!r}); download in RUN and check its SHA-256"
            )
        if keyword == "COPY" and "--from=" not in args:
            sources = [word for word in args.split()[:-1] if not word.startswith("--")]
            for source in sources:
                if not LOCK_COPY.fullmatch(source):
                    problems.append(
                        f"{name}: COPY {source!r} puts files other than the lock file into the image (the source tree is mounted at run time)"
                    )
        if keyword != "RUN":
            continue
        for command in shell_commands(args):
            try:
                words = shlex.split(command)
            except ValueError:  # a quote that opens in one simple command and closes in another
                words = command.split()
            while words and re.match(r"^\w+=", words[0]):  # VAR=value prefixes
                words = words[1:]
            if words and words[0] in ("apt-get", "apt") and "install" in words[1:]:
                for word in words[words.index("install") + 1 :]:
                    if word.startswith("-"):
                        continue
                    package, eq, version = word.partition("=")
                    resolved = expand(version, defaults)
                    if not eq or not re.match(r"^\d", resolved):
                        problems.append(
                            f"{name}: apt package {package!r} is installed without an exact version (write {package}=<version>)"
                        )
        downloads = any(re.match(r"^(curl|wget)\s", command) for command in shell_commands(args))
        if downloads and "sha256sum" not in args:
            problems.append(f"{name}: a RUN downloads with curl/wget without checking a SHA-256")
    return problems


def version_problems(dockerfiles, build_versions, bazelrc):
    """Lists every disagreement between Dockerfile ARG defaults, build.py and .bazelrc.

    Args:
      dockerfiles: {backend: Dockerfile text}.
      build_versions: build_py_versions() of build/build.py.
      bazelrc: bazelrc_versions() of .bazelrc.
    """
    problems = []
    cuda = build_versions["CUDA_VERSIONS"][build_versions["DEFAULT_CUDA_MAJOR_VERSION"]]
    expected = {
        "cpu": {
            "PYTHON_VERSION": build_versions["PYTHON_VERSION"],
            "BAZEL_VERSION": build_versions["BAZEL_VERSION"],
        },
        "cuda": {
            "PYTHON_VERSION": build_versions["PYTHON_VERSION"],
            "BAZEL_VERSION": build_versions["BAZEL_VERSION"],
            "JAXCORE_CUDA_VERSION": cuda,
            "JAXCORE_CUDNN_VERSION": build_versions["CUDNN_VERSION"],
        },
        "rocm": {
            "PYTHON_VERSION": build_versions["PYTHON_VERSION"],
            "BAZEL_VERSION": build_versions["BAZEL_VERSION"],
            "JAXCORE_ROCM_VERSION": build_versions["ROCM_VERSION"],
        },
    }
    for name, value in (
        ("JAXCORE_CUDA_VERSION", cuda),
        ("JAXCORE_CUDNN_VERSION", build_versions["CUDNN_VERSION"]),
        ("JAXCORE_ROCM_VERSION", build_versions["ROCM_VERSION"]),
    ):
        if bazelrc.get(name) != value:
            problems.append(f".bazelrc: {name}={bazelrc.get(name)} but build/build.py says {value}")
    for backend, text in dockerfiles.items():
        name = f"docker/Dockerfile.{backend}"
        instrs = instructions(text)
        defaults = arg_defaults(instrs)
        # The C++ compiler of the native kernels: installed, versioned by GCC_VERSION, and in
        # the CPU image (which builds the released wheel) exactly build.py's.
        compiler = build_versions["CXX_COMPILER_VERSION"]
        gcc = defaults.get("GCC_VERSION", [])
        if not gcc:
            problems.append(f"{name}: no `ARG GCC_VERSION=<default>` for the C++ compiler")
        if backend == "cpu":
            for value in gcc:
                if value != compiler:
                    problems.append(
                        f"{name}: ARG GCC_VERSION defaults to {value} but build/build.py's CXX_COMPILER_VERSION says {compiler}"
                    )
            for value in defaults.get("GCC_DEB_VERSION", []):
                if not value.startswith(compiler + "-"):
                    problems.append(f"{name}: GCC package version {value} is not GCC {compiler}")
        installed = apt_installs(instrs)
        if not any(p == "g++" or re.fullmatch(r"g\+\+-\d+", p) for p in installed):
            problems.append(f"{name}: installs no g++ (the native CPU kernels need a C++ compiler)")
        for package, version in installed.items():
            if re.fullmatch(r"g\+\+-\d+|gcc-\d+", package):
                resolved = expand(version, defaults)
                if gcc and not resolved.startswith(gcc[0]):
                    problems.append(
                        f"{name}: {package}={resolved} is not GCC {gcc[0]} (ARG GCC_VERSION)"
                    )
        for arg, want in expected[backend].items():
            have = defaults.get(arg)
            if not have:
                problems.append(f"{name}: no `ARG {arg}=<default>` (build/build.py says {want})")
            for value in have or []:
                if value != want:
                    problems.append(
                        f"{name}: ARG {arg} defaults to {value} but build/build.py says {want}"
                    )
        python = build_versions["PYTHON_VERSION"]
        for value in defaults.get("PYTHON_DEB_VERSION", []) + defaults.get(
            "PYTHON_STANDALONE_VERSION", []
        ):
            if not value.startswith(python + "."):
                problems.append(f"{name}: Python package version {value} is not Python {python}")
        for value in defaults.get("BAZEL_DEB_VERSION", []):
            if not value.startswith(build_versions["BAZEL_VERSION"] + "+"):
                problems.append(
                    f"{name}: bazel-bootstrap {value} is not Bazel {build_versions['BAZEL_VERSION']}"
                )
        refs = base_images(instrs)
        final = refs[-1] if refs else ""
        tag = final.split("@")[0].rpartition(":")[2]
        if backend == "cpu" and not re.match(r"^docker\.io/library/debian:bookworm-\d{8}@", final):
            problems.append(
                f"{name}: base image {final!r} is not a dated debian:bookworm-YYYYMMDD tag"
            )
        if backend == "cuda" and (
            "/nvidia/cuda:" not in final or not tag.startswith(f"{cuda}-cudnn-devel-")
        ):
            problems.append(f"{name}: base image {final!r} is not nvidia/cuda:{cuda}-cudnn-devel-*")
        if backend == "rocm":
            rocm = build_versions["ROCM_VERSION"]
            if "/rocm/dev-ubuntu-" not in final or tag.split("-")[0] != rocm:
                problems.append(f"{name}: base image {final!r} is not rocm/dev-ubuntu-*:{rocm}")
    return problems


# ---- the repository's files ---------------------------------------------------------------


def read_dockerfiles():
    return {backend: (DOCKER_DIR / f"Dockerfile.{backend}").read_text() for backend in BACKENDS}


@pytest.mark.parametrize("backend", BACKENDS)
def test_dockerfile_is_pinned(backend):
    text = (DOCKER_DIR / f"Dockerfile.{backend}").read_text()
    assert pinning_problems(text, f"Dockerfile.{backend}") == []


def test_versions_agree_across_build_py_bazelrc_and_dockerfiles():
    build_versions = build_py_versions((REPO / "build" / "build.py").read_text())
    bazelrc = bazelrc_versions((REPO / ".bazelrc").read_text())
    assert version_problems(read_dockerfiles(), build_versions, bazelrc) == []


def test_bazelversion_matches_build_py():
    build_versions = build_py_versions((REPO / "build" / "build.py").read_text())
    assert (REPO / ".bazelversion").read_text().strip() == build_versions["BAZEL_VERSION"]


def test_repository_files_are_read_as_expected():
    # Guards the readers themselves: the values they return are the ones in the files.
    build_versions = build_py_versions((REPO / "build" / "build.py").read_text())
    assert re.fullmatch(r"3\.\d+", build_versions["PYTHON_VERSION"])
    assert build_versions["DEFAULT_CUDA_MAJOR_VERSION"] in build_versions["CUDA_VERSIONS"]
    bazelrc = bazelrc_versions((REPO / ".bazelrc").read_text())
    assert set(bazelrc) == {"JAXCORE_CUDA_VERSION", "JAXCORE_CUDNN_VERSION", "JAXCORE_ROCM_VERSION"}
    refs = {
        backend: base_images(instructions(text)) for backend, text in read_dockerfiles().items()
    }
    # The CPU image and its Python 3.13 build stage share the one pinned base.
    assert len(refs["cpu"]) == 2 and len(set(refs["cpu"])) == 1
    # The GPU images fetch their Python in a pinned Debian stage, then build on the GPU base.
    assert [ref.split(":")[0] for ref in refs["cuda"]] == [
        "docker.io/library/debian",
        "docker.io/nvidia/cuda",
    ]
    assert [ref.split(":")[0] for ref in refs["rocm"]] == [
        "docker.io/library/debian",
        "docker.io/rocm/dev-ubuntu-24.04",
    ]


# ---- the checks, on Dockerfiles with one fault each -------------------------------------

GOOD = """\
ARG BASE_IMAGE=docker.io/library/debian:bookworm-20251229@sha256:{digest}
FROM ${{BASE_IMAGE}}
ARG PYTHON_VERSION=3.11
ARG BAZEL_VERSION=4.2.3
ARG PYTHON_DEB_VERSION=3.11.2-6
ARG GCC_VERSION=12.2.0
ARG GCC_DEB_VERSION=12.2.0-14+deb12u1
# a comment: apt-get install anything
RUN apt-get update; \\
    apt-get install -y --no-install-recommends \\
      "python${{PYTHON_VERSION}}=${{PYTHON_DEB_VERSION}}" \\
      "g++-12=${{GCC_DEB_VERSION}}" \\
      bazel-bootstrap=${{BAZEL_VERSION}}+ds-*
COPY requirements_lock.txt /opt/jaxcore/requirements_lock.txt
""".format(digest="a" * 64)

BUILD_VERSIONS = {
    "PYTHON_VERSION": "3.11",
    "BAZEL_VERSION": "4.2.3",
    "DEFAULT_CUDA_MAJOR_VERSION": 12,
    "CUDA_VERSIONS": {12: "12.8.1"},
    "CUDNN_VERSION": "9.8.0",
    "ROCM_VERSION": "6.4.4",
    "CXX_COMPILER_VERSION": "12.2.0",
}
BAZELRC = {
    "JAXCORE_CUDA_VERSION": "12.8.1",
    "JAXCORE_CUDNN_VERSION": "9.8.0",
    "JAXCORE_ROCM_VERSION": "6.4.4",
}


def test_good_example_passes():
    assert pinning_problems(GOOD, "good") == []
    assert version_problems({"cpu": GOOD}, BUILD_VERSIONS, BAZELRC) == []


@pytest.mark.parametrize(
    "base, fault",
    [
        ("debian:bookworm-20251229", "is not pinned as <image>:<tag>@sha256:<digest>"),
        ("debian@sha256:" + "b" * 64, "is not pinned as <image>:<tag>@sha256:<digest>"),
        ("debian:latest@sha256:" + "b" * 64, "uses the tag 'latest'"),
        ("debian:bookworm@sha256:abc", "is not pinned as <image>:<tag>@sha256:<digest>"),
    ],
)
def test_unpinned_base_image_is_reported(base, fault):
    text = GOOD.replace("docker.io/library/debian:bookworm-20251229@sha256:" + "a" * 64, base)
    problems = pinning_problems(text, "bad")
    assert any(fault in p and base in p for p in problems), problems


def test_latest_anywhere_is_reported():
    text = GOOD + "COPY --from=docker.io/library/busybox:latest /bin/busybox /bin/\n"
    assert any("':latest'" in p for p in pinning_problems(text, "bad"))


@pytest.mark.parametrize(
    "install, package",
    [
        ("RUN apt-get install -y curl\n", "curl"),
        (
            "RUN apt-get update && apt-get install -y --no-install-recommends git=1:2.39 make\n",
            "make",
        ),
        ("RUN apt install -y \\\n    jq\n", "jq"),
        ("RUN apt-get install -y vim=\n", "vim"),
        ('RUN apt-get install -y "tool=${UNSET_VERSION}"\n', "tool"),
        ("RUN apt-get -y --no-install-recommends install zip\n", "zip"),
        ("RUN DEBIAN_FRONTEND=noninteractive apt-get install -y unzip\n", "unzip"),
    ],
)
def test_unpinned_apt_install_is_reported(install, package):
    problems = pinning_problems(GOOD + install, "bad")
    assert problems == [
        f"bad: apt package {package!r} is installed without an exact version (write {package}=<version>)"
    ]


@pytest.mark.parametrize(
    "add",
    [
        "ADD https://example.com/tool.tar.gz /opt/\n",
        "ADD --chmod=755 http://example.com/tool /usr/local/bin/tool\n",
        "ADD git@github.com:owner/repo.git /src\n",
    ],
)
def test_add_url_is_reported(add):
    problems = pinning_problems(GOOD + add, "bad")
    assert len(problems) == 1 and "ADD fetches a URL" in problems[0]


def test_unchecked_download_is_reported():
    text = GOOD + "RUN curl -fsSL -o /tmp/x.tgz https://example.com/x.tgz\n"
    assert pinning_problems(text, "bad") == [
        "bad: a RUN downloads with curl/wget without checking a SHA-256"
    ]
    checked = GOOD + (
        "RUN curl -fsSL -o /tmp/x.tgz https://example.com/x.tgz; \\\n"
        '    echo "abc  /tmp/x.tgz" | sha256sum --check -\n'
    )
    assert pinning_problems(checked, "ok") == []


def test_copying_the_source_tree_is_reported():
    problems = pinning_problems(GOOD + "COPY . /src\n", "bad")
    assert len(problems) == 1 and "COPY '.'" in problems[0]


def test_missing_from_is_reported():
    assert "bad: no FROM instruction" in pinning_problems("ARG X=1\n", "bad")


@pytest.mark.parametrize("arg, value", [("PYTHON_VERSION", "3.12"), ("BAZEL_VERSION", "5.0.0")])
def test_arg_mismatch_with_build_py_is_reported(arg, value):
    text = GOOD.replace(f"ARG {arg}={BUILD_VERSIONS[arg]}", f"ARG {arg}={value}")
    problems = version_problems({"cpu": text}, BUILD_VERSIONS, BAZELRC)
    assert (
        f"docker/Dockerfile.cpu: ARG {arg} defaults to {value} but build/build.py says {BUILD_VERSIONS[arg]}"
        in problems
    )


def test_missing_arg_is_reported():
    text = GOOD.replace("ARG BAZEL_VERSION=4.2.3\n", "")
    problems = version_problems({"cpu": text}, BUILD_VERSIONS, BAZELRC)
    assert problems == [
        "docker/Dockerfile.cpu: no `ARG BAZEL_VERSION=<default>` (build/build.py says 4.2.3)"
    ]


def test_bazelrc_mismatch_is_reported():
    for name in BAZELRC:
        bazelrc = dict(BAZELRC, **{name: "0.0.1"})
        problems = version_problems({}, BUILD_VERSIONS, bazelrc)
        assert len(problems) == 1 and problems[0].startswith(
            f".bazelrc: {name}=0.0.1 but build/build.py says"
        )


# What a GPU image needs for the native kernels: noble's GCC, any version, pinned.
GPU_COMPILER = 'ARG GCC_VERSION=13.3.0\nRUN apt-get install -y "g++-13=${GCC_VERSION}-*"\n'


def test_gpu_base_image_tag_must_carry_the_versions():
    digest = "c" * 64
    cuda = (
        f"ARG PYTHON_VERSION=3.11\nARG BAZEL_VERSION=4.2.3\nARG JAXCORE_CUDA_VERSION=12.8.1\n"
        f"ARG JAXCORE_CUDNN_VERSION=9.8.0\nFROM docker.io/nvidia/cuda:12.6.3-cudnn-devel-ubuntu24.04@sha256:{digest}\n"
        + GPU_COMPILER
    )
    rocm = (
        GPU_COMPILER
        + f"ARG PYTHON_VERSION=3.11\nARG BAZEL_VERSION=4.2.3\nARG JAXCORE_ROCM_VERSION=6.4.4\n"
        f"FROM docker.io/rocm/dev-ubuntu-24.04:6.4.1-complete@sha256:{digest}\n"
    )
    problems = version_problems({"cuda": cuda, "rocm": rocm}, BUILD_VERSIONS, BAZELRC)
    assert len(problems) == 2
    assert "is not nvidia/cuda:12.8.1-cudnn-devel-*" in problems[0]
    assert "is not rocm/dev-ubuntu-*:6.4.4" in problems[1]


def test_gpu_arg_mismatch_is_reported():
    digest = "d" * 64
    cuda = (
        GPU_COMPILER
        + f"ARG PYTHON_VERSION=3.11\nARG BAZEL_VERSION=4.2.3\nARG JAXCORE_CUDA_VERSION=12.9.0\n"
        f"ARG JAXCORE_CUDNN_VERSION=9.10.0\nARG PYTHON_STANDALONE_VERSION=3.12.1\n"
        f"FROM docker.io/nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04@sha256:{digest}\n"
    )
    problems = version_problems({"cuda": cuda}, BUILD_VERSIONS, BAZELRC)
    assert problems == [
        "docker/Dockerfile.cuda: ARG JAXCORE_CUDA_VERSION defaults to 12.9.0 but build/build.py says 12.8.1",
        "docker/Dockerfile.cuda: ARG JAXCORE_CUDNN_VERSION defaults to 9.10.0 but build/build.py says 9.8.0",
        "docker/Dockerfile.cuda: Python package version 3.12.1 is not Python 3.11",
    ]


def test_deb_versions_must_carry_the_toolchain_versions():
    text = GOOD.replace("ARG PYTHON_DEB_VERSION=3.11.2-6", "ARG PYTHON_DEB_VERSION=3.12.1-1")
    text += "ARG BAZEL_DEB_VERSION=5.0.0+ds-1\n"
    problems = version_problems({"cpu": text}, BUILD_VERSIONS, BAZELRC)
    assert problems == [
        "docker/Dockerfile.cpu: Python package version 3.12.1-1 is not Python 3.11",
        "docker/Dockerfile.cpu: bazel-bootstrap 5.0.0+ds-1 is not Bazel 4.2.3",
    ]


def test_build_py_reader_reports_missing_constants():
    with pytest.raises(ValueError, match=r"does not define \['ROCM_VERSION'\]"):
        build_py_versions(
            'PYTHON_VERSION = "3.11"\nBAZEL_VERSION = "4.2.3"\n'
            'DEFAULT_CUDA_MAJOR_VERSION = 12\nCUDA_VERSIONS = {12: "12.8.1"}\n'
            'CUDNN_VERSION = "9.8.0"\nCXX_COMPILER_VERSION = "12.2.0"\n'
        )


def test_cpu_image_compiler_must_be_build_pys():
    text = GOOD.replace("ARG GCC_VERSION=12.2.0", "ARG GCC_VERSION=12.3.0")
    text = text.replace("ARG GCC_DEB_VERSION=12.2.0-14+deb12u1", "ARG GCC_DEB_VERSION=12.3.0-1")
    problems = version_problems({"cpu": text}, BUILD_VERSIONS, BAZELRC)
    assert problems == [
        "docker/Dockerfile.cpu: ARG GCC_VERSION defaults to 12.3.0 but build/build.py's CXX_COMPILER_VERSION says 12.2.0",
        "docker/Dockerfile.cpu: GCC package version 12.3.0-1 is not GCC 12.2.0",
    ]


def test_image_without_a_cxx_compiler_is_reported():
    text = GOOD.replace('      "g++-12=${GCC_DEB_VERSION}" \\\n', "").replace(
        "ARG GCC_VERSION=12.2.0\n", ""
    )
    problems = version_problems({"cpu": text}, BUILD_VERSIONS, BAZELRC)
    assert problems == [
        "docker/Dockerfile.cpu: no `ARG GCC_VERSION=<default>` for the C++ compiler",
        "docker/Dockerfile.cpu: installs no g++ (the native CPU kernels need a C++ compiler)",
    ]


def test_compiler_package_must_match_gcc_version():
    text = GOOD.replace('"g++-12=${GCC_DEB_VERSION}"', '"g++-12=12.3.0-1"')
    problems = version_problems({"cpu": text}, BUILD_VERSIONS, BAZELRC)
    assert problems == [
        "docker/Dockerfile.cpu: g++-12=12.3.0-1 is not GCC 12.2.0 (ARG GCC_VERSION)"
    ]


def test_repository_images_pin_their_compiler():
    for backend, text in read_dockerfiles().items():
        installed = apt_installs(instructions(text))
        assert any(p.startswith("g++") for p in installed), backend
    cpu = arg_defaults(instructions(read_dockerfiles()["cpu"]))
    build_versions = build_py_versions((REPO / "build" / "build.py").read_text())
    assert cpu["GCC_VERSION"] == [build_versions["CXX_COMPILER_VERSION"]]


def _env_file_value(name):
    text = (REPO / "ci" / "envs" / "default.env").read_text()
    match = re.search(rf'^export {name}="\$\{{{name}:-(.*)\}}"$', text, re.MULTILINE)
    assert match, f"ci/envs/default.env does not set {name}"
    return match.group(1)


def test_cpu_image_runs_the_newest_end_instead_of_skipping_it():
    text = (DOCKER_DIR / "Dockerfile.cpu").read_text()
    instrs = instructions(text)
    # An ARG the build stage repeats (mirrors, compiler pins) has one value in every stage.
    defaults = {}
    for name, values in arg_defaults(instrs).items():
        assert len(set(values)) == 1, f"Dockerfile.cpu: ARG {name} differs across stages: {values}"
        defaults[name] = values[0]
    newest = defaults["PYTHON_NEWEST_VERSION"]
    # The newest Python the job looks for first, and the lock file of that Python.
    assert newest == _env_file_value("JAXCORE_NEWEST_PYTHONS").split()[0]
    lock = f"requirements_lock_{newest.replace('.', '_')}.txt"
    assert (REPO / "build" / lock).is_file()
    assert f"COPY {lock} /opt/jaxcore/{lock}" in text
    # Built from the Debian source package of that Python, its tarball's SHA-256 checked.
    assert defaults["PYTHON_NEWEST_SRC_DEB_VERSION"].startswith(newest + ".")
    assert re.fullmatch(r"[0-9a-f]{64}", defaults["PYTHON_NEWEST_ORIG_SHA256"])
    runs = " ".join(args for keyword, args in instrs if keyword == "RUN")
    assert 'apt-get source --download-only "python${PYTHON_NEWEST_VERSION}=' in runs
    assert "sha256sum --check" in runs
    env = " ".join(args for keyword, args in instrs if keyword == "ENV")
    assert f"JAXCORE_NEWEST_VENV=/opt/jaxcore/venv-{newest}" in env
    assert "JAXCORE_NEWEST_REQUIRED=1" in env


def test_only_lock_files_are_copied_from_the_context():
    for source in ("requirements_lock.txt", "requirements_lock_3_13.txt"):
        assert pinning_problems(GOOD + f"COPY {source} /opt/x\n", "ok") == []
    for source in ("requirements_dev_lock.txt", "requirements_lock_3_13.txt.bak", "build"):
        problems = pinning_problems(GOOD + f"COPY {source} /opt/x\n", "bad")
        assert len(problems) == 1 and f"COPY {source!r}" in problems[0], problems

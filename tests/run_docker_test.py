"""ci/run_docker.sh: argument checks, engine choice, image reuse, and what it hands the engine.

Each test runs the script from a scratch copy of the repository with fake `docker`, `podman`
and `debootstrap` commands on a PATH that holds nothing else of the kind, so no container is
built or started. The fakes log every call (as JSON) and keep a list of the images they "have".
"""

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# The commands run_docker.sh (and the fakes) use besides the container tools.
HOST_TOOLS = (
    "bash",
    "cat",
    "cp",
    "cut",
    "dirname",
    "basename",
    "env",
    "find",
    "grep",
    "id",
    "ln",
    "ls",
    "mkdir",
    "mktemp",
    "readlink",
    "rm",
    "sed",
    "sha256sum",
    "sort",
    "tail",
    "tar",
    "wc",
)

# A fake docker/podman. Each call leaves calls/<n>.args (engine name and arguments,
# NUL-separated) and, for build / import / run, what the test wants to see of their inputs.
FAKE_ENGINE = """\
#!/usr/bin/env bash
name="${0##*/}"
n=$(ls "$FAKE_CALLS" | grep -c '[.]args$' || true)
call="$FAKE_CALLS/$(printf '%04d' "$n")"
printf '%s\\0' "$name" "$@" > "$call.args"
option() {  # the value after option $1 in the remaining arguments
  local want="$1"; shift
  while (($#)); do [[ "$1" == "$want" ]] && { echo "$2"; return; }; shift; done
}
rc=0
case "$1" in
  info) var="FAKE_${name^^}_INFO_RC"; rc="${!var:-0}" ;;
  image) grep -qxF -- "$3" "$FAKE_IMAGES" 2>/dev/null || rc=1 ;;
  build)
    context="${@: -1}"
    (cd "$context" && find . -mindepth 1 | sed 's|^[.]/||' | sort) > "$call.context"
    if [[ -f "$context/host-ca/ca-bundle.pem" ]]; then cp "$context/host-ca/ca-bundle.pem" "$call.ca"; fi
    rc="${FAKE_BUILD_RC:-0}"
    if ((rc == 0)); then option -t "$@" >> "$FAKE_IMAGES"; fi ;;
  import) wc -c > "$call.stdin_bytes"; echo "${@: -1}" >> "$FAKE_IMAGES" ;;
  run)
    cp "$(option --env-file "$@")" "$call.env"
    if [[ -n "${FAKE_RUN_CLOBBER:-}" ]]; then
      echo container > "$FAKE_RUN_CLOBBER/.jaxcore_configure.bazelrc"
      ln -sfn /root/.cache/bazel/bin "$FAKE_RUN_CLOBBER/bazel-bin"
    fi
    rc="${FAKE_RUN_RC:-0}" ;;
esac
exit "$rc"
"""

FAKE_DEBOOTSTRAP = """\
#!/usr/bin/env bash
echo "debootstrap $*" >> "$FAKE_DEBOOTSTRAP_LOG"
target="${@: -2:1}"
mkdir -p "$target/etc"
echo bookworm > "$target/etc/debian_version"
"""


def _executable(path, text):
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


class Sandbox:
    """A scratch checkout, a PATH with chosen fakes, and a way to run run_docker.sh in it."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.repo = tmp_path / "repo"
        for rel in (
            "ci/run_docker.sh",
            "docker/Dockerfile.cpu",
            "docker/Dockerfile.cuda",
            "docker/Dockerfile.rocm",
        ):
            (self.repo / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / rel, self.repo / rel)
        (self.repo / "build").mkdir()
        self.lock = self.repo / "build" / "requirements_lock.txt"
        self.lock.write_text("jax==0.10.2 --hash=sha256:" + "0" * 64 + "\n")
        self.newest_lock = self.repo / "build" / "requirements_lock_3_13.txt"
        self.newest_lock.write_text("jax==0.12.0.1 --hash=sha256:" + "0" * 64 + "\n")
        _executable(self.repo / "ci" / "job.sh", "#!/usr/bin/env bash\nexit 0\n")
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        for tool in HOST_TOOLS:
            found = shutil.which(tool)
            assert found, f"test needs {tool} on PATH"
            (self.bin / tool).symlink_to(found)
        self.dev = tmp_path / "dev"
        self.dev.mkdir()
        self.calls_dir = tmp_path / "calls"
        self.calls_dir.mkdir()
        self.images = tmp_path / "images.txt"
        self.debootstrap_log = tmp_path / "debootstrap.log"

    def add_engine(self, name):
        _executable(self.bin / name, FAKE_ENGINE)

    def add_debootstrap(self):
        _executable(self.bin / "debootstrap", FAKE_DEBOOTSTRAP)

    def run(self, *args, env=None):
        base = {
            "PATH": str(self.bin),
            "HOME": str(self.tmp),
            "TMPDIR": str(self.tmp),
            "FAKE_CALLS": str(self.calls_dir),
            "FAKE_IMAGES": str(self.images),
            "FAKE_DEBOOTSTRAP_LOG": str(self.debootstrap_log),
            "JAXCORE_DOCKER_DEV_DIR": str(self.dev),
        }
        base.update(env or {})
        return subprocess.run(
            [str(self.bin / "bash"), str(self.repo / "ci" / "run_docker.sh"), *args],
            cwd=self.repo,
            env=base,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=60,
        )

    def calls(self, verb=None):
        """The fake engines' calls, in order, as dicts (optionally only one verb's)."""
        entries = []
        for args_file in sorted(self.calls_dir.glob("*.args")):
            fields = args_file.read_text().split("\0")[:-1]
            entry = {"engine": fields[0], "args": fields[1:]}
            stem = args_file.with_suffix("")
            for key in ("context", "ca", "env", "stdin_bytes"):
                extra = stem.with_suffix("." + key)
                entry[key] = extra.read_text() if extra.exists() else None
            entries.append(entry)
        return [e for e in entries if verb is None or e["args"][0] == verb]


@pytest.fixture
def box(tmp_path):
    return Sandbox(tmp_path)


def _error_line(result, returncode=2):
    """The one error line of a run that must have exited with ``returncode``."""
    assert result.returncode == returncode, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if "error:" in ln]
    assert len(lines) == 1, result.stderr
    return lines[0]


def _option(args, flag):
    """The value after ``flag`` in an engine call's arguments."""
    return args[args.index(flag) + 1]


# ---- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--backend", "tpu", "--", "ci/job.sh"],
            "unknown backend 'tpu': choose cpu, cuda or rocm",
        ),
        (
            ["--backend=metal", "--", "ci/job.sh"],
            "unknown backend 'metal': choose cpu, cuda or rocm",
        ),
        (["--backend"], "--backend needs a value (cpu, cuda or rocm)"),
        (["--engine", "lxc", "--", "ci/job.sh"], "unknown engine 'lxc': choose docker or podman"),
        (["--frobnicate", "--", "ci/job.sh"], "unknown option '--frobnicate'"),
        (["ci/job.sh"], "unknown option 'ci/job.sh' (the ci/ script goes after '--'"),
        (["--"], "no CI script given"),
        ([], "no CI script given"),
        (["--", "tests/conftest.py"], "'tests/conftest.py' is not a script under ci/"),
        (["--", "ci/../build/build.py"], "is not a script under ci/"),
        (["--", "ci/missing.sh"], "CI script 'ci/missing.sh' does not exist"),
        (["--", "ci/run_docker.sh"], "cannot run itself inside the container"),
        (
            ["--backend", "cuda", "--base-from-debootstrap", "--", "ci/job.sh"],
            "--base-from-debootstrap builds a Debian base image and only applies to --backend cpu, not 'cuda'",
        ),
    ],
)
def test_bad_arguments_give_one_message_and_exit_2(box, args, message):
    box.add_engine("podman")
    result = box.run(*args)
    assert message in _error_line(result)
    assert box.calls("build") == [] and box.calls("run") == []


def test_no_engine_installed(box):
    result = box.run("--", "ci/job.sh")
    assert "neither docker nor podman is installed" in _error_line(result)


def test_docker_cli_without_engine_and_no_podman(box):
    box.add_engine("docker")
    result = box.run("--", "ci/job.sh", env={"FAKE_DOCKER_INFO_RC": "1"})
    line = _error_line(result)
    assert "no Docker engine answers" in line and "podman is not installed" in line


def test_requested_engine_missing_or_dead(box):
    box.add_engine("docker")
    result = box.run("--engine", "podman", "--", "ci/job.sh")
    assert "--engine podman: 'podman' is not installed" in _error_line(result)
    result = box.run("--engine", "docker", "--", "ci/job.sh", env={"FAKE_DOCKER_INFO_RC": "1"})
    assert "'docker info' fails" in _error_line(result)


def test_cuda_without_nvidia_devices(box):
    box.add_engine("docker")
    result = box.run("--backend", "cuda", "--", "ci/job.sh")
    assert (
        f"--backend cuda needs an NVIDIA GPU, but there is no {box.dev}/nvidiactl"
        in _error_line(result)
    )
    assert box.calls("build") == []


@pytest.mark.parametrize(
    "present, missing",
    [
        ([], "kfd"),
        (["kfd"], "dri"),
        (["dri"], "kfd"),
    ],
)
def test_rocm_without_amd_devices(box, present, missing):
    box.add_engine("docker")
    for name in present:
        (box.dev / name).touch()
    result = box.run("--backend", "rocm", "--", "ci/job.sh")
    line = _error_line(result)
    assert "--backend rocm needs an AMD GPU" in line and f"{box.dev}/{missing}" in line


def test_missing_lock_file(box):
    box.add_engine("docker")
    box.lock.unlink()
    result = box.run("--", "ci/job.sh")
    assert "build/requirements_lock.txt does not exist" in _error_line(result)


def test_cpu_image_needs_the_newest_lock_file(box):
    box.add_engine("docker")
    box.newest_lock.unlink()
    result = box.run("--", "ci/job.sh")
    assert "build/requirements_lock_3_13.txt does not exist" in _error_line(result)
    assert box.calls("build") == []


def test_missing_host_ca_bundle(box):
    box.add_engine("docker")
    result = box.run("--host-ca=/nonexistent/ca.pem", "--", "ci/job.sh")
    assert "CA bundle '/nonexistent/ca.pem' does not exist or is empty" in _error_line(result)


def test_failed_build_exits_1_and_runs_nothing(box):
    box.add_engine("docker")
    result = box.run("--", "ci/job.sh", env={"FAKE_BUILD_RC": "3"})
    line = _error_line(result, returncode=1)
    assert "failed (output above)" in line
    assert "add --base-from-debootstrap" in line and "add --host-ca" in line
    assert box.calls("run") == []
    result = box.run(
        "--backend",
        "rocm",
        "--host-ca=" + str(box.lock),
        "--",
        "ci/job.sh",
        env={"FAKE_BUILD_RC": "3", "JAXCORE_DOCKER_DEV_DIR": str(box.tmp)},
    )
    assert result.returncode == 2  # no devices: checked before any build
    (box.dev / "kfd").touch()
    (box.dev / "dri").touch()
    result = box.run(
        "--backend",
        "rocm",
        "--host-ca=" + str(box.lock),
        "--",
        "ci/job.sh",
        env={"FAKE_BUILD_RC": "3"},
    )
    line = _error_line(result, returncode=1)
    assert "Dockerfile.rocm failed (output above)" in line and "add --" not in line


# ---- what the engine is asked to do ------------------------------------------------------


def test_cpu_run_builds_once_then_reuses_and_returns_the_script_status(box):
    box.add_engine("docker")
    first = box.run("--", "ci/job.sh", "-k", "tree", env={"FAKE_RUN_RC": "5"})
    assert first.returncode == 5, first.stderr
    (build,) = box.calls("build")
    assert build["engine"] == "docker"
    tag = _option(build["args"], "-t")
    assert tag.startswith("localhost/jaxcore-ci-cpu:")
    assert _option(build["args"], "-f") == str(box.repo / "docker" / "Dockerfile.cpu")
    # The build context holds the lock files (the CPU image's Python 3.13 venv has its own)
    # and the (empty) CA folder, not the source tree.
    assert build["context"].split() == [
        "host-ca",
        "requirements_lock.txt",
        "requirements_lock_3_13.txt",
    ]
    assert build["ca"] is None
    (run,) = box.calls("run")
    args = run["args"]
    assert args[-4:] == [tag, "bash", "ci/job.sh", "-k", "tree"][-4:] and args[-5] == tag
    assert f"{box.repo}:{box.repo}" in args and _option(args, "-w") == str(box.repo)
    assert "--gpus" not in args and "--device=/dev/kfd" not in args

    second = box.run("--", "ci/job.sh")
    assert second.returncode == 0
    assert len(box.calls("build")) == 1
    assert f"reusing image {tag}" in second.stderr
    assert box.calls("run")[-1]["args"][-3] == tag


def test_image_key_follows_lock_file_and_dockerfile(box):
    box.add_engine("docker")
    box.run("--", "ci/job.sh")
    box.lock.write_text("jax==0.10.2 --hash=sha256:" + "1" * 64 + "\n")
    box.run("--", "ci/job.sh")
    box.newest_lock.write_text("jax==0.12.0.1 --hash=sha256:" + "1" * 64 + "\n")
    box.run("--", "ci/job.sh")
    dockerfile = box.repo / "docker" / "Dockerfile.cpu"
    dockerfile.write_text(dockerfile.read_text() + "\n# changed\n")
    box.run("--", "ci/job.sh")
    tags = [_option(b["args"], "-t") for b in box.calls("build")]
    assert len(tags) == 4 and len(set(tags)) == 4
    box.run("--rebuild", "--", "ci/job.sh")
    assert len(box.calls("build")) == 5


def test_environment_is_forwarded_through_an_env_file(box):
    box.add_engine("docker")
    env = {
        "JAX_ENABLE_X64": "1",
        "JAXCORE_PLUGINS": "none",
        "JAXCORE_EMPTY": "",
        "JAXCORE_PYTHON": ".venv/bin/python",
        "JAXCORE_NEWEST_VENV": ".venv-3.13",  # the image has its own
        "JAXCORE_MULTI": "a\nb",
        "OTHER_VAR": "x",
        "XJAX_NOT": "y",
    }
    result = box.run("--", "ci/job.sh", env=env)
    assert result.returncode == 0, result.stderr
    lines = box.calls("run")[0]["env"].splitlines()
    assert sorted(lines) == ["JAXCORE_EMPTY=", "JAXCORE_PLUGINS=none", "JAX_ENABLE_X64=1"]
    assert "not forwarding JAXCORE_PYTHON" in result.stderr
    assert "not forwarding JAXCORE_MULTI" in result.stderr


def test_cuda_adds_gpus_all_with_docker(box):
    box.add_engine("docker")
    (box.dev / "nvidiactl").touch()
    result = box.run("--backend", "cuda", "--", "ci/job.sh")
    assert result.returncode == 0, result.stderr
    (build,) = box.calls("build")
    assert _option(build["args"], "-f").endswith("docker/Dockerfile.cuda")
    args = box.calls("run")[0]["args"]
    assert _option(args, "--gpus") == "all"


def test_cuda_uses_cdi_devices_with_podman(box):
    box.add_engine("podman")
    (box.dev / "nvidia0").touch()
    result = box.run("--backend", "cuda", "--", "ci/job.sh")
    assert result.returncode == 0, result.stderr
    args = box.calls("run")[0]["args"]
    assert _option(args, "--device") == "nvidia.com/gpu=all"


def test_rocm_adds_devices_groups_and_shm(box):
    box.add_engine("docker")
    (box.dev / "kfd").touch()
    (box.dev / "dri").mkdir()
    result = box.run("--backend", "rocm", "--", "ci/job.sh")
    assert result.returncode == 0, result.stderr
    args = box.calls("run")[0]["args"]
    start = args.index("--device=/dev/kfd")
    assert args[start : start + 6] == [
        "--device=/dev/kfd",
        "--device=/dev/dri",
        "--group-add",
        "video",
        "--shm-size",
        "16G",
    ]
    assert _option(box.calls("build")[0]["args"], "-t").startswith("localhost/jaxcore-ci-rocm:")


def test_podman_preferred_when_docker_has_no_engine(box):
    box.add_engine("docker")
    box.add_engine("podman")
    result = box.run("--", "ci/job.sh", env={"FAKE_DOCKER_INFO_RC": "1"})
    assert result.returncode == 0, result.stderr
    assert {c["engine"] for c in box.calls() if c["args"][0] != "info"} == {"podman"}
    build = box.calls("build")[0]["args"]
    assert _option(build, "--format") == "docker"
    run = box.calls("run")[0]["args"]
    ulimits = [run[i + 1] for i, a in enumerate(run) if a == "--ulimit"]
    assert [u.split("=")[0] for u in ulimits] == ["nofile", "nproc"]


def test_docker_preferred_when_its_engine_answers(box):
    box.add_engine("docker")
    box.add_engine("podman")
    assert box.run("--", "ci/job.sh").returncode == 0
    assert {c["engine"] for c in box.calls()} == {"docker"}


def test_host_ca_goes_into_build_and_run(box):
    box.add_engine("docker")
    bundle = box.tmp / "corp-ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n")
    result = box.run(f"--host-ca={bundle}", "--", "ci/job.sh")
    assert result.returncode == 0, result.stderr
    build = box.calls("build")[0]
    assert build["ca"] == bundle.read_text()
    args = box.calls("run")[0]["args"]
    assert f"{bundle}:/etc/jaxcore/host-ca.pem:ro" in args
    assert "PIP_CERT=/etc/jaxcore/host-ca.pem" in args


def test_host_ca_without_a_path_uses_ssl_cert_file(box):
    box.add_engine("docker")
    bundle = box.tmp / "system-ca.pem"
    bundle.write_text("system bundle\n")
    result = box.run("--host-ca", "--", "ci/job.sh", env={"SSL_CERT_FILE": str(bundle)})
    assert result.returncode == 0, result.stderr
    assert box.calls("build")[0]["ca"] == "system bundle\n"


def test_host_files_rewritten_in_the_container_are_restored(box):
    box.add_engine("docker")
    (box.repo / ".jaxcore_configure.bazelrc").write_text("host\n")
    (box.repo / "bazel-bin").symlink_to("/host/cache/bin")
    result = box.run("--", "ci/job.sh", env={"FAKE_RUN_CLOBBER": str(box.repo), "FAKE_RUN_RC": "4"})
    assert result.returncode == 4
    assert (box.repo / ".jaxcore_configure.bazelrc").read_text() == "host\n"
    assert os.readlink(box.repo / "bazel-bin") == "/host/cache/bin"


def test_files_the_container_creates_are_removed(box):
    box.add_engine("docker")
    result = box.run("--", "ci/job.sh", env={"FAKE_RUN_CLOBBER": str(box.repo)})
    assert result.returncode == 0, result.stderr
    assert not (box.repo / ".jaxcore_configure.bazelrc").exists()
    assert not (box.repo / "bazel-bin").is_symlink()


def test_base_from_debootstrap(box):
    box.add_engine("podman")
    box.add_debootstrap()
    result = box.run("--base-from-debootstrap", "--", "ci/job.sh")
    if os.geteuid() != 0:
        assert "--base-from-debootstrap needs root" in _error_line(result)
        return
    assert result.returncode == 0, result.stderr
    assert "--variant=minbase bookworm" in box.debootstrap_log.read_text()
    (imported,) = box.calls("import")
    base = imported["args"][-1]
    assert base.startswith("localhost/jaxcore-debian-bookworm:debootstrap-")
    assert int(imported["stdin_bytes"]) > 0
    build = box.calls("build")[0]["args"]
    assert f"BASE_IMAGE={base}" in build
    # A second run reuses both the base and the CI image.
    assert box.run("--base-from-debootstrap", "--", "ci/job.sh").returncode == 0
    assert len(box.calls("import")) == 1 and len(box.calls("build")) == 1
    # The key of the CI image includes the base, so it differs from the registry-based one.
    box.run("--", "ci/job.sh")
    tags = [_option(b["args"], "-t") for b in box.calls("build")]
    assert len(set(tags)) == 2


def test_base_from_debootstrap_without_debootstrap(box):
    box.add_engine("podman")
    result = box.run("--base-from-debootstrap", "--", "ci/job.sh")
    assert "--base-from-debootstrap needs debootstrap, which is not installed" in _error_line(
        result
    )
    assert box.calls("import") == [] and box.calls("build") == []


def test_help_prints_usage(box):
    result = box.run("--help")
    assert result.returncode == 0
    assert "--backend cpu|cuda|rocm" in result.stdout and "--base-from-debootstrap" in result.stdout

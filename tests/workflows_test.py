"""Structure of the GitHub Actions workflows (.github/workflows/ci.yml and release.yml).

CI is code here: every job is a thin call of a ci/ script, so these checks keep the workflow
and ci/ in step. actionlint (with ShellCheck over the `run:` blocks) runs in ci/run_docs.sh, and
here when it is installed.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO / ".github" / "workflows"
SHA_PIN = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
SCRIPT = re.compile(r"\bci/(run_[\w.-]+\.sh)\b")
BACKENDS = {"cpu", "cuda", "rocm", "tpu"}
# Jobs whose scripts other work in progress adds (the JAX-range and multi-process jobs); until
# they land, their absence skips the existence check instead of failing it.
PENDING_SCRIPTS = {"run_pytest_newest.sh", "run_multiprocess_cpu.sh"}
RUNNER_LABELS = {
    "cuda": ["self-hosted", "linux", "x64", "nvidia-gpu"],
    "rocm": ["self-hosted", "linux", "x64", "amd-gpu"],
    "tpu": ["self-hosted", "linux", "tpu"],
}


def _load(name):
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    # YAML 1.1 reads the key `on` as True.
    data["on"] = data.pop(True, data.get("on"))
    return data


@pytest.fixture(scope="module")
def ci():
    return _load("ci.yml")


@pytest.fixture(scope="module")
def release():
    return _load("release.yml")


def _entries(job):
    """The job's matrix entries (one entry, {}, for a job without a matrix)."""
    include = job.get("strategy", {}).get("matrix", {}).get("include")
    return include or [{}]


def _steps(job):
    return job.get("steps", [])


def _scripts(job):
    """Every ci/run_*.sh a job runs: from its matrix and its run: lines."""
    found = set()
    for entry in _entries(job):
        found |= set(SCRIPT.findall(str(entry.get("script", ""))))
    for step in _steps(job):
        found |= set(SCRIPT.findall(step.get("run", "")))
    return found - {"run_docker.sh"}


def _uses(workflow):
    return [
        step["uses"] for job in workflow["jobs"].values() for step in _steps(job) if "uses" in step
    ]


def test_ci_triggers_on_push_and_pull_request_and_cancels_superseded_runs(ci):
    assert {"push", "pull_request"} <= set(ci["on"])
    assert ci["concurrency"]["cancel-in-progress"] is True
    assert "github.ref" in ci["concurrency"]["group"]


@pytest.mark.parametrize("name", ["ci.yml", "release.yml"])
def test_permissions_are_least_privilege(name):
    workflow = _load(name)
    assert workflow["permissions"] == {"contents": "read"}
    for job_name, job in workflow["jobs"].items():
        for scope, level in job.get("permissions", {}).items():
            if level == "write":
                # Only PyPI's trusted publishing gets a write permission: its OIDC token.
                assert (name, job_name, scope) == ("release.yml", "publish", "id-token")


@pytest.mark.parametrize("name", ["ci.yml", "release.yml"])
def test_every_action_is_pinned_by_commit_sha(name):
    uses = _uses(_load(name))
    assert uses
    for ref in uses:
        assert ref.startswith("./") or SHA_PIN.match(ref), (
            f"{name}: {ref} is not pinned to a 40-hex SHA"
        )


def test_every_ci_script_is_run_by_some_job(ci):
    used = set().union(*(_scripts(job) for job in ci["jobs"].values()))
    scripts = {p.name for p in (REPO / "ci").glob("run_*.sh")} - {"run_docker.sh"}
    assert scripts - used == set(), "ci/ scripts no CI job runs"


@pytest.mark.parametrize("name", ["ci.yml", "release.yml"])
def test_every_job_script_and_dockerfile_exists(name):
    workflow = _load(name)
    pending = set()
    for job_name, job in workflow["jobs"].items():
        for script in _scripts(job):
            path = REPO / "ci" / script
            if not path.exists() and script in PENDING_SCRIPTS:
                pending.add(script)
                continue
            assert path.is_file(), f"{name}: job {job_name} runs ci/{script}, which is missing"
            assert os.access(path, os.X_OK), f"ci/{script} is not executable"
        backends = {entry["docker"] for entry in _entries(job) if entry.get("docker")}
        for step in _steps(job):
            backends |= set(re.findall(r"run_docker\.sh --backend (\w+)", step.get("run", "")))
        for backend in backends:
            assert (REPO / "docker" / f"Dockerfile.{backend}").is_file(), (
                f"{name}: job {job_name} needs docker/Dockerfile.{backend}"
            )
    if pending:
        pytest.skip(f"not yet in ci/: {', '.join(sorted(pending))}")


def test_jobs_call_ci_scripts_through_run_docker(ci):
    for job_name, job in ci["jobs"].items():
        runs = [step["run"] for step in _steps(job) if "run" in step]
        assert runs, f"job {job_name} runs nothing"
        for entry in _entries(job):
            if entry.get("docker"):
                assert any(
                    'ci/run_docker.sh --backend "$DOCKER_BACKEND" -- "$SCRIPT"' in r for r in runs
                ), job_name


def test_matrix_covers_every_backend_on_the_right_runners(ci):
    entries = [(job, e) for job in ci["jobs"].values() for e in _entries(job)]
    assert {e.get("backend") for _, e in entries} >= BACKENDS
    for job, entry in entries:
        backend = entry.get("backend")
        if backend == "cpu":
            assert job["runs-on"] == "ubuntu-24.04"
        elif backend in RUNNER_LABELS:
            assert job["runs-on"] == "${{ matrix.runner }}"
            assert entry["runner"] == RUNNER_LABELS[backend]
            assert entry["script"].endswith(f"_{backend}.sh")
    scripts = {e.get("script") for _, e in entries}
    for backend in BACKENDS:
        assert f"ci/run_bazel_test_{backend}.sh" in scripts
        assert f"ci/run_pytest_{backend}.sh" in scripts


def test_bazel_and_pip_caches_are_keyed_on_the_lock_files(ci):
    for job_name in ("cpu", "accelerator"):
        caches = [
            s["with"]
            for s in _steps(ci["jobs"][job_name])
            if s.get("uses", "").startswith("actions/cache@")
        ]
        paths = {c["path"] for c in caches}
        assert {".cache/bazel-disk", ".cache/pip"} <= paths, job_name
        for cache in caches:
            assert "hashFiles('build/requirements_lock" in cache["key"], cache["key"]
    assert "--disk_cache=" in ci["env"]["JAXCORE_BAZEL_OPTIONS"]


def test_wheels_job_builds_twice_and_uploads_the_wheels(ci):
    job = ci["jobs"]["wheels"]
    assert _scripts(job) == {"run_wheels.sh"}
    uploads = [s for s in _steps(job) if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert uploads and uploads[0]["with"]["path"] == "dist/*.whl"
    text = (REPO / "ci" / "run_wheels.sh").read_text()
    assert "--wheels=all" in text and "sha256sum" in text


def test_release_publishes_with_trusted_publishing_after_the_cpu_jobs(release):
    assert list(release["on"]) == ["push"] and release["on"]["push"]["tags"] == ["v*"]
    jobs = release["jobs"]
    assert _scripts(jobs["cpu"]) >= {"run_bazel_test_cpu.sh", "run_pytest_cpu.sh"}
    assert jobs["wheels"]["needs"] == "cpu"
    assert _scripts(jobs["wheels"]) == {"run_wheels.sh"}
    publish = jobs["publish"]
    assert publish["needs"] == "wheels"
    assert publish["permissions"] == {"id-token": "write"}
    assert publish["environment"]["name"] == "pypi"
    steps = [
        s for s in _steps(publish) if s.get("uses", "").startswith("pypa/gh-action-pypi-publish@")
    ]
    assert len(steps) == 1
    assert not {"password", "user"} & set(steps[0].get("with", {})), (
        "trusted publishing needs no token"
    )
    assert "secrets." not in (WORKFLOWS / "release.yml").read_text()


def test_lint_job_runs_the_code_health_checks_in_the_cpu_image(ci):
    entries = [e for e in _entries(ci["jobs"]["cpu"]) if e.get("script") == "ci/run_lint.sh"]
    assert entries == [
        {"job": "lint", "backend": "cpu", "docker": "cpu", "script": "ci/run_lint.sh"}
    ]


def _dev_tool(name):
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)


@pytest.mark.skipif(
    _dev_tool("actionlint") is None or _dev_tool("shellcheck") is None,
    reason="actionlint or shellcheck is not installed "
    "(build/requirements_dev_lock.txt; `build/build.py setup` installs them)",
)
def test_actionlint_and_shellcheck_of_the_run_blocks_are_clean():
    result = subprocess.run(
        [
            _dev_tool("actionlint"),
            "-no-color",
            "-oneline",
            f"-shellcheck={_dev_tool('shellcheck')}",
            "-pyflakes=",
            *sorted(str(p) for p in WORKFLOWS.glob("*.yml")),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr

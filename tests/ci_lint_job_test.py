"""Tests of ci/run_lint.sh, the code-health job (ruff check, ruff format, mypy, ShellCheck).

The job runs for real with fake tools (shell scripts that print findings in each tool's format
and exit as the tool would), so the counting and the exit status are checked against counts
chosen here; one test runs the real ShellCheck from the dev-tools lock over the repository.
"""

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "ci" / "run_lint.sh"

# Fake tools: each prints $FAKE_<TOOL> (a string with \n escapes) and exits 1 when it printed
# anything, as the real tools do on findings.
_FAKE = """#!/usr/bin/env bash
out="${{{var}:-}}"
printf '%b' "$out"
[[ -z "$out" ]]
"""


def _tools(tmp_path, *, real_shellcheck=False):
    tools = tmp_path / "venv" / "bin"
    tools.mkdir(parents=True)
    for name, var in [("ruff", "FAKE_RUFF"), ("python", "FAKE_PY"), ("shellcheck", "FAKE_SC")]:
        path = tools / name
        if name == "shellcheck" and real_shellcheck:
            path.symlink_to(real_shellcheck)
            continue
        path.write_text(_FAKE.format(var=var))
        path.chmod(0o755)
    # The job checks that the venv has mypy; it runs it as `python -m mypy`.
    (tools / "mypy").write_text("#!/usr/bin/env bash\nexit 2\n")
    (tools / "mypy").chmod(0o755)
    # ruff's two subcommands print differently: dispatch on the first argument.
    (tools / "ruff").write_text(
        '#!/usr/bin/env bash\nif [[ "$1" == format ]]; then out="${FAKE_FORMAT:-}"; '
        'else out="${FAKE_RUFF:-}"; fi\nprintf \'%b\' "$out"\n[[ -z "$out" ]]\n'
    )
    return tools


def _run(tools, **env):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JAXCORE_", "FAKE_"))}
    return subprocess.run(
        ["bash", str(SCRIPT)],
        env=dict(base, JAXCORE_SKIP_SETUP="1", JAXCORE_PYTHON=str(tools / "python"), **env),
        capture_output=True,
        text=True,
        cwd="/",
        timeout=120,
    )


def _commands(stdout):
    return [shlex.split(line[2:]) for line in stdout.splitlines() if line.startswith("+ ")]


def test_job_is_strict_and_reads_the_default_env():
    text = SCRIPT.read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text and "source ci/envs/default.env" in text
    assert os.access(SCRIPT, os.X_OK)


def test_dry_run_prints_the_four_checks(tmp_path):
    tools = tmp_path / "bin"
    result = _run(tools, JAXCORE_DRY_RUN="1")
    assert result.returncode == 0, result.stderr
    ruff_check, ruff_format, mypy, shellcheck = _commands(result.stdout)
    assert ruff_check[:2] == [str(tools / "ruff"), "check"] and ruff_check[-1] == "."
    assert ruff_format[:3] == [str(tools / "ruff"), "format", "--check"]
    assert ruff_format[-1] == "."
    assert mypy[:5] == [str(tools / "python"), "-m", "mypy", "--config-file", "mypy.ini"]
    assert shellcheck[0] == str(tools / "shellcheck")
    scripts = shellcheck[shellcheck.index("--") + 1 :]
    # Every shell script of the four directories, found by name, shebang or directive; no
    # Python file (tests/*.py hold bash snippets in strings, not on their first line).
    expected = {
        ".ci/run",
        "build/parallel_accelerator_execute.sh",
        "ci/_common.sh",
        "ci/envs/default.env",
        *(f"ci/{p.name}" for p in (REPO / "ci").glob("*.sh")),
    }
    assert expected <= set(scripts)
    assert not [s for s in scripts if s.endswith(".py")]
    assert "findings: ruff check: 0, ruff format: 0, mypy: 0, shellcheck: 0" in result.stderr


@pytest.mark.parametrize(
    ("env", "counts"),
    [
        ({}, (0, 0, 0, 0)),
        (
            {
                "FAKE_RUFF": "a.py:1:2: F401 unused\\nb.py:3:4: E711 x\\nFound 2 errors.\\n",
                "FAKE_FORMAT": "a.py:1:1: unformatted: File would be reformatted\\n1 file would be reformatted\\n",
                "FAKE_PY": "jaxcore/x.py:5: error: bad  [arg-type]\\njaxcore/x.py:5: note: n\\n",
                "FAKE_SC": "ci/a.sh:1:1: warning: w [SC2086]\\n",
            },
            (2, 1, 1, 1),
        ),
        ({"FAKE_PY": "jaxcore/x.py:1: error: bad  [misc]\\n"}, (0, 0, 1, 0)),
    ],
)
def test_findings_are_counted_and_fail_the_job(tmp_path, env, counts):
    result = _run(_tools(tmp_path), **env)
    names = ("ruff check", "ruff format", "mypy", "shellcheck")
    summary = ", ".join(f"{n}: {c}" for n, c in zip(names, counts, strict=True))
    assert f"findings: {summary}" in result.stderr
    assert result.returncode == (1 if any(counts) else 0), result.stderr
    for name, count in zip(names, counts, strict=True):
        assert f"[ci] {name}: {'FAILED' if count else 'passed'}" in result.stderr


def test_every_check_runs_although_an_earlier_one_failed(tmp_path):
    result = _run(_tools(tmp_path), FAKE_RUFF="a.py:1:1: F401 x\\n")
    assert result.returncode == 1
    assert len(_commands(result.stdout)) == 4


def test_a_missing_tool_fails_clearly(tmp_path):
    tools = _tools(tmp_path)
    (tools / "shellcheck").unlink()
    result = _run(tools)
    assert result.returncode == 1
    assert f"{tools / 'shellcheck'} is missing" in result.stderr
    assert "requirements_dev_lock.txt" in result.stderr


def _shellcheck():
    here = Path(sys.executable).parent / "shellcheck"
    return str(here) if here.exists() else shutil.which("shellcheck")


@pytest.mark.skipif(
    _shellcheck() is None,
    reason="shellcheck is not installed (build/requirements_dev_lock.txt)",
)
def test_every_shell_script_is_shellcheck_clean(tmp_path):
    result = _run(_tools(tmp_path, real_shellcheck=_shellcheck()))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "shellcheck: 0" in result.stderr


def _extractor():
    spec = importlib.util.spec_from_file_location(
        "dockerfile_run_scripts", REPO / "ci" / "dockerfile_run_scripts.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_SAMPLE_DOCKERFILE = """\
ARG BASE=debian:bookworm@sha256:00
FROM ${BASE}
# a comment
ARG GREETING=hello
ENV A=1 \\
    B="two words"
SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
RUN --mount=type=bind,source=x,target=/x \\
    echo "${GREETING} ${A} ${B}"; \\
    printf '%s\\n' \\
      'a' 'b'
RUN listing=$(ls); echo $listing
"""


def test_dockerfile_runs_become_scripts_with_their_shell_and_names(tmp_path):
    dockerfile = tmp_path / "Dockerfile.sample"
    dockerfile.write_text(_SAMPLE_DOCKERFILE)
    (first_line, first), (second_line, second) = _extractor().run_scripts(dockerfile)
    assert (first_line, second_line) == (8, 12)
    lines = first.splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    assert "set -euo pipefail" in lines
    # Every ARG and ENV before the RUN is assigned, so ShellCheck knows the names.
    assert {"BASE=debian:bookworm@sha256:00", "GREETING=hello", "A=1", "B='two words'"} <= set(
        lines
    )
    # The --mount flag is gone; the continuation lines stay lines (bash joins them as Docker).
    assert 'echo "${GREETING} ${A} ${B}"; \\' in [line.strip() for line in lines]
    assert "--mount" not in first
    assert second.rstrip().endswith("echo $listing")


def test_extractor_writes_one_script_per_run(tmp_path):
    dockerfile = tmp_path / "Dockerfile.sample"
    dockerfile.write_text(_SAMPLE_DOCKERFILE)
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "ci" / "dockerfile_run_scripts.py"),
            str(tmp_path / "out"),
            str(dockerfile),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        str(tmp_path / "out" / "Dockerfile.sample.line8.sh"),
        str(tmp_path / "out" / "Dockerfile.sample.line12.sh"),
    ]


@pytest.mark.skipif(_shellcheck() is None, reason="shellcheck is not installed")
def test_shellcheck_finds_a_problem_in_a_dockerfile_run(tmp_path):
    dockerfile = tmp_path / "Dockerfile.sample"
    dockerfile.write_text(_SAMPLE_DOCKERFILE)
    scripts = []
    for line, text in _extractor().run_scripts(dockerfile):
        path = tmp_path / f"run{line}.sh"
        path.write_text(text)
        scripts.append(str(path))
    result = subprocess.run(
        [_shellcheck(), "--format=gcc", *scripts], capture_output=True, text=True, timeout=60
    )
    # Only the unquoted $listing of the second RUN: the first is clean.
    findings = result.stdout.splitlines()
    assert len(findings) == 1 and "run12.sh" in findings[0] and "SC2086" in findings[0], findings

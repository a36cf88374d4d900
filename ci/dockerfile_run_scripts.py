#!/usr/bin/env python3
"""Writes every ``RUN`` instruction of docker/Dockerfile.* as a bash script, for ShellCheck.

Usage: ``python3 ci/dockerfile_run_scripts.py OUT_DIR [DOCKERFILE ...]`` (default: every
docker/Dockerfile.*). Prints the scripts written, one a line. Each is named after its
Dockerfile and the line its ``RUN`` starts on (``Dockerfile.cpu.line42.sh``), starts with the
options of the Dockerfile's ``SHELL`` (``set -euo pipefail``), and assigns every ``ARG`` and
``ENV`` declared before it, so ShellCheck knows those names. ci/run_lint.sh checks them with
the repository's scripts.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_FLAG = re.compile(r"^--[\w-]+(=\S+)?\s+")


def instructions(text: str) -> list[tuple[int, str, str]]:
    """Splits a Dockerfile into ``(first line, INSTRUCTION, arguments)``, as Docker reads it.

    Comment lines are dropped. Continuation lines keep their backslash-newline, which bash
    reads as Docker does (one logical line), so a script keeps the Dockerfile's lines.
    """
    result = []
    current: list[str] = []
    start = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("#") or (not line.strip() and not current):
            continue
        if not current:
            start = number
        if line.rstrip().endswith("\\"):
            current.append(line.rstrip()[:-1])
            continue
        current.append(line)
        keyword, _, args = "\\\n".join(current).strip().partition(" ")
        result.append((start, keyword.upper(), args.strip()))
        current = []
    if current:
        keyword, _, args = "\\\n".join(current).strip().partition(" ")
        result.append((start, keyword.upper(), args.strip()))
    return result


def _assignments(keyword: str, args: str) -> list[tuple[str, str]]:
    """The names an ``ARG`` or ``ENV`` instruction defines, with their values."""
    words = shlex.split(args.replace("\\\n", " "))
    if keyword == "ENV" and len(words) >= 2 and "=" not in words[0]:
        return [(words[0], " ".join(words[1:]))]  # the legacy `ENV NAME value` form
    return [(w.partition("=")[0], w.partition("=")[2]) for w in words]


def run_scripts(dockerfile: Path) -> list[tuple[int, str]]:
    """Returns ``(line, script text)`` for each ``RUN`` of ``dockerfile``."""
    shell_options = "set -euo pipefail"
    defined: dict[str, str] = {}
    scripts = []
    for line, keyword, args in instructions(dockerfile.read_text()):
        if keyword == "SHELL":
            argv = json.loads(args.replace("\\\n", " "))
            # ["/bin/bash", "-euo", "pipefail", "-c"]: the options between the shell and -c.
            options = argv[1:-1] if argv[-1:] == ["-c"] else argv[1:]
            shell_options = f"set {' '.join(options)}" if options else ""
        elif keyword in ("ARG", "ENV"):
            defined.update(_assignments(keyword, args))
        elif keyword == "RUN":
            body = args
            while _FLAG.match(body):
                body = _FLAG.sub("", body, count=1)
            header = [
                "#!/usr/bin/env bash",
                f"# {dockerfile.relative_to(REPO) if dockerfile.is_relative_to(REPO) else dockerfile}"
                f", the RUN on line {line}",
                shell_options,
                *(f"{name}={shlex.quote(value)}" for name, value in defined.items()),
                # The ARG/ENV values are what the RUN reads; nothing here uses them otherwise.
                *(f': "${{{name}}}"' for name in defined),
            ]
            scripts.append((line, "\n".join(header) + "\n" + body + "\n"))
    return scripts


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    dockerfiles = [Path(a) for a in argv[1:]] or sorted((REPO / "docker").glob("Dockerfile.*"))
    for dockerfile in dockerfiles:
        for line, text in run_scripts(dockerfile.resolve()):
            path = out / f"{dockerfile.name}.line{line}.sh"
            path.write_text(text)
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

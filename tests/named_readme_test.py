"""The README's ``jaxcore.named`` example runs as printed, and its training loss falls."""

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _named_section_code() -> str:
    text = README.read_text()
    section = re.search(r"^## Named axes: `jaxcore\.named`\n(.*?)^## ", text, re.S | re.M)
    assert section, "README has no '## Named axes: `jaxcore.named`' section"
    blocks = re.findall(r"^```python\n(.*?)^```$", section.group(1), re.S | re.M)
    assert len(blocks) == 1, "the jaxcore.named section should show one Python example"
    return blocks[0]


def test_readme_named_example_runs_and_trains():
    code = _named_section_code()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {"__name__": "readme_example"})  # noqa: S102 - the README's own code
    lines = out.getvalue().splitlines()
    assert lines[0] == "(Axis('layers', 4), Axis('mlp', 256), Axis('embed', 64))"
    losses = [float(line.split()[1]) for line in lines[1:]]
    assert len(losses) == 5
    assert losses == sorted(losses, reverse=True) and losses[-1] < 0.5 * losses[0]

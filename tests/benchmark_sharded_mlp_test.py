"""benchmarks/sharded_mlp.py end to end at tiny sizes, in its own process (it sets up the
fake CPU devices its mesh needs): every contender's row, the split weights' programs free
of all-gathers, results equal to the dequantized block, and its refusals."""

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "sharded_mlp.py"
CONTENDERS = [
    "f32 split",
    "int8 split",
    "int8 replicated",
    "int4 split",
    "int4 replicated",
    "nf4 split",
    "nf4 replicated",
]


def _run(*args):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def test_prints_every_contender_with_memory_gathers_and_errors():
    result = _run("--devices", "4", "--d", "128", "--hidden", "512", "--m", "1", "3", "--reps", "2")
    assert result.returncode == 0, result.stderr[-4000:]
    out = result.stdout
    assert "tp=4" in out
    rows = {}
    for line in out.splitlines():
        for name in CONTENDERS:
            if line.strip().startswith(name + " "):
                fields = line.split()[len(name.split()) :]
                rows.setdefault(name, []).append(fields)
    assert sorted(rows) == sorted(CONTENDERS), out
    for name, lines in rows.items():
        assert len(lines) == 2, (name, out)  # one per M
        for ms, ratio, args_mib, temp_mib, gathers, error in lines:
            assert float(ms) > 0 and ratio.endswith("x"), (name, out)
            assert float(args_mib) > 0 and float(temp_mib) >= 0, (name, out)
            assert float(error) < 1e-4, (name, out)
            if name.endswith("split"):
                assert gathers == "0", (name, out)
    # A replicated weight's arguments are the whole weight on each device: 4x a split one's.
    split = float(rows["int4 split"][0][2])
    whole = float(rows["int4 replicated"][0][2])
    assert whole > 3 * split, out
    assert re.search(r"\| M \| f32 split \| int8 split \|", out), out
    assert "| 1 | 1.00x |" in out and "| 3 | 1.00x |" in out, out


def test_refuses_a_hidden_width_that_would_cut_blocks_and_a_one_device_mesh():
    bad = _run("--devices", "4", "--hidden", "320")
    assert bad.returncode == 2 and "--hidden 320" in bad.stderr and "multiple of 256" in bad.stderr
    one = _run("--devices", "1")
    assert one.returncode == 2 and "--devices must be at least 2" in one.stderr

"""benchmarks/quantized_matmul.py on CPU: its chained timing and the script end to end.

The chained call (``--chain L``: L matmuls, each by its own weight copy, in one jitted
program) is checked against separate ``jnp.dot`` calls, the weight rotation against the
copies it must cycle over, and the script at tiny sizes for its header, rows and table,
with whichever kernel serves here (the native plugin, or the reference kernel alone).
"""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "quantized_matmul.py"
TRANSPOSED_SCRIPT = REPO / "benchmarks" / "quantized_matmul_transposed.py"
STACKED_SCRIPT = REPO / "benchmarks" / "stacked_layers.py"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(SCRIPT.parent))  # the script imports plot_tables beside it
    try:
        spec = importlib.util.spec_from_file_location("quantized_matmul_bench", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return module


def _run(*args, script=SCRIPT):
    return subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
    )


def test_chained_call_returns_each_product_in_sequence(bench):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((3, 16)), jnp.float32)
    ws = [jnp.asarray(rng.standard_normal((16, 8)), jnp.float32) for _ in range(3)]
    fn = bench._chain.chained(jnp.dot, 3)  # benchmarks/_chain.py, as the script imports it
    outs = fn(x, ws)
    assert len(outs) == 3
    for got, w in zip(outs, ws):
        np.testing.assert_allclose(got, np.asarray(x) @ np.asarray(w), rtol=1e-5, atol=1e-5)
    # Each product waits for the one before through a data dependence (which, unlike an
    # optimization barrier, XLA keeps): every dot but the first reads activations computed
    # from the previous dot's output.
    jaxpr = jax.make_jaxpr(fn)(x, ws).jaxpr.eqns[0].params["jaxpr"].jaxpr
    made_by = {id(v): e for e in jaxpr.eqns for v in e.outvars}

    def depends_on(var, target, seen):
        eqn = made_by.get(id(var))
        if eqn is None or id(eqn) in seen:
            return False
        seen.add(id(eqn))
        return any(v is target or depends_on(v, target, seen) for v in eqn.invars)

    dots = [e for e in jaxpr.eqns if e.primitive.name == "dot_general"]
    assert len(dots) == 3
    assert not any(e.primitive.name == "optimization_barrier" for e in jaxpr.eqns)
    for before, after in zip(dots, dots[1:]):
        assert depends_on(after.invars[0], before.outvars[0], set())
    assert not depends_on(dots[0].invars[0], dots[1].outvars[0], set())
    with pytest.raises(ValueError, match="expected 3 weights, got 2"):
        fn(x, ws[:2])


def test_copies_come_in_whole_sets_that_cover_the_rotation(bench):
    assert bench._copy_count(rotate=100, nbytes=10, chain=4) == 12  # 3 sets of 4 >= 100 bytes
    assert bench._copy_count(rotate=10, nbytes=10, chain=4) == 8  # never fewer than 2 sets
    assert bench._copy_count(rotate=100, nbytes=10, chain=1) == 10
    assert bench._sets(list(range(6)), 3) == [[0, 1, 2], [3, 4, 5]]


def test_time_rotating_cycles_the_sets_and_divides_by_the_chain(bench):
    seen = []

    def fn(tag):
        seen.append(tag)
        return jnp.zeros(())

    t = bench._time_rotating({"a": (fn, [("s0",), ("s1",)])}, reps=5, per_call=4)
    # One warm-up call per set, then one call per repetition on the next set.
    assert seen == ["s0", "s1", "s0", "s1", "s0", "s1", "s0"]
    assert 0 <= t["a"] < 1


def test_time_rotating_shuffles_the_order_of_each_repetition(bench):
    calls = []

    def make(name):
        def fn(tag):
            calls.append((name, tag))
            return jnp.zeros(())

        return fn

    names = ["a", "b", "c"]
    contenders = {n: (make(n), [(f"{n}0",), (f"{n}1",)]) for n in names}
    bench._time_rotating(contenders, reps=12, per_call=1)
    timed = calls[2 * len(names) :]  # after each contender's warm-up calls
    reps = [timed[i : i + 3] for i in range(0, len(timed), 3)]
    assert len(reps) == 12
    for rep, group in enumerate(reps):
        # Every contender once per repetition, on the set the repetition picks.
        assert sorted(group) == [(n, f"{n}{rep % 2}") for n in names]
    # No contender keeps the same place (so none always follows the same neighbour).
    for n in names:
        assert len({[name for name, _ in g].index(n) for g in reps}) > 1
    assert len({tuple(name for name, _ in g) for g in reps}) > 2


def test_script_times_chained_calls_end_to_end():
    result = _run(
        *("--k", "64", "--n", "64", "--m", "1", "3", "--reps", "2", "--rotate-mb", "1"),
        *("--chain", "2"),
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "2 matmuls in sequence per timed jitted call, time per matmul = call / 2" in out
    assert "M = 1: dense f32" in out and "M = 3: dense f32" in out
    # Per M, a row per format: native, int8-activation and reference cells, each
    # "ms ratio GB/s" or three dashes.
    formats = ("int8", "int8-b32", "int8-b32-f16", "int4", "int4-f16", "nf4", "nf4-dq")
    rows = [r for r in (line.split() for line in out.splitlines()) if r and r[0] in formats]
    timed = [r for r in rows if len(r) == 10]
    assert sorted(r[0] for r in timed) == sorted(formats * 2)
    for row in timed:
        cells = [row[i : i + 3] for i in (1, 4, 7)]
        timed_cells = [[float(v) for v in c] for c in cells if c != ["-"] * 3]
        assert timed_cells, row
        for ms, ratio, gbps in timed_cells:
            # GB/s prints 0.0 at these sizes; ms and the ratio to dense do not.
            assert ms > 0 and ratio > 0 and gbps >= 0, row
    if "native kernels: ISA" in out:
        table = out[out.index("ratio to dense f32") :]
        assert table.count("| 1 |") == 1 and table.count("| 3 |") == 1
    # ggml (llama.cpp's library) beside them where ggml-python imports, else a note saying so.
    if "ggml skipped:" in out:
        assert "pip install ggml-python" in out
    else:
        ggml_rows = [
            r for r in (line.split() for line in out.splitlines()) if r[:1] == ["ggml-q8_0"]
        ]
        assert len(ggml_rows) == 3, out  # its stored bytes, then one row per M
        assert "| ggml-q8_0 | ggml-q4_0 |" in out


def test_script_times_single_calls_with_chain_one():
    result = _run(
        *("--k", "64", "--n", "32", "--m", "2", "--reps", "1", "--rotate-mb", "1"),
        *("--chain", "1", "--no-reference", "--precision", "int8"),
    )
    assert result.returncode == 0, result.stderr
    assert "one matmul per timed call" in result.stdout
    assert "M = 2: dense f32" in result.stdout


def test_script_rejects_a_chain_below_one():
    result = _run("--chain", "0")
    assert result.returncode == 2
    assert "--chain must be at least 1, got 0" in result.stderr


def test_transposed_script_times_every_format_against_both_dense_products():
    result = _run(
        *("--k", "64", "--n", "96", "--m", "1", "3", "--reps", "2", "--rotate-mb", "1"),
        *("--chain", "2"),
        script=TRANSPOSED_SCRIPT,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "x @ W.T with W (K=64, N=96), x (M, 96) float32" in out
    assert "M = 1: dense f32 x @ W" in out and "M = 3: dense f32 x @ W" in out
    formats = ("int8", "int8-b32", "int8-b32-f16", "int4", "int4-f16", "nf4", "nf4-dq")
    rows = [r for r in (line.split() for line in out.splitlines()) if r and r[0] in formats]
    assert sorted(r[0] for r in rows) == sorted(formats * 2)
    for row in rows:  # native "ms ratio GB/s" (or dashes), then reference "ms ratio"
        assert len(row) == 6, row
        assert float(row[4]) > 0 and float(row[5]) > 0, row
        if row[1] != "-":
            assert float(row[1]) > 0 and float(row[2]) > 0, row
    table = out[out.index("x @ W.T, ratio to dense f32 x @ W") :]
    assert "| M | dense x @ W.T |" in table
    assert table.count("| 1 |") == 1 and table.count("| 3 |") == 1


def test_transposed_script_rejects_a_chain_below_one():
    result = _run("--chain", "0", script=TRANSPOSED_SCRIPT)
    assert result.returncode == 2
    assert "--chain must be at least 1, got 0" in result.stderr


def test_stacked_layers_script_times_every_layout_of_every_format():
    result = _run(
        *("--d", "64", "--hidden", "128", "--layers", "2", "--m", "1", "2", "--reps", "2"),
        *("--copied", "--copies", "2"),
        script=STACKED_SCRIPT,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "2 layers, d=64 hidden=128, float32 x" in out
    layouts = ("separate", "scan", "W[i] loop")
    rows = [line.split() for line in out.splitlines() if line.startswith("  ") and "x " not in line]
    rows = [r for r in rows if r and r[0] in ("dense", "int8", "int4", "nf4")]
    assert len(rows) == 2 * (4 * len(layouts) + 3 * 2)  # + scan, W[i] loop copied per format
    assert sum("copied" in r for r in rows) == 2 * 3 * 2
    for row in rows:  # name, layout (1 or 2 words), ms, x dense, x separate[, err]
        numbers = [float(v) for v in row if v.replace(".", "").replace("e-", "").isdigit()]
        assert len(numbers) == (3 if row[0] == "dense" else 4), row
        assert all(v > 0 for v in numbers[:3]), row
        if row[0] != "dense":
            assert numbers[3] < 1e-4, row  # the layouts compute the same model
    table = out[out.index("ratio to the dense model laid out the same way") :]
    assert "| M | int8 separate | int8 scan | int8 W[i] loop |" in table
    assert table.count("| 1 |") == 1 and table.count("| 2 |") == 1


def test_stacked_layers_script_rejects_bad_sizes():
    result = _run("--layers", "0", script=STACKED_SCRIPT)
    assert result.returncode == 2
    assert "--layers must be at least 1, got 0" in result.stderr
    result = _run("--d", "96", script=STACKED_SCRIPT)
    assert result.returncode == 2
    assert "--d and --hidden must be multiples of 64" in result.stderr


def test_scale_dtypes_script_times_each_format_against_its_16_bit_twin():
    pytest.importorskip("jaxcore_cpu")
    import jaxcore_cpu

    try:
        jaxcore_cpu.isa()
    except Exception as e:  # noqa: BLE001 - no library built here
        pytest.skip(f"native kernels unavailable: {e}")
    result = _run(
        *("--k", "128", "--n", "96", "--m", "1", "3", "--reps", "2", "--rotate-mb", "1"),
        *("--chain", "2"),
        script=REPO / "benchmarks" / "scale_dtypes.py",
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "int8-b32-f16  1.0625 bytes per weight" in out
    for precision in ("int8", "float32"):
        for m in (1, 3):
            section = out[out.index(f"{precision} activations, M = {m}:") :]
            for name, twin in [
                ("int8-b32-f16", "int8-b32"),
                ("int4-f16", "int4"),
                ("nf4-bf16", "nf4"),
            ]:
                line = next(x for x in section.splitlines() if x.strip().startswith(name))
                ratios = [float(r) for r in re.findall(r"([0-9.]+)x", line)]
                assert f"x {twin} (" in line and len(ratios) == 2 and min(ratios) > 0, line

"""benchmarks/_ggml.py: ggml (llama.cpp's library) as a contender of quantized_matmul.py.

Without ggml-python the helper says how to install it; with it, each ggml format's products
are checked against float64 NumPy at sizes that are no multiple of ggml's or jaxcore's tiles,
and its bad inputs against the errors that name them.
"""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import _ggml  # noqa: E402  (benchmarks/ is not a package)


def test_load_without_ggml_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "ggml", None)  # import ggml raises ImportError
    module, why = _ggml.load()
    assert module is None
    assert why.startswith("ggml skipped:") and "pip install ggml-python" in why
    assert "GGML_LLAMAFILE=ON" in why


@pytest.fixture(scope="module")
def ggml():
    module, why = _ggml.load()
    if module is None:
        pytest.skip(why)
    return module


@pytest.mark.parametrize(
    "fmt, tolerance, per_weight", [("q8_0", 0.03, 1.0625), ("q4_0", 0.25, 0.5625)]
)
def test_products_match_numpy_and_rotate_distinct_copies(ggml, fmt, tolerance, per_weight):
    rng = np.random.default_rng(0)
    k, n = 96, 40  # K in whole 32-blocks (ggml's rows), N no multiple of any tile
    w = (rng.standard_normal((k, n)) * 0.02).astype(np.float32)
    c = _ggml.Contender(ggml, fmt, w, copies=4, chain=2, threads=2)
    try:
        assert c.nbytes == _ggml.stored_bytes(ggml, fmt, k, n) == round(per_weight * k * n)
        for m in (1, 3, 17):
            x = rng.standard_normal((m, k)).astype(np.float32)
            want = x.astype(np.float64) @ w
            err = c.check(x, w, tolerance)
            assert 0 < err <= tolerance
            fn, sets = c.contender(x)
            assert len(sets) == 2  # 4 copies in graphs of 2
            for args in sets:
                fn(*args)
                for i in range(2):  # every product of every set, each by its own copy
                    got = c.output(args[1], i)
                    assert got.shape == (m, n)
                    assert np.linalg.norm(got - want) <= tolerance * np.linalg.norm(want)
        pointers = {ggml.ggml_get_data(t) for t in c._weights}
        assert len(pointers) == 4
    finally:
        c.close()
        c.close()  # idempotent


def test_bad_inputs_raise_naming_the_problem(ggml):
    w = np.zeros((64, 8), np.float32)
    with pytest.raises(ValueError, match="unknown ggml format 'q5_0'"):
        _ggml.Contender(ggml, "q5_0", w, copies=2, chain=1, threads=1)
    with pytest.raises(ValueError, match=r"copies \(3\) must be a multiple of chain \(2\)"):
        _ggml.Contender(ggml, "q8_0", w, copies=3, chain=2, threads=1)
    c = _ggml.Contender(ggml, "q8_0", w, copies=2, chain=2, threads=1)
    try:
        with pytest.raises(ValueError, match="x has 32 columns, the weight 64 rows"):
            c.contender(np.zeros((1, 32), np.float32))
        rng = np.random.default_rng(1)
        x = rng.standard_normal((2, 64)).astype(np.float32)
        with pytest.raises(RuntimeError, match="ggml's product is off by"):
            c.check(x, np.ones((64, 8), np.float32), 0.03)  # not the weight it holds
    finally:
        c.close()


def test_script_drops_a_ggml_contender_whose_product_is_off(ggml, monkeypatch, capsys):
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "quantized_matmul.py"
    spec = importlib.util.spec_from_file_location("quantized_matmul_ggml_check", script)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setattr(bench, "_GGML_TOLERANCE", {"ggml-q8_0": 0.03, "ggml-q4_0": 0.0})
    argv = ["quantized_matmul.py", "--k", "64", "--n", "64", "--m", "1", "2", "--reps", "1"]
    monkeypatch.setattr(sys, "argv", [*argv, "--rotate-mb", "1", "--chain", "2", "--no-reference"])
    bench.main()
    out = capsys.readouterr().out
    assert "ggml-q4_0 skipped from M = 1 on: ggml's product is off by" in out
    assert "ggml-q4_0 skipped from M = 2" not in out  # dropped once, for the rest of the run
    table = out[out.index("ratio to dense f32") :]
    assert "ggml-q8_0" in table and "ggml-q4_0" not in table

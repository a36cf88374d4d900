"""The generated named ops (`_unary`, `_binary`, `_reductions`) match their generator.

``tools/gen_named_ops.py`` writes those modules from its tables; a table edited without
rerunning the script (or a hand edit of a generated file) fails here.
"""

import importlib.util
import inspect
import pathlib

import jax.numpy as jnp
import numpy as np

import jaxcore.named as hax

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _generator():
    path = ROOT / "tools" / "gen_named_ops.py"
    assert path.exists(), f"{path} is missing (Bazel: a data dependency of this test)"
    spec = importlib.util.spec_from_file_location(
        "gen_named_ops", ROOT / "tools" / "gen_named_ops.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_checked_in_files_are_current():
    gen = _generator()
    for fname, make in gen.FILES.items():
        text = (ROOT / "jaxcore" / "named" / fname).read_text()
        assert text == make(), f"jaxcore/named/{fname} is stale: run python3 tools/gen_named_ops.py"
    assert gen.main(["--check"]) == 0


def test_every_generated_op_is_a_real_def_exported_by_the_package():
    gen = _generator()
    for name in [*gen.UNARY, *gen.BINARY, *gen.REDUCTIONS]:
        fn = getattr(hax, name)
        assert name in hax.__all__
        assert fn.__name__ == name
        source_file = inspect.getsourcefile(fn)
        assert source_file.endswith(("_unary.py", "_binary.py", "_reductions.py")), source_file
        assert f"def {name}(" in inspect.getsource(fn)


def test_generated_reductions_and_scans_match_numpy():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 7
    B, H, W = hax.Axis("b", 2), hax.Axis("h", 3), hax.Axis("w", 4)
    a = hax.named(jnp.asarray(x), (B, H, W))
    np.testing.assert_allclose(hax.sum(a, "h").array, x.sum(1))
    np.testing.assert_allclose(hax.var(a, ("b", "w"), ddof=1).array, x.var((0, 2), ddof=1))
    np.testing.assert_allclose(hax.argmax(a, "w").array, x.argmax(2))
    np.testing.assert_allclose(hax.cumsum(a, "b").array, x.cumsum(0))
    np.testing.assert_allclose(hax.sort(-a, "w").array, np.sort(-x, 2))
    mask = hax.named(jnp.asarray(x > 0), (B, H, W))
    np.testing.assert_allclose(
        hax.max(a, "w", where=mask).array, np.max(x, 2, where=x > 0, initial=-np.inf)
    )

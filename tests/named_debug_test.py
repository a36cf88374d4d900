"""hax.debug: diagnose_common_issues finds reused arrays and arrays in static fields;
describe/visualize_sharding(s) report layouts by axis name."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType

import jaxcore.named as hax
import jaxcore.tree as jtree

B, E = hax.make_axes(batch=8, embed=4)


@jtree.dataclass
class Block:
    w: hax.NamedArray
    b: hax.NamedArray
    meta: object = jtree.field(static=True, default=None)


def test_clean_module_passes():
    hax.debug.diagnose_common_issues({"a": Block(hax.ones((E,)), hax.zeros((E,))), "n": 3})


def test_reused_array_is_reported_with_both_paths():
    w = hax.ones((B, E))
    model = {"enc": Block(w, hax.zeros((E,))), "dec": [Block(w, hax.zeros((E,)))]}
    with pytest.raises(
        hax.debug.ModuleProblems, match=r"stored at 2 places.*\['enc'\]\.w.*\['dec'\]\[0\]\.w"
    ) as e:
        hax.debug.diagnose_common_issues(model)
    assert len(e.value.reused_arrays) == 1 and not e.value.static_arrays
    raw = jnp.ones(3)  # positional arrays too
    with pytest.raises(hax.debug.ModuleProblems, match="shape \\(3,\\)"):
        hax.debug.diagnose_common_issues([raw, raw])


def test_array_in_static_field_is_reported():
    m = Block.__new__(Block)  # bypass the static-value check to build the bad module
    object.__setattr__(m, "w", hax.ones((E,)))
    object.__setattr__(m, "b", hax.zeros((E,)))
    object.__setattr__(m, "meta", jnp.ones(2))
    with pytest.raises(hax.debug.ModuleProblems, match=r"static field \.meta holds an array") as e:
        hax.debug.diagnose_common_issues(m)
    assert e.value.static_arrays == [".meta"]


@pytest.mark.multiaccelerator
def test_describe_and_visualize_sharding(capsys):
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices (tests/conftest.py provides 8 fake CPU devices)")
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto, AxisType.Auto))
    x = hax.shard(hax.named(jnp.ones((8, 4)), (B, E)), {"batch": "data"}, mesh=mesh)
    line = hax.debug.describe_sharding(x)
    assert line == "batch=8 -> data, embed=4 -> replicated (mesh data=4, model=2)"
    hax.debug.visualize_shardings({"x": x, "plain": np.ones(2), "n": 1})
    out = capsys.readouterr().out
    assert "['x']: batch=8 -> data" in out
    hax.debug.visualize_sharding(hax.named(jnp.ones(3), ("q",)))
    assert "q=3 (not split: one device)" in capsys.readouterr().out

    @jax.jit
    def f(a):
        hax.debug.visualize_sharding(a)
        return a

    jax.block_until_ready(f(x))
    jax.effects_barrier()
    assert "batch=8 -> data" in capsys.readouterr().out

"""jaxcore.named, jaxcore.quant, jaxcore.tree and jaxcore.utils across real processes.

Each area of tests/multiprocess_programs.py runs once as one process with 4 CPU devices and
then under `python -m jaxcore.launch` as 2 processes x 2 devices and as 4 x 1: the same
4-device global mesh, with each process holding only its own shards. The programs check
shardings and values themselves; here their gathered results must equal the one-process
run's bit for bit (up to float rounding where a sum runs over shards of several processes).
"""

import multiprocess_util as mp
import pytest

pytestmark = pytest.mark.multiprocess

TOPOLOGIES = [pytest.param(2, 2, id="2x2"), pytest.param(4, 1, id="4x1")]

# Results summed over shards that live in different processes: gloo adds them in another
# order than one process does.
_CLOSE = {
    "quant": {f"{fmt}_{k}": 1e-6 for fmt in ("nf4", "int8") for k in ("gx", "gx_sm")},
    "tree": {"centred_pos": 1e-6},
}


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    """Each area's results from one ordinary process (launcher not involved), run once."""
    out = tmp_path_factory.mktemp("alone")
    done = {}

    def results(area):
        if area not in done:
            run = mp.run_alone(area, str(out))
            assert run.returncode == 0, run.describe()
            done[area] = mp.load(out / f"{area}.npz")
        return done[area]

    return results


@pytest.mark.parametrize("processes, devices", TOPOLOGIES)
@pytest.mark.parametrize("area", ["named", "quant", "tree"])
def test_area_matches_one_process(area, processes, devices, alone, tmp_path):
    want = alone(area)
    run = mp.launch_program(processes, devices, area, str(tmp_path))
    assert run.returncode == 0, run.describe()
    for i in range(processes):
        assert f"[p{i}] {area}: " in run.stdout, run.describe()
    mp.assert_same_results(mp.load(tmp_path / f"{area}.npz"), want, close=_CLOSE.get(area))

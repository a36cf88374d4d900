"""A sharded pytree saved by N processes (orbax-checkpoint) restores into M != N processes."""

import multiprocess_util as mp
import pytest

pytestmark = pytest.mark.multiprocess

pytest.importorskip(
    "orbax.checkpoint",
    reason="orbax-checkpoint is not installed (build/requirements_lock.txt pins it)",
)


def test_save_from_two_processes_restore_into_four_and_one(tmp_path):
    saved = mp.launch_program(2, 2, "save", str(tmp_path))
    assert saved.returncode == 0, saved.describe()
    assert (tmp_path / "checkpoint").is_dir()

    four = mp.launch_program(4, 1, "restore", str(tmp_path))
    assert four.returncode == 0, four.describe()
    restored_by_four = mp.load(tmp_path / "restore.npz")

    one = mp.run_alone("restore", str(tmp_path))
    assert one.returncode == 0, one.describe()
    # The program checks every restored shard against the values it saved; both restores
    # gather the same full arrays.
    mp.assert_same_results(restored_by_four, mp.load(tmp_path / "restore.npz"))
    assert int(restored_by_four["step"]) == 7

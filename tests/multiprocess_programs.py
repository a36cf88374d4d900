"""Programs the multi-process tests run, alone (one process) or under `python -m jaxcore.launch`.

``python3 tests/multiprocess_programs.py AREA OUT_DIR [args]`` runs one area's checks on a
global mesh of ``jax.device_count()`` devices, whatever the number of processes, and has
process 0 write every result, gathered to full arrays, to ``OUT_DIR/AREA.npz``. The tests
run each area once as one process with 4 CPU devices and once under the launcher (2 x 2 and
4 x 1) and compare the files. Checks that only make sense across processes (non-addressable
reads) run only there; a failed check raises, which under the launcher fails the run.

Areas: ``named``, ``quant``, ``tree``, ``save`` / ``restore`` (checkpoint, with
orbax-checkpoint), ``crash`` (one process fails mid-run while the others wait on it).
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import jaxcore.launch

jaxcore.launch.initialize()  # a no-op when run alone

import jax  # noqa: E402 - after the environment set-up above
import jax.numpy as jnp  # noqa: E402 - after the environment set-up above
import numpy as np  # noqa: E402 - after the environment set-up above
from jax.experimental import multihost_utils  # noqa: E402 - after the environment set-up above
from jax.sharding import AxisType, NamedSharding  # noqa: E402 - after the environment set-up above
from jax.sharding import PartitionSpec as P  # noqa: E402 - after the environment set-up above

import jaxcore.named as hax  # noqa: E402 - after the environment set-up above
from jaxcore import tree as jtree  # noqa: E402 - after the environment set-up above
from jaxcore import utils as jutils  # noqa: E402 - after the environment set-up above
from jaxcore.quant import ArrayInt8, ArrayNF4  # noqa: E402 - after the environment set-up above

DEVICES = 4  # the global mesh always has 4 devices: 1 x 4, 2 x 2 or 4 x 1


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(f"process {jax.process_index()}: {message}")


def _mesh(shape, names):
    _check(
        jax.device_count() == DEVICES,
        f"expected {DEVICES} devices in the global mesh, found {jax.device_count()}",
    )
    return jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(names))


def _gather(tree):
    """Every leaf of ``tree`` as a full NumPy array on every process (a collective)."""
    full = multihost_utils.process_allgather(tree, tiled=True)
    return jax.tree.map(np.asarray, full)


def _check_shards(arr: jax.Array, full: np.ndarray, what: str) -> None:
    """Each shard this process holds equals the matching slice of ``full``."""
    for shard in arr.addressable_shards:
        np.testing.assert_array_equal(np.asarray(shard.data), full[shard.index], err_msg=what)


def _check_global(arr: jax.Array, what: str) -> None:
    """Across processes, ``arr`` must span devices this process cannot address."""
    if jax.process_count() > 1:
        _check(not arr.is_fully_addressable, f"{what} should be a global array")
        _check(
            len(arr.addressable_shards) == jax.local_device_count(),
            f"{what}: {len(arr.addressable_shards)} local shards",
        )


def _write(out: pathlib.Path, area: str, results: dict) -> None:
    flat = {k: np.asarray(v) for k, v in results.items()}
    if jax.process_index() == 0:
        np.savez(out / f"{area}.npz", **flat)
    print(
        f"{area}: {len(flat)} results checked in process {jax.process_index()} "
        f"of {jax.process_count()} ({jax.local_device_count()} local devices)"
    )


# ----------------------------------------------------------------------------- named


Batch, Embed, Hidden = hax.make_axes(batch=8, embed=8, hidden=16)


def _named_data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 8)).astype(np.float32)
    params = {
        "w1": rng.standard_normal((8, 16)).astype(np.float32) / 4,
        "b1": rng.standard_normal((16,)).astype(np.float32),
        "w2": rng.standard_normal((16, 8)).astype(np.float32) / 4,
        "b2": rng.standard_normal((8,)).astype(np.float32),
    }
    axes = {"w1": (Embed, Hidden), "b1": (Hidden,), "w2": (Hidden, Embed), "b2": (Embed,)}
    return x, params, axes


def _mlp_loss(p, x):
    h = hax.maximum(hax.dot(x, p["w1"], axis=Embed) + p["b1"], 0.0)
    y = hax.dot(h, p["w2"], axis=Hidden) + p["b2"]
    return hax.mean(y * y).array


def named(out: pathlib.Path) -> None:
    mesh = _mesh((2, 2), ("data", "model"))
    x_np, p_np, axes = _named_data()
    # hax.shard of data this process holds on its own devices -> one global array.
    local = hax.NamedArray(jnp.asarray(x_np), (Batch, Embed))
    _check(local.array.is_fully_addressable, "jnp.asarray should give a process-local array")
    x = hax.shard(local, {"batch": "data"}, mesh)
    _check(x.array.sharding.spec == P("data"), f"x sharded as {x.array.sharding.spec}")
    _check_global(x.array, "hax.shard(x)")
    _check_shards(x.array, x_np, "hax.shard(x)")
    # Process-local rows (each process has only its part) -> the same global array.
    sharding = hax.sharding_for_axis((Batch, Embed), {"batch": ("data", "model")}, mesh)
    rows = sorted(
        {idx[0].start or 0 for idx in sharding.addressable_devices_indices_map(x_np.shape).values()}
    )
    per_device = x_np.shape[0] // DEVICES
    mine = np.concatenate([x_np[r : r + per_device] for r in rows])
    x_local_rows = hax.NamedArray(
        jax.make_array_from_process_local_data(sharding, mine), (Batch, Embed)
    )
    _check_global(x_local_rows.array, "make_array_from_process_local_data")
    _check_shards(x_local_rows.array, x_np, "process-local rows")

    params = {k: hax.NamedArray(jnp.asarray(v), axes[k]) for k, v in p_np.items()}
    params = hax.shard(params, {"hidden": "model"}, mesh)
    _check(params["w1"].array.sharding.spec == P(None, "model"), "w1 sharding")

    compute = {"batch": "data", "hidden": "model"}
    hidden = hax.named_jit(
        lambda p, x: hax.maximum(hax.dot(x, p["w1"], axis=Embed) + p["b1"], 0.0),
        axis_resources=compute,
    )
    loss_and_grad = hax.named_jit(
        jax.value_and_grad(_mlp_loss),
        axis_resources=compute,
        out_axis_resources={"hidden": "model"},
    )

    @hax.named_jit(axis_resources=compute, out_axis_resources={"hidden": "model"})
    def sgd_step(p, x):
        grads = jax.grad(_mlp_loss)(p, x)
        return jax.tree.map(lambda w, g: w - 0.5 * g, p, grads)

    with jax.set_mesh(mesh):
        h = hidden(params, x)
        loss, grads = loss_and_grad(params, x)
        loss_again, _ = loss_and_grad(params, x_local_rows)
        new_params = sgd_step(params, x)
        new_loss, _ = loss_and_grad(new_params, x)
    _check(h.axes == (Batch, Hidden), f"hidden axes {h.axes}")
    _check(
        h.array.sharding.spec == P("data", "model"), f"hidden sharded as {h.array.sharding.spec}"
    )
    _check_global(h.array, "hidden activations")
    _check(
        grads["w1"].axes == (Embed, Hidden) and grads["w1"].array.sharding.spec == P(None, "model"),
        f"grad w1: {grads['w1'].axes}, {grads['w1'].array.sharding.spec}",
    )
    _check(float(loss) == float(loss_again), "same loss from both ways of building x")
    _check(
        float(new_loss) < float(loss), f"an SGD step should lower the loss: {loss} -> {new_loss}"
    )

    if jax.process_count() > 1:
        # Asking for data this process does not hold is an error that says what to do,
        # never a hang; a replicated scalar (the loss) is readable everywhere.
        for name, read in [
            ("np.asarray", lambda: np.asarray(h.array)),
            ("tolist", h.tolist),
            ("tobytes", h.tobytes),
        ]:
            try:
                read()
            except RuntimeError as e:
                _check(
                    "non-addressable" in str(e) and "process_allgather" in str(e),
                    f"{name} error does not explain itself: {e}",
                )
            else:
                raise AssertionError(f"{name} of a global array should raise")

    gathered = _gather({"h": h, "grads": grads, "new": new_params})
    _check(
        isinstance(multihost_utils.process_allgather(h, tiled=True), hax.NamedArray),
        "process_allgather keeps NamedArray",
    )
    results = {
        "loss": float(loss),
        "new_loss": float(new_loss),
        "h": gathered["h"].array,
        "x_from_local_rows": _gather(x_local_rows).array,
    }
    for k in p_np:
        results[f"grad_{k}"] = gathered["grads"][k].array
        results[f"new_{k}"] = gathered["new"][k].array
    _write(out, "named", results)


# ----------------------------------------------------------------------------- quant


def _quant_data():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((128, 64)).astype(np.float32)
    x = rng.standard_normal((8, 128)).astype(np.float32)
    return w, x


_FORMATS = {
    "nf4": lambda w: ArrayNF4.quantize(w, block_size=32),
    "int8": lambda w: ArrayInt8.quantize(w),
}


def quant(out: pathlib.Path) -> None:
    mesh = _mesh((DEVICES,), ("n",))
    w_np, x_np = _quant_data()
    along_n = NamedSharding(mesh, P(None, "n"))
    along_k = NamedSharding(mesh, P("n", None))
    x = jax.device_put(x_np, NamedSharding(mesh, P()))
    sharded = jutils.shard_map(
        lambda x, q: x @ q, mesh=mesh, in_specs=(P(), P(None, "n")), out_specs=P(None, "n")
    )

    @jax.jit
    def products(x, q):
        """x @ W under jit and under shard_map, each with its gradient in x, in one program."""
        loss = lambda x, q: jnp.sum((x @ q) ** 2)
        loss_sm = lambda x, q: jnp.sum(sharded(x, q) ** 2)
        return {
            "y": x @ q,
            "gx": jax.grad(loss)(x, q),
            "y_sm": sharded(x, q),
            "gx_sm": jax.grad(loss_sm)(x, q),
            "dense": q.materialize(),
        }

    plain = jax.jit(lambda x, q: x @ q)

    def check_on_shards(q, what: str):
        """Under plain jit the kernel runs on each process's shards: nothing is gathered."""
        text = plain.lower(x, q).compile().as_text()
        _check("all-gather" not in text, f"{what}: the compiled x @ W gathers:\n{text[:3000]}")
        return plain(x, q)

    results, stored = {}, {}
    for fmt, quantize in _FORMATS.items():
        # Quantizing a weight that is already global and sharded along N: every block (a
        # run of rows of one column) stays inside one shard, so codes and scales come out
        # sharded like the weight, with no communication.
        q = quantize(jax.device_put(w_np, along_n))
        _check_global(q.qvalue, f"{fmt} codes")
        _check(
            q.qvalue.sharding.is_equivalent_to(along_n, 2)
            and q.scale.sharding.is_equivalent_to(along_n, 2),
            f"{fmt} quantized along N: codes {q.qvalue.sharding}, scales {q.scale.sharding}",
        )
        stored[fmt] = (q.qvalue, q.scale)
        if fmt == "nf4":
            # Sharded along K in shards of 32 rows, NF4 blocks of 32 rows line up with the
            # shards: each process quantizes its own rows, scales sharded like them.
            q_k = quantize(jax.device_put(w_np, along_k))
            _check(
                q_k.scale.sharding.is_equivalent_to(along_k, 2),
                f"{fmt} quantized along K: scales sharded as {q_k.scale.sharding}",
            )
            stored["nf4_k"] = (q_k.qvalue, q_k.scale)
            results["nf4_y_k"] = check_on_shards(q_k, "NF4 split along K")
        y_n = check_on_shards(q, f"{fmt} split along N")
        _check(y_n.sharding.spec == P(None, "n"), f"x @ W sharded as {y_n.sharding.spec}")
        got = products(x, q)
        _check(
            got["y_sm"].sharding.spec == P(None, "n"),
            f"shard_map output sharded as {got['y_sm'].sharding.spec}",
        )
        _check_global(got["y_sm"], "shard_map output")
        results.update({f"{fmt}_{k}": v for k, v in got.items()})
    results.update(
        {
            f"{name}_{part}": v
            for name, (qv, sc) in stored.items()
            for part, v in (("qvalue", qv), ("scale", sc))
        }
    )
    results = _gather(results)
    for a, b in zip(("nf4_qvalue", "nf4_scale"), ("nf4_k_qvalue", "nf4_k_scale")):
        np.testing.assert_array_equal(
            results[a], results[b], err_msg="NF4 quantized along N vs along K"
        )
    np.testing.assert_allclose(results.pop("nf4_y_k"), results["nf4_y"], rtol=1e-5, atol=1e-4)
    for fmt in _FORMATS:
        dense = results.pop(f"{fmt}_dense").astype(np.float64)
        np.testing.assert_allclose(results[f"{fmt}_y"], x_np @ dense, rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(
            results[f"{fmt}_y_sm"], results[f"{fmt}_y"], rtol=1e-5, atol=1e-4
        )
        np.testing.assert_allclose(
            results[f"{fmt}_gx"], 2 * (x_np @ dense) @ dense.T, rtol=1e-4, atol=1e-2
        )
        np.testing.assert_allclose(
            results[f"{fmt}_gx_sm"], results[f"{fmt}_gx"], rtol=1e-5, atol=1e-3
        )
    _write(out, "quant", results)


# ----------------------------------------------------------------------------- tree / utils


@jtree.dataclass
class State:
    pos: jax.Array
    vel: jax.Array
    label: str = jtree.field(static=True, default="particles")


def tree(out: pathlib.Path) -> None:
    mesh = _mesh((DEVICES,), ("x",))
    rows = NamedSharding(mesh, P("x"))
    rng = np.random.default_rng(2)
    pos_np, vel_np = rng.standard_normal((2, 8, 3)).astype(np.float32)
    state = State(jax.device_put(pos_np, rows), jax.device_put(vel_np, rows))
    _check_global(state.pos, "state.pos")

    @jax.jit
    def step(s: State) -> State:
        return State(s.pos + 0.1 * s.vel, s.vel * 0.9, s.label)

    moved = step(state)
    _check(
        moved.label == "particles" and moved.pos.sharding.spec == P("x"),
        f"step result: {moved.label}, {moved.pos.sharding.spec}",
    )
    # The typed jit wrapper with explicit shardings: in by rows, out replicated.
    typed = jutils.jit(
        lambda s: State(s.pos * 2, s.vel, s.label),
        in_shardings=(rows,),
        out_shardings=NamedSharding(mesh, P()),
    )
    doubled = typed(moved)
    _check(doubled.pos.is_fully_replicated, "out_shardings=P() should replicate the result")
    # A replicated global array is readable on every process without a gather.
    np.testing.assert_allclose(np.asarray(doubled.pos), 2 * (pos_np + 0.1 * vel_np), rtol=1e-6)
    stacked = jtree.tree_stack(state, moved)
    concat = jtree.tree_concat(state, moved)
    _check(stacked.pos.shape == (2, 8, 3) and concat.pos.shape == (16, 3), "stack/concat shapes")
    _check(stacked.label == concat.label == "particles", "static fields survive stack/concat")

    # shard_map over the dataclass: every shard centres its rows on the global mean.
    def centre(s: State) -> State:
        total = jax.lax.psum(jnp.sum(s.pos, axis=0), "x")
        return State(s.pos - total / 8, s.vel, s.label)

    centred = jax.jit(jutils.shard_map(centre, mesh=mesh, in_specs=P("x"), out_specs=P("x")))(state)
    _check(centred.pos.sharding.spec == P("x"), "shard_map keeps the row sharding")
    got = _gather(
        {
            "moved": moved,
            "doubled": doubled,
            "stacked": stacked,
            "concat": concat,
            "centred": centred,
        }
    )
    np.testing.assert_allclose(got["moved"].pos, pos_np + 0.1 * vel_np, rtol=1e-6)
    np.testing.assert_allclose(got["doubled"].pos, 2 * (pos_np + 0.1 * vel_np), rtol=1e-6)
    np.testing.assert_array_equal(got["stacked"].pos[0], pos_np)
    np.testing.assert_array_equal(got["concat"].vel[:8], vel_np)
    np.testing.assert_allclose(got["centred"].pos, pos_np - pos_np.mean(0), rtol=1e-5, atol=1e-6)
    _write(
        out,
        "tree",
        {
            "moved_pos": got["moved"].pos,
            "moved_vel": got["moved"].vel,
            "doubled_pos": got["doubled"].pos,
            "stacked_pos": got["stacked"].pos,
            "stacked_vel": got["stacked"].vel,
            "concat_pos": got["concat"].pos,
            "centred_pos": got["centred"].pos,
        },
    )


# ----------------------------------------------------------------------------- checkpoint


def _checkpoint_tree(mesh, *, abstract: bool):
    """The sharded pytree the checkpoint tests save: plain, named and quantized leaves."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    q = ArrayInt8.quantize(jnp.asarray(rng.standard_normal((32, 8)).astype(np.float32)))
    full = {
        "w": w,
        "named": hax.NamedArray(
            np.arange(32, dtype=np.int32).reshape(8, 4), (Batch, hax.Axis("embed", 4))
        ),
        "q": jax.tree.map(np.asarray, q),
        "step": np.asarray(7, np.int32),
    }
    specs = {"w": P("x", None), "named": P("x"), "q": P(None, "x"), "step": P()}

    def place(spec, sub):
        sharding = NamedSharding(mesh, spec)
        if abstract:
            return jax.tree.map(
                lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding), sub
            )
        return jax.tree.map(
            lambda a: jax.make_array_from_callback(a.shape, sharding, lambda i: a[i]), sub
        )

    return full, {k: place(specs[k], full[k]) for k in full}


def save(out: pathlib.Path) -> None:
    import orbax.checkpoint as ocp

    mesh = _mesh((DEVICES,), ("x",))
    _, tree_ = _checkpoint_tree(mesh, abstract=False)
    _check_global(tree_["w"], "saved w")
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(out / "checkpoint", tree_)
    print(f"saved from {jax.process_count()} process(es)")


def restore(out: pathlib.Path) -> None:
    import orbax.checkpoint as ocp

    mesh = _mesh((DEVICES,), ("x",))
    full, target = _checkpoint_tree(mesh, abstract=True)
    with ocp.StandardCheckpointer() as checkpointer:
        restored = checkpointer.restore(out / "checkpoint", target)
    _check(
        isinstance(restored["named"], hax.NamedArray) and isinstance(restored["q"], ArrayInt8),
        f"restored types: {type(restored['named'])}, {type(restored['q'])}",
    )
    for got, want, spec in zip(
        jax.tree.leaves(restored), jax.tree.leaves(full), jax.tree.leaves(target)
    ):
        _check(
            got.sharding == spec.sharding, f"restored sharding {got.sharding} != {spec.sharding}"
        )
        _check_shards(got, np.asarray(want), "restored leaf")
    _check_global(restored["w"], "restored w")
    gathered = _gather(restored)
    _write(
        out,
        "restore",
        {
            "w": gathered["w"],
            "named": gathered["named"].array,
            "qvalue": gathered["q"].qvalue,
            "scale": gathered["q"].scale,
            "step": gathered["step"],
        },
    )


# ----------------------------------------------------------------------------- failure


def crash(out: pathlib.Path, how: str) -> None:
    """The last process fails after a first collective; the others block in a second one."""
    mesh = _mesh((DEVICES,), ("x",))
    ones = jax.make_array_from_process_local_data(
        NamedSharding(mesh, P("x")), np.ones(jax.local_device_count(), np.float32)
    )
    total = jax.jit(jnp.sum)
    _check(float(total(ones)) == DEVICES, "first collective")
    (out / f"pid_{jax.process_index()}").write_text(str(os.getpid()))
    if jax.process_index() == 0:
        # A grandchild, to check that the launcher stops whole process groups.
        child = subprocess.Popen(["sleep", "300"])
        (out / "grandchild_pid").write_text(str(child.pid))
    print("first collective done", flush=True)
    if jax.process_index() == jax.process_count() - 1:
        # Fail once the others have recorded their pids (the test checks none is left).
        expected = [out / f"pid_{i}" for i in range(jax.process_count())] + [out / "grandchild_pid"]
        deadline = time.monotonic() + 30
        while not all(p.exists() for p in expected) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        if how == "raise":
            raise RuntimeError(f"deliberate failure in process {jax.process_index()}")
        os.kill(os.getpid(), signal.SIGKILL)
    # Never completes: the failed process does not take part.
    print(float(total(ones * 2)))


def main(argv: list[str]) -> None:
    area, out = argv[0], pathlib.Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    programs = {"named": named, "quant": quant, "tree": tree, "save": save, "restore": restore}
    if area == "crash":
        crash(out, argv[2])
    elif area in programs:
        programs[area](out)
    else:
        raise SystemExit(f"unknown area {area!r}; expected one of {sorted(programs)} or crash")


if __name__ == "__main__":
    main(sys.argv[1:])

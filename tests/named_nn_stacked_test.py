"""``hax.nn.Stacked`` / ``hax.nn.BlockSeq`` against plain ``jax.numpy`` loops over the layers,
with every gradient-checkpoint policy, and their error paths."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcore.named as hax
import jaxcore.tree as jtree

Layers, E, B = hax.make_axes(layers=4, embed=6, batch=3)
Hidden = E.alias("hidden")
KEYS = jax.random.split(jax.random.key(0), Layers.size)


def _close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


@jtree.dataclass
class Block:
    """``x + relu(x @ w + b) * scale``: a named weight, a plain per-layer array, a static."""

    lin: hax.nn.Linear
    scale: jax.Array
    shift: float = jtree.field(static=True, default=0.0)

    @staticmethod
    def init(embed, scale, *, key, shift=0.0):
        lin = hax.nn.Linear.init(embed, embed.alias("hidden"), key=key)
        return Block(lin, jnp.asarray(scale), shift)

    def __call__(self, x, *, key=None):
        h = hax.nn.relu(self.lin(x)).rename({"hidden": E.name})
        out = x + h * self.scale + self.shift
        if key is not None:
            out = out + 0.01 * hax.random.normal(key, out.axes)
        return out

    def with_output(self, x):
        y = self(x)
        return y, y.sum(E.name)


@jtree.dataclass
class PairBlock(Block):
    """A block for ``scan``: takes an extra per-layer argument, returns (carry, output)."""

    @staticmethod
    def init(embed, scale, *, key, shift=0.0):
        b = Block.init(embed, scale, key=key, shift=shift)
        return PairBlock(b.lin, b.scale, b.shift)

    def __call__(self, x, bonus, *, key):
        y = Block.__call__(self, x, key=key) + bonus
        return y, y


def _stack(cls=hax.nn.Stacked, **kw):
    scales = jnp.linspace(0.5, 1.0, Layers.size)
    return cls.init(Layers, Block, **kw)(E, scales, key=KEYS, shift=0.25)


def _ref_fold(m, x):
    """The same stack with plain jnp: weights indexed per layer in a Python loop."""
    w = m.stacked.lin.weight.rearrange((Layers, E, Hidden)).array
    b = m.stacked.lin.bias.array
    s = m.stacked.scale
    h = x.rearrange((B, E)).array
    outs = []
    for i in range(Layers.size):
        h = h + jax.nn.relu(h @ w[i] + b[i]) * s[i] + 0.25
        outs.append(h.sum(-1))
    return h, jnp.stack(outs)


def _x(seed=1):
    return hax.random.normal(jax.random.key(seed), (B, E))


def test_init_stacks_every_parameter_along_the_layer_axis():
    m = _stack()
    assert m.Block == Layers
    assert m.stacked.lin.weight.axes == (Layers, Hidden, E)
    assert m.stacked.lin.bias.axes == (Layers, Hidden)
    assert m.stacked.scale.shape == (Layers.size,)
    assert m.stacked.shift == 0.25  # static values are shared
    assert m.gradient_checkpointing == hax.ScanCheckpointPolicy.from_bool_or_str(False)
    # each layer is the layer its own key builds
    one = Block.init(E, 0.5, key=KEYS[2], shift=0.25)
    _close(m.stacked.lin.weight.array[2], one.lin.weight.array, 0)
    # Block is a pytree: jit and grad see its arrays
    leaves = jax.tree.leaves(m)
    assert len(leaves) == 3


def test_fold_and_scan_match_a_plain_jnp_loop_and_blockseq():
    m, seq = _stack(), _stack(hax.nn.BlockSeq)
    x = _x()
    ref, ref_outs = _ref_fold(m, x)
    y = m.fold(x)
    assert y.axes == (B, E)
    _close(y.array, ref)
    _close(seq.fold(x).array, ref)
    carry, outs = m.scan_via(Block.with_output)(x)
    assert outs.axes == (Layers, B)
    _close(carry.array, ref)
    _close(outs.array, ref_outs)
    carry2, outs2 = seq.scan_via(Block.with_output)(x)
    assert outs2.axes == (Layers, B)
    _close(outs2.array, ref_outs)
    _close(m.fold_via(Block.__call__)(x).array, ref)
    _close(seq.fold_via(Block.__call__)(x).array, ref)
    # the same under jit, with the module as an argument
    _close(jax.jit(lambda m, x: m.fold(x))(m, x).array, ref)


def test_scan_stacks_outputs_and_both_forms_split_extra_arguments_per_layer():
    scales = jnp.linspace(0.5, 1.0, Layers.size)
    m = hax.nn.Stacked.init(Layers, PairBlock)(E, scales, key=KEYS)
    seq = hax.nn.BlockSeq.init(Layers, PairBlock)(E, scales, key=KEYS)
    bonus = hax.named(jnp.arange(4.0), Layers)  # named with Layers: one value per layer
    keys = jax.random.split(jax.random.key(5), Layers.size)  # plain, leading dim: per layer
    x = _x()
    c1, o1 = m.scan(x, bonus, key=keys)
    c2, o2 = seq.scan(x, bonus, key=keys)
    assert o1.axes == o2.axes == (Layers, B, E)
    _close(c1.array, c2.array)
    _close(o1.array, o2.array)
    _close(o1.array[-1], c1.array)
    # the loop written out with the unstacked layers
    h = x
    for i, layer in enumerate(m.unstacked()):
        h, _ = layer(h, bonus[Layers.name, i], key=keys[i])
    _close(h.array, c1.array)


def test_unstacked_gives_the_layers_and_round_trips_through_blockseq():
    m = _stack()
    layers = m.unstacked()
    assert len(layers) == Layers.size
    for i, layer in enumerate(layers):
        assert layer.lin.weight.axes == (Hidden, E)
        _close(layer.lin.weight.array, m.stacked.lin.weight.array[i], 0)
        assert layer.scale.shape == ()
        assert layer.shift == 0.25
    seq = hax.nn.BlockSeq(layers, Layers)
    assert seq.unstacked() == seq.blocks
    _close(seq.fold(_x()).array, m.fold(_x()).array)


def test_vmap_applies_every_layer_to_the_same_input():
    m, seq = _stack(), _stack(hax.nn.BlockSeq)
    x = _x()
    y = m.vmap(x)
    assert y.axes == (Layers, B, E)
    for i, layer in enumerate(m.unstacked()):
        _close(y.array[i], layer(x).array)
    _close(seq.vmap(x).array, y.array)
    s = m.vmap_via(lambda block, x: block(x).sum(E.name))(x)
    assert s.axes == (Layers, B)
    _close(s.array, y.array.sum(-1))


@pytest.mark.parametrize(
    "policy",
    [
        False,
        True,
        "recompute",
        "save_all",
        "nested",
        hax.ScanCheckpointPolicy(save_carries=True, save_inputs=True),
        hax.ScanCheckpointPolicy(save_carries=False, save_block_internals=True),
        hax.ScanCheckpointPolicy(simple=True, nested=2),
    ],
    ids=str,
)
def test_every_checkpoint_policy_gives_the_reference_gradients(policy):
    m = _stack(gradient_checkpointing=policy)
    x = _x()

    def loss(m, x):
        return (m.fold(x).array ** 2).mean()

    def ref_loss(m, x):
        return (_ref_fold(m, x)[0] ** 2).mean()

    g = jax.jit(jax.grad(loss, argnums=(0, 1)))(m, x)
    r = jax.grad(ref_loss, argnums=(0, 1))(m, x)
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(r)):
        _close(a, b, 1e-4)
    g_seq = jax.grad(loss, argnums=(0, 1))(
        _stack(hax.nn.BlockSeq, gradient_checkpointing=policy), x
    )
    _close(g_seq[1].array, r[1].array, 1e-4)


def _grad_jaxpr(policy):
    m = _stack(gradient_checkpointing=policy)
    return str(jax.make_jaxpr(jax.grad(lambda m, x: m.fold(x).array.sum()))(m, _x()))


def test_the_policy_decides_what_the_backward_pass_recomputes():
    assert "remat" not in _grad_jaxpr(False) and "checkpoint" not in _grad_jaxpr(False)
    recomputed = _grad_jaxpr(True)
    assert "remat" in recomputed or "checkpoint" in recomputed
    # names the scan tags the carry with reach JAX's name-based policies
    named = _grad_jaxpr(hax.ScanCheckpointPolicy(save_carries=True, save_block_internals=False))
    assert "scan(layers)__carry" in named


def test_unroll_gives_the_same_result():
    m = _stack()
    x = _x()
    ref = m.fold(x).array
    for unroll in (True, 2, False, None):
        _close(m.fold(x, unroll=unroll).array, ref)
        _close(m.scan_via(Block.with_output, unroll=unroll)(x)[0].array, ref)
    with pytest.raises(ValueError, match="unroll must be >= 1"):
        m.fold(x, unroll=0)


def test_stack_of_builtin_layers_from_the_haliax_docstring():
    Hid = hax.Axis("hidden", 10)
    layers = hax.nn.Stacked.init(Layers, hax.nn.Linear)(
        In=Hid, Out=Hid.alias("out"), key=KEYS, use_bias=False
    )
    x = hax.ones(Hid)
    # Linear maps hidden -> out; rename back so the carry keeps its type
    y = layers.fold_via(lambda lin, c: lin(c).rename({"out": "hidden"}))(x)
    h = jnp.ones(10)
    for i in range(Layers.size):
        h = layers.stacked.weight.array[i] @ h
    _close(y.array, h)


def test_errors_name_the_axis_or_the_problem():
    m, seq = _stack(), _stack(hax.nn.BlockSeq)
    x = _x()
    with pytest.raises(TypeError, match="Block must be an Axis"):
        hax.nn.Stacked.init("layers", Block)
    with pytest.raises(TypeError, match="Block must be an Axis"):
        hax.nn.BlockSeq.init(4, Block)
    with pytest.raises(TypeError, match="has no init method"):
        hax.nn.Stacked.init(Layers, 3)
    with pytest.raises(ValueError, match="Invalid checkpoint policy 'sometimes'"):
        hax.nn.Stacked.init(Layers, Block, gradient_checkpointing="sometimes")
    # a block that returns only the carry cannot be scanned
    with pytest.raises(ValueError, match=r"Stacked\.scan: each block must return a pair"):
        m.scan(x)
    with pytest.raises(ValueError, match=r"BlockSeq\.scan: each block must return a pair"):
        seq.scan(x)
    # an extra argument whose layer axis has the wrong size
    wrong = hax.zeros((Layers.resize(3), E))
    with pytest.raises(ValueError, match="'layers' of size 3"):
        m.fold(x, wrong)
    with pytest.raises(ValueError, match="layer axis 'layers' with size 3"):
        seq.fold(x, wrong)
    with pytest.raises(ValueError, match="leading dimension 2"):
        hax.nn.BlockSeq.init(Layers, Block)(E, jnp.ones(2), key=KEYS)
    with pytest.raises(ValueError, match="3 blocks for the layer axis"):
        hax.nn.BlockSeq(m.unstacked()[:3], Layers)
    with pytest.raises(ValueError, match="without the layer axis 'layers'"):
        hax.nn.Stacked(hax.zeros(E), Layers).unstacked()
    with pytest.warns(DeprecationWarning, match="prevent_cse is deprecated"):
        s = hax.nn.Stacked.init(Layers, Block, prevent_cse=True)
    assert s.__name__ == "Block"


def test_scan_module_is_haliax_nn_scan():
    assert hax.nn.scan.Stacked is hax.nn.Stacked
    assert hax.nn.scan.BlockSeq is hax.nn.BlockSeq
    assert hax.nn.ScanCheckpointPolicy is hax.ScanCheckpointPolicy
    m = hax.nn.Stacked(_stack().stacked, Layers, True)  # shorthands become policies
    assert m.gradient_checkpointing == hax.ScanCheckpointPolicy(simple=True)
    # built directly or by init, the default is the same (so their pytree structures agree)
    plain = hax.nn.Stacked(_stack().stacked, Layers)
    assert jax.tree.structure(plain) == jax.tree.structure(_stack())


def test_state_dict_has_one_entry_per_layer_for_stacked_and_blockseq_alike():
    m = _stack()
    seq = hax.nn.BlockSeq(m.unstacked(), Layers)
    d = hax.state_dict.to_state_dict({"h": m})
    assert sorted(d) == sorted(hax.state_dict.to_state_dict({"h": seq}))
    assert {"h.0.lin.weight", "h.3.lin.bias", "h.2.scale"} <= set(d)
    _close(d["h.2.lin.weight"], m.stacked.lin.weight.array[2], 0)
    # a Stacked restores from the per-layer keys a BlockSeq wrote, and the other way round
    back = hax.state_dict.from_state_dict({"h": m}, hax.state_dict.to_state_dict({"h": seq}))
    _close(back["h"].stacked.lin.weight.array, m.stacked.lin.weight.array, 0)
    again = hax.state_dict.from_state_dict({"h": seq}, d)
    _close(again["h"].blocks[3].lin.bias.array, m.stacked.lin.bias.array[3], 0)


def test_get_layer_slices_one_layer():
    m, seq = _stack(), _stack(hax.nn.BlockSeq)
    for i in (0, 2, -1):
        layer = m.get_layer(i)
        assert isinstance(layer, Block) and layer.shift == 0.25
        assert layer.lin.weight.axes == (Hidden, E)
        _close(layer.lin.weight.array, m.stacked.lin.weight.array[i], 0)
        _close(layer.scale, m.stacked.scale[i], 0)
        assert seq.get_layer(i) is seq.blocks[i]
    with pytest.raises(IndexError, match="layer 4 of 4"):
        m.get_layer(4)
    with pytest.raises(IndexError, match="block -5 of 4"):
        seq.get_layer(-5)

"""A small named transformer (``Embedding``, attention, ``MLP``, ``LayerNorm``, a ``Stacked``
of 4 blocks under a gradient-checkpoint policy): its jitted loss and gradients equal those of
the same model written with plain ``jax.numpy`` on the same parameters."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcore.named as hax
import jaxcore.tree as jtree

Batch, Pos, KPos, Embed, Heads, HeadSize, Mlp, Vocab, Layers = hax.make_axes(
    batch=2, position=8, key_position=8, embed=16, heads=2, head_size=8, mlp=32, vocab=11, layers=4
)


@jtree.dataclass
class Attention:
    q: hax.nn.Linear
    k: hax.nn.Linear
    v: hax.nn.Linear
    o: hax.nn.Linear

    @staticmethod
    def init(*, key):
        kq, kk, kv, ko = jax.random.split(key, 4)
        qkv = (Heads, HeadSize)
        return Attention(
            hax.nn.Linear.init(Embed, qkv, key=kq),
            hax.nn.Linear.init(Embed, qkv, key=kk),
            hax.nn.Linear.init(Embed, qkv, key=kv),
            hax.nn.Linear.init(qkv, Embed, key=ko),
        )

    def __call__(self, x, mask):
        q = self.q(x)
        k = self.k(x).rename({Pos.name: KPos.name})
        v = self.v(x).rename({Pos.name: KPos.name})
        a = hax.nn.attention.dot_product_attention(KPos, HeadSize, q, k, v, mask=mask)
        return self.o(a)


@jtree.dataclass
class Block:
    ln1: hax.nn.LayerNorm
    attn: Attention
    ln2: hax.nn.LayerNorm
    mlp: hax.nn.MLP

    @staticmethod
    def init(*, key):
        ka, km = jax.random.split(key)
        return Block(
            hax.nn.LayerNorm.init(Embed),
            Attention.init(key=ka),
            hax.nn.LayerNorm.init(Embed),
            hax.nn.MLP.init(Embed, Embed, Mlp, 1, activation=hax.nn.gelu, key=km),
        )

    def __call__(self, x, mask):
        x = x + self.attn(self.ln1(x), mask)
        return x + self.mlp(self.ln2(x))


@jtree.dataclass
class Transformer:
    embed: hax.nn.Embedding
    blocks: hax.nn.Stacked
    ln_f: hax.nn.LayerNorm

    @staticmethod
    def init(policy, *, key):
        ke, kb = jax.random.split(key)
        blocks = hax.nn.Stacked.init(Layers, Block, gradient_checkpointing=policy)(
            key=jax.random.split(kb, Layers.size)
        )
        return Transformer(
            hax.nn.Embedding.init(Vocab, Embed, key=ke), blocks, hax.nn.LayerNorm.init(Embed)
        )

    def loss(self, ids, targets):
        x = self.embed(ids)
        x = self.blocks.fold(x, hax.nn.causal_mask(Pos, KPos))
        logits = self.embed.unembed(self.ln_f(x))
        return hax.nn.cross_entropy_loss(logits, Vocab, targets).scalar()


# ------------------------------------------------------------------- the plain-jnp twin


def to_plain(model):
    """The named parameters as raw arrays in fixed layouts (layer axis first)."""
    s = model.blocks.stacked

    def lin(layer, out_axes, in_axes):
        return layer.weight.rearrange((Layers, *out_axes, *in_axes)).array, layer.bias.array

    p = {
        "emb": model.embed.weight.rearrange((Vocab, Embed)).array,
        "ln_f": (model.ln_f.weight.array, model.ln_f.bias.array),
        "ln1": (s.ln1.weight.array, s.ln1.bias.array),
        "ln2": (s.ln2.weight.array, s.ln2.bias.array),
        "mlp1": lin(s.mlp.layers[0], (Mlp,), (Embed,)),
        "mlp2": lin(s.mlp.layers[1], (Embed,), (Mlp,)),
    }
    for name in "qkv":
        w, b = lin(getattr(s.attn, name), (Heads, HeadSize), (Embed,))
        p[name] = (w, b.reshape(Layers.size, Heads.size, HeadSize.size))
    p["o"] = lin(s.attn.o, (Embed,), (Heads, HeadSize))
    return p


def _ln(x, w, b):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + 1e-5) * w + b


def plain_loss(p, ids, targets):
    x = p["emb"][ids]
    n = ids.shape[1]
    causal = jnp.tril(jnp.ones((n, n), bool))
    for i in range(Layers.size):
        h = _ln(x, p["ln1"][0][i], p["ln1"][1][i])
        q, k, v = (jnp.einsum("bpe,hde->bphd", h, p[n_][0][i]) + p[n_][1][i] for n_ in "qkv")
        scores = jnp.einsum("bphd,bkhd->bhpk", q / np.sqrt(HeadSize.size), k)
        weights = jax.nn.softmax(jnp.where(causal, scores, -1e9), axis=-1)
        attn = jnp.einsum("bhpk,bkhd->bphd", weights, v)
        x = x + jnp.einsum("bphd,ehd->bpe", attn, p["o"][0][i]) + p["o"][1][i]
        h = _ln(x, p["ln2"][0][i], p["ln2"][1][i])
        h = jax.nn.gelu(h @ p["mlp1"][0][i].T + p["mlp1"][1][i])
        x = x + h @ p["mlp2"][0][i].T + p["mlp2"][1][i]
    logits = _ln(x, *p["ln_f"]) @ p["emb"].T
    logz = jax.nn.logsumexp(logits, -1)
    picked = jnp.take_along_axis(logits, targets[..., None], -1)[..., 0]
    return (logz - picked).mean()


def _data():
    ids = hax.random.randint(jax.random.key(1), (Batch, Pos), 0, Vocab.size)
    targets = hax.random.randint(jax.random.key(2), (Batch, Pos), 0, Vocab.size)
    return ids, targets


def _close(a, b, tol):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


@pytest.mark.parametrize(
    "policy",
    [
        True,
        hax.ScanCheckpointPolicy(save_carries=True, save_inputs=True),
        hax.ScanCheckpointPolicy(simple=True, nested=2),
    ],
    ids=["recompute_blocks", "save_carries_and_inputs", "nested"],
)
def test_named_transformer_loss_and_grads_equal_the_plain_jnp_model(policy):
    model = Transformer.init(policy, key=jax.random.key(0))
    assert model.blocks.stacked.attn.q.weight.axes == (Layers, Heads, HeadSize, Embed)
    ids, targets = _data()
    loss, grads = jax.jit(jax.value_and_grad(Transformer.loss))(model, ids, targets)
    ref_loss, ref_grads = jax.jit(jax.value_and_grad(plain_loss))(
        to_plain(model), ids.array, targets.array
    )
    _close(loss, ref_loss, 1e-5)
    assert 1.0 < float(loss) < 5.0  # a real cross entropy over 11 classes, not a degenerate 0
    named = to_plain(grads)
    assert jax.tree.structure(named) == jax.tree.structure(ref_grads)
    for path, g in jax.tree_util.tree_leaves_with_path(named):
        r = ref_grads
        for key in path:
            r = r[key.key if hasattr(key, "key") else key.idx]
        assert np.abs(np.asarray(r)).max() > 0, path
        _close(g, r, 1e-4)


def test_the_checkpoint_policy_is_applied_inside_the_layer_scan():
    ids, targets = _data()
    for policy, remat in ((True, True), (False, False)):
        model = Transformer.init(policy, key=jax.random.key(0))
        jaxpr = str(jax.make_jaxpr(jax.grad(Transformer.loss))(model, ids, targets))
        assert ("remat" in jaxpr or "checkpoint" in jaxpr) == remat
        assert "scan" in jaxpr


def test_unrolled_blockseq_twin_gives_the_same_loss():
    model = Transformer.init(True, key=jax.random.key(0))
    seq = hax.nn.BlockSeq(model.blocks.unstacked(), Layers, True)
    unrolled = Transformer(model.embed, seq, model.ln_f)
    ids, targets = _data()
    _close(
        jax.jit(Transformer.loss)(unrolled, ids, targets),
        jax.jit(Transformer.loss)(model, ids, targets),
        1e-5,
    )

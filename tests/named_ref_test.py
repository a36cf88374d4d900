"""``NamedRef`` / ``new_ref`` / ``freeze`` / ``swap`` over ``jax.Ref``, checked against NumPy."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcore.named as hax

Layer, Head = hax.Axis("layers", 6), hax.Axis("head", 4)


def _cache():
    raw = np.arange(24, dtype=np.float32).reshape(6, 4)
    return raw, hax.NamedArray(jnp.asarray(raw), (Layer, Head))


def test_read_write_and_metadata():
    raw, cache = _cache()
    ref = hax.new_ref(cache)
    assert ref.axes == (Layer, Head) and ref.shape == {"layers": 6, "head": 4} and ref.ndim == 2
    assert ref.dtype == jnp.float32 and ref.named_shape == ref.shape
    assert ref.resolve_axis("head") == Head and ref.resolve_axis(Head) == Head
    row = ref[{"layers": 2}]
    assert row.axes == (Head,)
    np.testing.assert_array_equal(np.asarray(row.array), raw[2])
    ref[{"layers": 1, "head": slice(1, 3)}] = 100.0
    ref[{Head: 0}] = hax.NamedArray(jnp.arange(6.0), (Layer,))
    want = raw.copy()
    want[1, 1:3] = 100.0
    want[:, 0] = np.arange(6.0)
    np.testing.assert_array_equal(np.asarray(ref.value().array), want)
    assert isinstance(ref.unsafe_buffer_pointer(), int)
    # the original array is untouched
    np.testing.assert_array_equal(np.asarray(cache.array), raw)


def test_values_are_aligned_by_name_and_broadcast():
    raw, cache = _cache()
    ref = hax.new_ref(cache)
    update = hax.NamedArray(jnp.arange(8.0).reshape(4, 2), (Head, hax.Axis("layers", 2)))
    ref[{"layers": slice(0, 2)}] = update  # transposed to (layers, head)
    row = hax.NamedArray(jnp.full((4,), -1.0), (Head,))
    ref[{"layers": slice(4, 6)}] = row  # broadcast over layers
    want = raw.copy()
    want[0:2] = np.arange(8.0).reshape(4, 2).T
    want[4:6] = -1.0
    np.testing.assert_array_equal(np.asarray(hax.freeze(ref).array), want)


def test_slice_views_compose():
    raw, cache = _cache()
    ref = hax.new_ref(cache)
    layer_ref = ref.slice({"layers": slice(2, 6)})
    assert layer_ref.axes == (hax.Axis("layers", 4), Head)
    layer_ref[{"layers": 0, "head": 3}] = 1000.0  # layer 2 of the buffer
    inner = layer_ref.slice({"layers": slice(1, None, 2)})  # buffer layers 3 and 5
    assert inner.axes == (hax.Axis("layers", 2), Head)
    inner[{"layers": -1}] = 7.0
    np.testing.assert_array_equal(
        np.asarray(inner.value().array), np.stack([raw[3], np.full(4, 7.0)])
    )
    head_view = ref.slice({"head": 1})
    assert head_view.axes == (Layer,)
    np.testing.assert_array_equal(np.asarray(head_view[{"layers": slice(0, 2)}].array), raw[0:2, 1])
    want = raw.copy()
    want[2, 3] = 1000.0
    want[5] = 7.0
    np.testing.assert_array_equal(np.asarray(layer_ref.unsliced().value().array), want)
    # freezing a view returns that view of the final buffer
    np.testing.assert_array_equal(np.asarray(hax.freeze(inner).array), want[[3, 5]])


def test_swap_returns_previous_contents():
    raw, cache = _cache()
    ref = hax.new_ref(cache)
    old = hax.swap(ref, {"layers": 0}, hax.NamedArray(jnp.zeros(4), (Head,)))
    assert old.axes == (Head,)
    np.testing.assert_array_equal(np.asarray(old.array), raw[0])
    everything = hax.swap(ref, ..., 3.0)
    want = raw.copy()
    want[0] = 0
    np.testing.assert_array_equal(np.asarray(everything.array), want)
    np.testing.assert_array_equal(np.asarray(ref[...].array), np.full((6, 4), 3.0))


def test_jit_with_traced_index_grad_and_vmap():
    raw, cache = _cache()

    @jax.jit
    def bump_argmax(x):
        ref = hax.new_ref(x)
        i = jnp.argmax(x.array[:, 0])
        view = ref.slice({"layers": i})
        view[{"head": slice(0, 2)}] = -1.0
        inner = ref.slice({"layers": slice(1, 6)})
        inner[{"layers": i - 2, "head": 3}] = 42.0  # traced index relative to the view
        return hax.freeze(ref)

    out = bump_argmax(cache)
    want = raw.copy()
    want[5, 0:2] = -1.0
    want[4, 3] = 42.0
    assert out.axes == (Layer, Head)
    np.testing.assert_array_equal(np.asarray(out.array), want)

    def loss(x):
        ref = hax.new_ref(hax.zeros_like(x))
        ref[...] = x * 2.0
        ref[{"layers": 0}] = ref[{"layers": 0}] * 3.0
        return jnp.sum(hax.freeze(ref).array)

    g = jax.grad(loss)(cache)
    want_g = np.full((6, 4), 2.0, np.float32)
    want_g[0] = 6.0
    np.testing.assert_array_equal(np.asarray(g.array), want_g)

    batched = jax.vmap(lambda r: loss(hax.NamedArray(r, (Layer, Head))))(
        jnp.stack([cache.array, cache.array + 1])
    )
    np.testing.assert_allclose(
        np.asarray(batched),
        [2 * raw.sum() + 4 * raw[0].sum(), 2 * (raw + 1).sum() + 4 * (raw[0] + 1).sum()],
    )


def test_refs_pass_through_jit_as_pytrees():
    raw, cache = _cache()
    ref = hax.new_ref(cache)

    @jax.jit
    def write(r):
        r[{"head": 0}] = 5.0

    write(ref.slice({"layers": slice(0, 3)}))
    want = raw.copy()
    want[0:3, 0] = 5.0
    np.testing.assert_array_equal(np.asarray(ref.value().array), want)
    leaves, treedef = jax.tree.flatten(ref.slice({"layers": jnp.int32(2)}))
    rebuilt = jax.tree.unflatten(treedef, leaves)
    assert rebuilt.axes == (Head,)
    np.testing.assert_array_equal(np.asarray(rebuilt.value().array), want[2])


@pytest.mark.parametrize(
    "call, exc, message",
    [
        (lambda r: r[{"nope": 0}], ValueError, "Axis 'nope' is not in this NamedRef view"),
        (
            lambda r: r.slice({"layers": 0})[{"layers": 1}],
            ValueError,
            "Axis 'layers' is not in this NamedRef view",
        ),
        (
            lambda r: r[{"layers": 6}],
            IndexError,
            "Index 6 is out of bounds for axis 'layers' of size 6",
        ),
        (
            lambda r: r[{"layers": jnp.arange(2)}],
            TypeError,
            "selectors must be ints, slices or dslices",
        ),
        (
            lambda r: r[{"layers": slice(0, jnp.int32(2))}],
            TypeError,
            "slice bounds must be static ints",
        ),
        (lambda r: r[0], TypeError, "NamedRef indices are mappings"),
        (lambda r: r[{3: 0}], TypeError, "keys must be axes or names"),
        (lambda r: r.resolve_axis("zzz"), ValueError, "Axis 'zzz' is not in this NamedRef"),
        (
            lambda r: r.resolve_axis(hax.Axis("head", 9)),
            ValueError,
            "has size 4 in this NamedRef, not 9",
        ),
        (
            lambda r: r.__setitem__(..., np.ones((6, 4))),
            TypeError,
            "must be NamedArrays or scalars",
        ),
        (
            lambda r: r.__setitem__(..., hax.NamedArray(jnp.ones(3), (hax.Axis("other", 3),))),
            ValueError,
            "Value axis 'other' is not in the target axes",
        ),
        (
            lambda r: r.__setitem__(..., hax.NamedArray(jnp.ones(3), (hax.Axis("head", 3),))),
            ValueError,
            "Axis 'head' has size 3 in the value but 4 in the target",
        ),
        (lambda r: hax.new_ref(np.ones(3)), TypeError, "new_ref expects a NamedArray"),
        (lambda r: hax.freeze(np.ones(3)), TypeError, "freeze expects a NamedRef"),
        (lambda r: hax.swap(np.ones(3), ..., 1.0), TypeError, "swap expects a NamedRef"),
        (
            lambda r: hax.NamedRef(jax.new_ref(jnp.ones(3)), (Head,)),
            ValueError,
            "do not match the buffer shape",
        ),
    ],
)
def test_errors(call, exc, message):
    _, cache = _cache()
    with pytest.raises(exc, match=re.escape(message)):
        call(hax.new_ref(cache))

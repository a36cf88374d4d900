"""hax.haxtyping annotations checked at run time, and hax.field / hax.util.is_named_array."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcore.named as hax
import jaxcore.tree as jtree
from jaxcore.named import haxtyping as ht

B, E, H = hax.make_axes(batch=2, embed=3, heads=4)
X = hax.zeros((B, E))

# Annotations bound to names: pyflakes (ruff F722) reads a string inside an annotation as
# a forward reference, so jaxtyping-style strings go through aliases here.
BatchEmbed = ht.Float[hax.NamedArray, "batch embed"]
EmbedHeads = ht.Float[hax.NamedArray, "embed heads"]
BatchHeads = ht.Float[hax.NamedArray, "batch heads"]
BatchOnly = ht.Float[hax.NamedArray, "batch"]


def test_isinstance_checks_dtype_and_axes():
    assert isinstance(X, ht.Float[hax.NamedArray, "batch embed"])
    assert isinstance(X, ht.f32[hax.NamedArray, "batch embed"])
    assert not isinstance(X, ht.f16[hax.NamedArray, "batch embed"])
    assert not isinstance(X, ht.Int[hax.NamedArray, "batch embed"])
    assert not isinstance(X, ht.Float[hax.NamedArray, "embed batch"])  # order matters
    assert isinstance(X, ht.Float[hax.NamedArray, {"embed", "batch"}])  # a set does not
    assert isinstance(X, ht.Float[hax.NamedArray, "batch ..."])
    assert isinstance(X, ht.Named["batch embed"]) and isinstance(
        X, ht.Shaped[hax.NamedArray, "..."]
    )
    assert not isinstance(X.array, ht.Named["batch embed"])
    ints = hax.zeros((B,), dtype=jnp.int32)
    assert isinstance(ints, ht.i32[hax.NamedArray, "batch"]) and isinstance(
        ints, ht.Int[hax.NamedArray, "batch"]
    )
    assert isinstance(hax.zeros((B,), dtype=jnp.bfloat16), ht.Float[hax.NamedArray, "batch"])
    assert isinstance(hax.zeros((B,), dtype=bool), ht.Bool[hax.NamedArray, "batch"])
    assert repr(ht.Float[hax.NamedArray, "batch ..."]) == "Float[NamedArray, 'batch ...']"


def test_positional_arrays_bind_by_rank():
    assert isinstance(jnp.ones((2, 3)), ht.f32[jax.Array, "b e"])
    assert not isinstance(jnp.ones((2, 3, 1)), ht.f32[jax.Array, "b e"])
    assert isinstance(np.ones((2, 3, 1)), ht.Float[np.ndarray, "b ..."])


def test_typecheck_checks_arguments_result_and_sizes():
    @ht.typecheck
    def proj(x: BatchEmbed, w: EmbedHeads) -> BatchHeads:
        return hax.dot(x, w, axis="embed")

    w = hax.ones((E, H))
    assert proj(X, w).axes == (B, H)
    with pytest.raises(TypeError, match="argument 'w': expected dtype Float, got int32"):
        proj(X, hax.ones((E, H), dtype=jnp.int32))
    with pytest.raises(TypeError, match="argument 'x': expected axes"):
        proj(hax.zeros((E, B)), w)
    with pytest.raises(TypeError, match="'embed' has size 5 here but 3"):
        proj(X, hax.ones((hax.Axis("embed", 5), H)))
    with pytest.raises(TypeError, match="expected a NamedArray, got"):
        proj(X.array, w)

    @ht.typecheck
    def bad(x: BatchEmbed) -> BatchOnly:
        return x

    with pytest.raises(TypeError, match="return value: expected axes"):
        bad(X)
    # Under jit the checks run at trace time.
    assert jax.jit(proj)(X, w).axes == (B, H)


def test_annotation_errors():
    with pytest.raises(TypeError, match="array type must be NamedArray"):
        ht.Float[3, "batch"]
    with pytest.raises(TypeError, match="array type must be NamedArray"):
        ht.Float[int, "batch"]


def test_field_static_and_util():
    @jtree.dataclass
    class Layer:
        w: hax.NamedArray
        axis: hax.Axis = hax.field(static=True, default=E)
        scale: float = hax.field(default=1.0)

    layer = Layer(hax.ones((E,)))
    leaves = jax.tree.leaves(layer)
    assert len(leaves) == 2  # w's array and scale; the axis is static
    fields = {f.name: f for f in dataclasses.fields(Layer)}
    assert fields["axis"].metadata["static"] and not fields["scale"].metadata["static"]
    assert jax.jit(lambda m: m.w * m.scale)(layer).axes == (E,)
    with pytest.raises(ValueError, match="both default and default_factory"):
        hax.field(default=1, default_factory=list)
    assert hax.util.is_named_array(layer.w) and not hax.util.is_named_array(layer.w.array)


def test_annotations_are_typing_annotated_like_haliax():
    import typing

    # Haliax's short form f32["b e"] annotates a NamedArray; get_args gives (type, spec)
    ann = ht.f32["batch embed"]
    assert typing.get_origin(ann) is typing.Annotated
    arr_type, spec = typing.get_args(ann)
    assert arr_type is hax.NamedArray and spec.dtype == jnp.float32
    assert spec.before == ("batch", "embed") and spec.after == () and not spec.subset
    assert str(typing.get_args(ht.Float["b"])[1].dtype) == "float"
    mid = typing.get_args(hax.NamedArray["batch ... embed"])[1]
    assert (mid.before, mid.after, mid.subset) == (("batch",), ("embed",), True)
    unordered = typing.get_args(hax.NamedArray[{"batch", "embed", ...}])[1]
    assert set(unordered.before) == {"batch", "embed"} and unordered.subset
    assert not unordered.ordered
    # Named[...] (any dtype) equals the NamedArray[...] spec
    assert (
        typing.get_args(ht.Named[hax.NamedArray, "batch embed"])[1]
        == typing.get_args(hax.NamedArray["batch", "embed"])[1]
    )

    def fn(x: ht.f32[hax.NamedArray, "batch embed"]):  # noqa: F722 - jaxtyping-style string
        return x

    hint = typing.get_type_hints(fn, include_extras=True)["x"]
    assert typing.get_args(hint)[1].before == ("batch", "embed")
    # matches_axes checks the dtype rule as well as the axes
    x = hax.zeros((B, E), dtype=jnp.float32)
    assert x.matches_axes(ht.f32["batch embed"]) and not x.matches_axes(ht.i32["batch embed"])
    assert x.matches_axes(ht.Float[hax.NamedArray, "batch ..."])
    assert not x.matches_axes(ht.Int[hax.NamedArray, "batch ..."])
    assert isinstance(x, ht.f32["batch embed"]) and not isinstance(x, ht.f32["embed batch"])

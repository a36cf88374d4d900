"""Axis-spec helpers: axis_spec_to_shape_dict, replace_axis, rearrange_for_partial_order,
concat_axis_specs, axis_size."""

import pytest

import jaxcore.named as hax

H, W, C, D = hax.make_axes(h=2, w=3, c=4, d=5)


def test_axis_spec_to_shape_dict():
    assert hax.axis_spec_to_shape_dict((H, W)) == {"h": 2, "w": 3}
    assert hax.axis_spec_to_shape_dict(H) == {"h": 2}
    assert hax.axis_spec_to_shape_dict({"h": 2, "c": None}) == {"h": 2, "c": None}
    assert hax.axis_spec_to_shape_dict(("h", W)) == {"h": None, "w": 3}
    assert list(hax.axis_spec_to_shape_dict((W, H))) == ["w", "h"]  # order kept
    with pytest.raises(ValueError, match="'h'"):
        hax.axis_spec_to_shape_dict((H, hax.Axis("h", 2)))


def test_axis_size():
    assert hax.axis_size(H) == 2
    assert hax.axis_size((H, W, C)) == 24
    assert hax.axis_size({"h": 2, "d": 5}) == 10
    assert hax.axis_size(()) == 1


def test_replace_axis_keeps_position_and_container():
    assert hax.replace_axis((H, W, C), W, D) == (H, D, C)
    assert hax.replace_axis((H, W, C), "w", (D, hax.Axis("e", 1))) == (H, D, hax.Axis("e", 1), C)
    assert hax.replace_axis({"h": 2, "w": 3}, "h", {"d": 5}) == {"d": 5, "w": 3}
    assert hax.replace_axis((H, "w"), "w", "q") == (H, "q")
    with pytest.raises(ValueError, match="axis 'c' is not in"):
        hax.replace_axis((H, W), C, D)
    with pytest.raises(ValueError, match="gives axis 'h' twice"):
        hax.replace_axis((H, W), W, H)
    with pytest.raises(ValueError, match="has size 3"):
        hax.replace_axis((H, W), hax.Axis("w", 7), D)


def test_rearrange_for_partial_order():
    axes = (H, W, C, D)
    assert hax.rearrange_for_partial_order(("d", ...), axes) == (D, H, W, C)
    assert hax.rearrange_for_partial_order((..., H), axes) == (W, C, D, H)
    assert hax.rearrange_for_partial_order((C, ..., "h"), axes) == (C, W, D, H)
    assert hax.rearrange_for_partial_order(("d", ..., "c", ..., "h"), axes) == (D, W, C, H)
    assert hax.rearrange_for_partial_order((D, C, W, H), axes) == (D, C, W, H)
    with pytest.raises(ValueError, match="'q'.*not among the axes"):
        hax.rearrange_for_partial_order(("q", ...), axes)
    with pytest.raises(ValueError, match="missing"):
        hax.rearrange_for_partial_order((D, C), axes)


def test_concat_axis_specs():
    assert hax.concat_axis_specs((H, W), (C,)) == (H, W, C)
    assert hax.concat_axis_specs({"h": 2}, {"c": 4}) == {"h": 2, "c": 4}
    assert hax.concat_axis_specs(H, "c") == (H, "c")
    with pytest.raises(ValueError, match="'h' occurs in both"):
        hax.concat_axis_specs((H, W), (H,))


def test_rearrange_for_partial_order_on_axis_names():
    # Haliax accepts bare names and hands back the same kind of entries it was given
    assert hax.rearrange_for_partial_order(("a", ..., "b"), ("b", "a", "c")) == ("a", "c", "b")
    assert hax.rearrange_for_partial_order((..., "a", "b"), ("b", "a", "c")) == ("c", "a", "b")
    assert hax.rearrange_for_partial_order(("a", ..., "b", ...), ("b", "a", "c")) == (
        "a",
        "b",
        "c",
    )
    assert hax.rearrange_for_partial_order((...,), ()) == ()
    mixed = hax.rearrange_for_partial_order(("y", ...), (hax.Axis("x", 2), "y"))
    assert mixed == ("y", hax.Axis("x", 2))
    with pytest.raises(ValueError, match="'q'"):
        hax.rearrange_for_partial_order(("q", ...), ("a", "b"))
    with pytest.raises(ValueError, match="occurs twice"):
        hax.rearrange_for_partial_order(("a", "a", ...), ("a", "b"))
    with pytest.raises(ValueError, match="names an axis twice"):
        hax.rearrange_for_partial_order(("a", ...), ("a", "a"))
    with pytest.raises(ValueError):
        hax.rearrange_for_partial_order(("a", "b"), ("b", "a", "c"))


def test_axis_module_path():
    # Haliax code imports the axis helpers from ``haliax.axis`` too
    from jaxcore.named import axis as hax_axis

    assert hax.axis is hax_axis
    for name in hax_axis.__all__:
        assert getattr(hax_axis, name) is getattr(hax, name)
    H, W = hax.make_axes(H=2, W=3)
    assert hax.axis.without_axes((H, W), H) == (W,)

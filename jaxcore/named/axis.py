"""``hax.axis``: the axis types and axis-spec helpers under Haliax's module path.

Haliax code reaches them both as ``hax.make_axes`` and as ``hax.axis.without_axes`` (or
``from haliax.axis import ...``); this module gathers the same objects for the second form.
"""

from jaxcore.named._axis import (
    Axis,
    AxisSelection,
    AxisSelector,
    AxisSpec,
    PartialShapeDict,
    ShapeDict,
    axis_name,
    concat_axes,
    eliminate_axes,
    intersect_axes,
    is_axis_compatible,
    make_axes,
    selects_axis,
    union_axes,
    without_axes,
)
from jaxcore.named._axis_utils import (
    axis_size,
    axis_spec_to_shape_dict,
    concat_axis_specs,
    rearrange_for_partial_order,
    replace_axis,
)

__all__ = [
    "Axis",
    "AxisSelection",
    "AxisSelector",
    "AxisSpec",
    "PartialShapeDict",
    "ShapeDict",
    "axis_name",
    "axis_size",
    "axis_spec_to_shape_dict",
    "concat_axes",
    "concat_axis_specs",
    "eliminate_axes",
    "intersect_axes",
    "is_axis_compatible",
    "make_axes",
    "rearrange_for_partial_order",
    "replace_axis",
    "selects_axis",
    "union_axes",
    "without_axes",
]

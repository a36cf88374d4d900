"""jaxcore.named: arrays whose axes have names (the Haliax API), used as ``import jaxcore.named as hax``.

Axes are addressed by name instead of position: ``x.sum("batch")``, ``x["seq", 0:16]``,
and binary operations align operands by axis name. Everything here is a thin layer over
``jax.numpy`` / ``jax.lax``: after ``jax.jit`` a named program lowers to the same HLO as
the positional one.
"""

# ruff: noqa: F401, A004

# --- Haliax's submodules: random numbers, higher-order functions, checkpointing ---
from jaxcore.named import (
    _methods,  # noqa: F401 - binds NamedArray's operators and methods
    hof,
    jax_utils,
    nn,
    random,
)

# --- dot/einsum, rearrange strings, fft, refs, tree helpers, partitioning ---
from jaxcore.named import _partitioning as partitioning
from jaxcore.named import _tree as tree
from jaxcore.named import _tree as tree_util
from jaxcore.named._array import AxesSpec, NamedArray, NamedOrNumeric
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
from jaxcore.named._broadcast import broadcast_arrays, broadcast_axis, broadcast_to, named
from jaxcore.named._checkpoint import ScanCheckpointPolicy
from jaxcore.named._creation import (
    arange,
    full,
    full_like,
    geomspace,
    linspace,
    logspace,
    ones,
    ones_like,
    zeros,
    zeros_like,
)
from jaxcore.named._dot import dot, einsum
from jaxcore.named._fft import (
    fft,
    fftfreq,
    fftshift,
    hfft,
    ifft,
    ifftshift,
    ihfft,
    irfft,
    rfft,
    rfftfreq,
)
from jaxcore.named._indexing import dblock, ds, dslice, index, slice, take, updated_slice
from jaxcore.named._ops import *  # noqa: F403 - the generated op table and friends
from jaxcore.named._ops import BINARY_OPS, UNARY_OPS
from jaxcore.named._partitioning import (
    ResourceMapping,
    axis_mapping,
    current_axis_mapping,
    fsdp,
    named_jit,
    physical_axis_name,
    physical_axis_size,
    pspec_for,
    round_axis_for_partitioning,
    shard,
    sharding_for_axis,
)
from jaxcore.named._ref import NamedRef, freeze, new_ref, swap
from jaxcore.named._shape import (
    concatenate,
    flatten,
    flatten_axes,
    ravel,
    rearrange,
    rename,
    split,
    stack,
    unbind,
    unflatten_axis,
)
from jaxcore.named._tree import (
    Stacked,
    scan_aware_tree_map,
    tree_flatten,
    tree_leaves,
    tree_map,
    tree_structure,
    tree_unflatten,
)
from jaxcore.named.hof import fold, map, scan, vmap
from jaxcore.named.jax_utils import filter_checkpoint, tree_checkpoint_name

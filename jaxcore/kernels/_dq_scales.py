"""NF4's double-quantized block scales (QLoRA, section 3): the layout every kernel reads.

The float32 absmax of each (block, column) is stored as int8 ``codes`` of ``absmax - offset``
with one float32 scale per group of `GROUP_SIZE` consecutive codes (row-major over the
(K // block_size, N) scale array) and one float32 ``offset``:

    scale.flat[i] = min(codes.flat[i] * group_scale[i // GROUP_SIZE] + offset, float32 max)

(two roundings, no fused multiply-add; a NaN group scale makes its blocks NaN).
``jaxcore.quant`` writes this layout; kernels that take it directly read the compressed
bytes instead of a float32 array expanded on every call.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

GROUP_SIZE = 256


@jax.jit
def expand_scales(codes: jax.Array, group_scale: jax.Array, offset: jax.Array) -> jax.Array:
    """float32 block scales shaped like ``codes`` (the formula in the module docstring).

    Codes split over Explicit mesh axes are gathered first (groups run across the split;
    the codes are 1/block_size of the weight) and the scales come back split like them.
    """
    placed = _explicit_sharding(codes)
    if placed is not None:
        whole = jax.sharding.NamedSharding(placed.mesh, jax.sharding.PartitionSpec())
        codes, group_scale, offset = (
            jax.sharding.reshard(a, whole) for a in (codes, group_scale, offset)
        )
        return jax.sharding.reshard(expand_scales(codes, group_scale, offset), placed)
    flat = codes.reshape(-1).astype(jnp.float32)
    # Whole groups as rows times their scale: a broadcast, where indexing the scale of
    # every entry would be a gather (about 10x slower on CPU, and it runs every call).
    count = flat.size
    groups = group_scale.shape[0]
    padded = jnp.pad(flat, (0, groups * GROUP_SIZE - count)).reshape(groups, GROUP_SIZE)
    values = (padded * group_scale[:, None] + offset).reshape(-1)[:count]
    # A finite absmax is at most float32's max; rounding must not turn it into inf (NaN stays).
    values = jnp.minimum(values, jnp.finfo(jnp.float32).max)
    return values.reshape(codes.shape)


def _explicit_sharding(a):
    """``a``'s sharding where it is split over an Explicit mesh axis, else ``None``."""
    sharding = getattr(jax.typeof(a), "sharding", None)
    spec = getattr(sharding, "spec", None)
    mesh = getattr(sharding, "mesh", None)
    if spec is None or mesh is None or mesh.empty or all(p is None for p in spec):
        return None
    types = dict(zip(mesh.axis_names, mesh.axis_types))
    named = {n for p in spec if p is not None for n in (p if isinstance(p, tuple) else (p,))}
    if not any(types.get(n) == jax.sharding.AxisType.Explicit for n in named):
        return None
    return sharding


def group_count(codes_shape: tuple[int, ...]) -> int:
    """Entries of ``group_scale`` for scale codes of this shape."""
    size = 1
    for d in codes_shape:
        size *= int(d)
    return -(-size // GROUP_SIZE)

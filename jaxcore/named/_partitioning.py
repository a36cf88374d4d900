"""Named sharding: map logical axis names to mesh axes and shard ``NamedArray`` trees.

A *resource mapping* (``{"batch": "data", "embed": ("data", "model"), "vocab": None}``)
says which mesh axis (or axes) each logical axis is split over. ``axis_mapping`` installs a
mapping for a block of code (thread-locally, nestable); ``pspec_for`` turns a ``NamedArray``'s
axes into a ``PartitionSpec``; ``shard`` places or constrains the ``NamedArray`` leaves of a
tree; ``named_jit`` is ``jax.jit`` with input/output/compute mappings and donation given as
pytrees over the arguments.

Which JAX primitive ``shard`` uses depends on where it runs: ``jax.device_put`` on concrete
arrays, ``jax.lax.with_sharding_constraint`` under a trace for ``Auto`` mesh axes and
``jax.sharding.reshard`` for ``Explicit`` ones.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
from jax.sharding import (
    AbstractMesh,
    AxisType,
    Mesh,
    NamedSharding,
    PartitionSpec,
    SingleDeviceSharding,
)

from jaxcore import _jax_internals
from jaxcore.named._array import NamedArray
from jaxcore.named._axis import Axis, AxisSelection, AxisSelector

__all__ = [
    "ResourceAxis",
    "ResourceMapping",
    "axis_mapping",
    "current_axis_mapping",
    "fsdp",
    "get_mesh",
    "infer_resource_partitions",
    "named_jit",
    "physical_axis_name",
    "physical_axis_size",
    "pspec_for",
    "round_axis_for_partitioning",
    "set_mesh",
    "shard",
    "sharding_for_axis",
]

PhysicalAxisSpec = str | tuple[str, ...]
ResourceMapping = Mapping[str, PhysicalAxisSpec | None]

_local = threading.local()


def _stack() -> list[dict[str, PhysicalAxisSpec | None]]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def _validated(mapping: Mapping) -> dict[str, PhysicalAxisSpec | None]:
    out: dict[str, PhysicalAxisSpec | None] = {}
    for key, value in mapping.items():
        name = key.name if isinstance(key, Axis) else key
        if not isinstance(name, str):
            raise TypeError(f"Resource mapping keys must be axis names, got {key!r}")
        if isinstance(value, list):
            value = tuple(value)
        if not (
            value is None
            or isinstance(value, str)
            or (isinstance(value, tuple) and all(isinstance(v, str) for v in value))
        ):
            raise TypeError(
                f"Axis {name!r} maps to {value!r}; use a mesh axis name, a tuple of names or None"
            )
        out[name] = value
    return out


def current_axis_mapping() -> dict[str, PhysicalAxisSpec | None]:
    """The mapping installed by the innermost ``axis_mapping`` (empty outside any)."""
    stack = _stack()
    return dict(stack[-1]) if stack else {}


@contextlib.contextmanager
def axis_mapping(
    mapping: ResourceMapping | None = None,
    *,
    merge: bool = False,
    **kwargs: PhysicalAxisSpec | None,
) -> Iterator[dict[str, PhysicalAxisSpec | None]]:
    """Installs a logical-to-mesh axis mapping for the enclosed code.

    Args:
      mapping: logical axis name -> mesh axis name, tuple of mesh axis names, or ``None``
        (replicated).
      merge: add to the enclosing mapping instead of replacing it.
      **kwargs: more entries, same meaning as ``mapping``.

    Yields:
      The mapping now in force.

    Raises:
      TypeError: for a key that is not a name or a value that is not a mesh axis spec.
    """
    new = _validated({**(mapping or {}), **kwargs})
    if merge:
        new = {**current_axis_mapping(), **new}
    stack = _stack()
    stack.append(new)
    try:
        yield dict(new)
    finally:
        stack.pop()


def _mapping_or_current(mapping: ResourceMapping | None) -> dict[str, PhysicalAxisSpec | None]:
    return current_axis_mapping() if mapping is None else _validated(mapping)


def _mesh_axes(phys: PhysicalAxisSpec | None) -> tuple[str, ...]:
    """The mesh axis names of one mapping value (``()`` for ``None``)."""
    return (phys,) if isinstance(phys, str) else (phys or ())


def _spec_for_axes(
    axes: Sequence[Axis | str], mapping: Mapping[str, PhysicalAxisSpec | None]
) -> PartitionSpec:
    entries = []
    used: dict[str, str] = {}
    for ax in axes:
        name = ax.name if isinstance(ax, Axis) else ax
        phys = mapping.get(name)
        for mesh_axis in _mesh_axes(phys):
            if mesh_axis in used:
                raise ValueError(
                    f"Mesh axis {mesh_axis!r} is used by both {used[mesh_axis]!r} and {name!r} in one array "
                    f"(axes {tuple(axes)})"
                )
            used[mesh_axis] = name
        entries.append(phys)
    while entries and entries[-1] is None:
        entries.pop()
    return PartitionSpec(*entries)


def _is_axes(x: Any) -> bool:
    return (
        isinstance(x, (tuple, list)) and all(isinstance(a, (Axis, str)) for a in x) and len(x) > 0
    )


def _has_axis_name_fields(x: Any) -> bool:
    """True for a module instance with a field declared ``hax.field(axis_names=...)``."""
    if isinstance(x, type) or not dataclasses.is_dataclass(x):
        return False
    return any(f.metadata.get("axis_names") is not None for f in dataclasses.fields(x))


def _is_spec_leaf(x: Any) -> bool:
    return isinstance(x, NamedArray) or _has_axis_name_fields(x)


def _map_specs(
    tree: Any, on_leaf: Callable[[Any], Any], on_named_field: Callable[[Any, Sequence[str]], Any]
) -> Any:
    """Maps ``on_leaf`` over ``tree``; a plain array in a field declared with
    ``hax.field(axis_names=...)`` goes to ``on_named_field(array, names)`` instead.

    A module holding such fields is rebuilt field by field (as Haliax does for equinox
    modules), so the result has the module's type with specs in place of its arrays.
    """

    def visit(node: Any) -> Any:
        if not _has_axis_name_fields(node):
            return on_leaf(node)
        new = object.__new__(type(node))
        for f in dataclasses.fields(node):
            value = getattr(node, f.name)
            names = f.metadata.get("axis_names")
            if f.metadata.get("static", False):
                out = value
            elif names is not None and hasattr(value, "shape"):
                out = on_named_field(value, names)
            else:
                out = jax.tree.map(visit, value, is_leaf=_is_spec_leaf)
            object.__setattr__(new, f.name, out)  # frozen dataclasses and equinox modules
        return new

    return jax.tree.map(visit, tree, is_leaf=_is_spec_leaf)


def pspec_for(
    x: Any,
    mapping: ResourceMapping | None = None,
    preserve_existing_shardings: bool = True,
    *,
    resource_mapping: ResourceMapping | None = None,
) -> Any:
    """The ``PartitionSpec`` for a ``NamedArray`` (or a tuple of axes) under ``mapping``.

    In a pytree (a model), as in Haliax: each ``NamedArray`` gets the spec of its axes; a
    plain array in a field declared ``hax.field(axis_names=(...))`` gets the spec of those
    names; another plain array gets ``PartitionSpec()`` if it is a scalar, else
    ``PartitionSpec(None)`` (replicated), or ``None`` (left alone) when it already has a
    multi-device sharding and ``preserve_existing_shardings``; Python numbers get
    ``PartitionSpec()`` and other leaves ``None``.

    Args:
      x: a ``NamedArray``, an ``Axis``, a sequence of axes/names, or a pytree.
      mapping: the resource mapping; defaults to the one ``axis_mapping`` installed.
      preserve_existing_shardings: Leave plain arrays that are already sharded alone.
      resource_mapping: Haliax's name for ``mapping``.

    Returns:
      A ``PartitionSpec`` (trailing unmapped axes dropped), or a pytree of them.

    Raises:
      ValueError: if two axes of one array map to the same mesh axis.
    """
    resolved = _mapping_or_current(mapping if mapping is not None else resource_mapping)
    if isinstance(x, NamedArray):
        return _spec_for_axes(x.axes, resolved)
    if isinstance(x, Axis):
        return _spec_for_axes((x,), resolved)
    if _is_axes(x):
        return _spec_for_axes(x, resolved)

    def already_sharded(leaf: Any) -> bool:
        sharding = getattr(leaf, "sharding", None)
        return (
            preserve_existing_shardings
            and sharding is not None
            and not isinstance(sharding, SingleDeviceSharding)
        )

    def leaf_spec(leaf: Any) -> Any:
        if isinstance(leaf, NamedArray):
            return _spec_for_axes(leaf.axes, resolved)
        if isinstance(leaf, (jax.Array, jax.ShapeDtypeStruct)):
            if leaf.shape == ():
                return PartitionSpec()
            return None if already_sharded(leaf) else PartitionSpec(None)
        if isinstance(leaf, (bool, int, float, complex)):
            return PartitionSpec()
        return None

    def field_spec(leaf: Any, names: Sequence[str]) -> Any:
        return None if already_sharded(leaf) else _spec_for_axes(tuple(names), resolved)

    return _map_specs(x, leaf_spec, field_spec)


def infer_resource_partitions(
    tree: Any,
    resource_mapping: ResourceMapping | None = None,
    preserve_existing_shardings: bool = True,
    mesh: Mesh | None = None,
) -> Any:
    """The ``NamedSharding`` for every array leaf of ``tree`` (to pass to ``jax.jit``/``device_put``).

    A ``NamedArray`` is split by its axis names under the mapping, and so is a plain array
    in a field declared ``hax.field(axis_names=(...))``; another array keeps its
    own ``NamedSharding`` (with ``preserve_existing_shardings``) or is replicated; other
    leaves get ``None``.

    Args:
      tree: A pytree of NamedArrays and arrays (e.g. a model).
      resource_mapping: The mapping; defaults to the one ``axis_mapping`` installed.
      preserve_existing_shardings: Keep the ``NamedSharding`` a concrete array already has
        (for positional arrays; named arrays always follow the mapping).
      mesh: The mesh; defaults to the current one (``set_mesh``/``jax.set_mesh``/``with mesh:``).

    Returns:
      A pytree like ``tree`` with ``NamedSharding`` (or ``None``) leaves; a ``NamedArray``
      leaf becomes a ``NamedArray`` whose ``array`` is its sharding.

    Raises:
      ValueError: if there is no mesh.
    """
    use_mesh = mesh if mesh is not None else _current_mesh()
    if use_mesh is None:
        raise ValueError(
            "infer_resource_partitions needs a mesh (pass mesh= or use hax.partitioning.set_mesh)"
        )
    resolved = _mapping_or_current(resource_mapping)

    def partition(leaf: Any) -> Any:
        if isinstance(leaf, NamedArray):
            sharding = NamedSharding(use_mesh, _spec_for_axes(leaf.axes, resolved))
            return NamedArray._new(sharding, leaf.axes, leaf._names)
        existing = getattr(leaf, "sharding", None)
        if preserve_existing_shardings and isinstance(existing, NamedSharding):
            return existing
        if isinstance(leaf, (jax.Array, jax.ShapeDtypeStruct)):
            return NamedSharding(use_mesh, PartitionSpec())
        return None

    def named_field(leaf: Any, names: Sequence[str]) -> Any:
        existing = getattr(leaf, "sharding", None)
        if preserve_existing_shardings and isinstance(existing, NamedSharding):
            return existing
        return NamedSharding(use_mesh, _spec_for_axes(tuple(names), resolved))

    return _map_specs(tree, partition, named_field)


def physical_axis_name(
    axis: AxisSelector, mapping: ResourceMapping | None = None
) -> PhysicalAxisSpec | None:
    """The mesh axis (or axes) ``axis`` maps to, or ``None`` if it is not mapped."""
    name = axis.name if isinstance(axis, Axis) else axis
    return _mapping_or_current(mapping).get(name)


def _mesh_shape(mesh) -> Mapping[str, int]:
    return dict(mesh.shape)


def _current_mesh() -> Mesh | AbstractMesh | None:
    """The mesh in force: ``jax.set_mesh``'s (abstract under a trace), else a classic
    ``with mesh:`` block's, else ``None``."""
    mesh: Mesh | AbstractMesh
    try:
        mesh = jax.sharding.get_mesh()
    except ValueError:  # under jit: only the abstract mesh is available
        mesh = jax.sharding.get_abstract_mesh()
    if mesh is not None and not mesh.empty:
        return mesh
    return _jax_internals.classic_context_mesh()


def get_mesh() -> Mesh | AbstractMesh | None:
    """The mesh named sharding uses now (set by ``set_mesh``/``jax.set_mesh`` or ``with mesh:``).

    Returns:
      The mesh (an ``AbstractMesh`` while tracing under ``jax.set_mesh``), or ``None``.
    """
    return _current_mesh()


def set_mesh(mesh: Mesh) -> Any:
    """Makes ``mesh`` the mesh for named sharding, as a context manager (``with set_mesh(m):``).

    The same as ``jax.set_mesh``; JAX's classic ``with mesh:`` is honored as well.

    Args:
      mesh: The device mesh.

    Returns:
      The context manager that installs ``mesh`` for its block.

    Raises:
      TypeError: if ``mesh`` is not a ``jax.sharding.Mesh``.
    """
    if not isinstance(mesh, Mesh):
        raise TypeError(f"set_mesh needs a jax.sharding.Mesh, got {type(mesh).__name__}")
    return jax.set_mesh(mesh)


class ResourceAxis(enum.StrEnum):
    """The conventional mesh axis names, usable wherever a mesh axis name is (Haliax's names)."""

    MODEL = "model"
    DATA = "data"
    REPLICA = "replica"


def physical_axis_size(
    axis: AxisSelector, mapping: ResourceMapping | None = None, mesh=None
) -> int | None:
    """How many shards ``axis`` is split into (product of its mesh axes), or ``None`` if unmapped.

    Raises:
      ValueError: if the axis is mapped but no mesh is given or set with ``jax.set_mesh``.
    """
    phys = physical_axis_name(axis, mapping)
    if phys is None:
        return None
    mesh = mesh if mesh is not None else _current_mesh()
    if mesh is None:
        raise ValueError(
            f"Axis {axis!r} maps to {phys!r} but there is no mesh (pass mesh= or use jax.set_mesh)"
        )
    shape = _mesh_shape(mesh)
    names = _mesh_axes(phys)
    for n in names:
        if n not in shape:
            raise ValueError(f"Mesh axis {n!r} (for {axis!r}) is not in the mesh {shape}")
    return math.prod(shape[n] for n in names)


def round_axis_for_partitioning(
    axis: Axis, mapping: ResourceMapping | None = None, mesh=None
) -> Axis:
    """Returns ``axis`` grown to the next multiple of its shard count (unchanged if unmapped)."""
    parts = physical_axis_size(axis, mapping, mesh)
    if not parts:
        return axis
    return Axis(axis.name, -(-axis.size // parts) * parts)


def sharding_for_axis(
    axis: AxisSelection, mapping: ResourceMapping | None = None, mesh=None
) -> NamedSharding:
    """The ``NamedSharding`` for an array with the given axes (or one axis).

    Raises:
      ValueError: if there is no mesh.
    """
    mesh = mesh if mesh is not None else _current_mesh()
    if mesh is None:
        raise ValueError("sharding_for_axis needs a mesh (pass mesh= or use jax.set_mesh)")
    axes = (axis,) if isinstance(axis, (Axis, str)) else tuple(axis)
    return NamedSharding(mesh, _spec_for_axes(axes, _mapping_or_current(mapping)))


def _check_divisible(arr: NamedArray, spec: PartitionSpec, mesh) -> None:
    shape = _mesh_shape(mesh)
    for ax, phys in zip(arr.axes, spec):
        if phys is None:
            continue
        names = _mesh_axes(phys)
        for n in names:
            if n not in shape:
                raise ValueError(
                    f"Axis {ax.name!r} maps to mesh axis {n!r}, which the mesh {shape} lacks"
                )
        parts = math.prod(shape[n] for n in names)
        if ax.size % parts:
            raise ValueError(
                f"Axis {ax.name!r} of size {ax.size} cannot be split into {parts} shards "
                f"(mesh axes {names})"
            )


def _is_tracer(x: Any) -> bool:
    return isinstance(x, jax.core.Tracer)


def _place(arr: NamedArray, spec: PartitionSpec, mesh) -> NamedArray:
    _check_divisible(arr, spec, mesh)
    raw = arr.array
    if not _is_tracer(raw):
        if not isinstance(mesh, Mesh):
            raise ValueError("Placing concrete arrays needs a concrete Mesh")
        return NamedArray._new(jax.device_put(raw, NamedSharding(mesh, spec)), arr.axes, arr._names)
    types = dict(zip(mesh.axis_names, mesh.axis_types))
    used = [n for p in spec for n in _mesh_axes(p)]
    if used and all(types[n] == AxisType.Explicit for n in used):
        return NamedArray._new(jax.sharding.reshard(raw, spec), arr.axes, arr._names)
    return NamedArray._new(
        jax.lax.with_sharding_constraint(raw, NamedSharding(mesh, spec)), arr.axes, arr._names
    )


def shard(
    x: Any, mapping: ResourceMapping | None = None, mesh: Mesh | AbstractMesh | None = None
) -> Any:
    """Shards the ``NamedArray`` leaves of ``x`` by their axis names; other leaves pass through.

    Outside ``jit`` this places the data (``device_put``); under ``jit`` it constrains the
    layout (``with_sharding_constraint``, or ``reshard`` for ``Explicit`` mesh axes).

    Args:
      x: a pytree.
      mapping: the resource mapping; defaults to the one ``axis_mapping`` installed. With an
        empty mapping, ``x`` is returned unchanged.
      mesh: the mesh; defaults to the one set with ``jax.set_mesh``.

    Returns:
      ``x`` with its named arrays sharded.

    Raises:
      ValueError: if there is no mesh, an axis does not divide into its shard count, a mesh
        axis is missing, or two axes of one array map to the same mesh axis.
    """
    resolved = _mapping_or_current(mapping)
    if not resolved:
        return x
    mesh = mesh if mesh is not None else _current_mesh()
    if mesh is None:
        raise ValueError("shard needs a mesh: pass mesh= or use jax.set_mesh(mesh)")

    def one(leaf):
        if isinstance(leaf, NamedArray):
            return _place(leaf, _spec_for_axes(leaf.axes, resolved), mesh)
        return leaf

    return jax.tree.map(one, x, is_leaf=lambda leaf: isinstance(leaf, NamedArray))


# ----------------------------------------------------------------------------- named_jit


def _is_dynamic(leaf: Any) -> bool:
    return (
        isinstance(leaf, (NamedArray, jax.Array))
        or hasattr(leaf, "__jax_array__")
        or (hasattr(leaf, "shape") and hasattr(leaf, "dtype"))
    )


def _donation_flags(spec: Any, tree: Any, what: str) -> list[bool]:
    """Expands a donation spec (bool / callable / pytree prefix of those) to one flag per leaf."""
    is_named = lambda v: isinstance(v, NamedArray)
    n = len(jax.tree.leaves(tree, is_leaf=is_named))
    if spec is None:
        return [False] * n
    if isinstance(spec, bool):
        return [spec] * n
    if callable(spec):
        return [bool(spec(leaf)) for leaf in jax.tree.leaves(tree, is_leaf=is_named)]
    try:
        expanded = jax.tree.map(
            lambda s, sub: jax.tree.map(
                (lambda leaf: bool(s(leaf))) if callable(s) else (lambda leaf: bool(s)),
                sub,
                is_leaf=is_named,
            ),
            spec,
            tree,
            is_leaf=lambda v: isinstance(v, bool) or callable(v),
        )
    except ValueError as e:
        raise ValueError(f"{what} does not match the structure of the arguments: {e}") from None
    return jax.tree.leaves(expanded)


def named_jit(
    fn: Callable | None = None,
    axis_resources: ResourceMapping | None = None,
    *,
    in_axis_resources: ResourceMapping | None = None,
    out_axis_resources: ResourceMapping | None = None,
    donate_args: Any = None,
    donate_kwargs: Any = None,
    **jit_args: Any,
):
    """``jax.jit`` for code over ``NamedArray`` trees, with named sharding.

    * ``axis_resources`` is the mapping in force while ``fn`` is traced (so ``shard`` inside
      ``fn`` uses it) and the default for ``out_axis_resources``.
    * ``in_axis_resources``: if given, named-array arguments are sharded with it before the
      call; otherwise they keep their own shardings.
    * ``out_axis_resources``: the named-array results are constrained to it.
    * ``donate_args`` / ``donate_kwargs``: a bool, a ``leaf -> bool`` function or a pytree
      prefix of those over ``args`` / ``kwargs``; donated leaves' buffers may be reused.

    Arguments that are not arrays are static (they must be hashable); each distinct static
    configuration compiles once. Without any mapping argument the mapping of the enclosing
    ``axis_mapping`` is used. Usable as ``@named_jit``, ``@named_jit(...)`` or
    ``named_jit(fn, ...)``.

    Args:
      fn: the function.
      axis_resources: the compute mapping.
      in_axis_resources: the mapping for the inputs.
      out_axis_resources: the mapping for the outputs (default: ``axis_resources``).
      donate_args: which positional-argument leaves to donate.
      donate_kwargs: which keyword-argument leaves to donate.
      **jit_args: passed to ``jax.jit`` (e.g. ``keep_unused``, ``inline``).

    Returns:
      The wrapped function (or a decorator when ``fn`` is omitted).
    """
    if fn is None:
        return functools.partial(
            named_jit,
            axis_resources=axis_resources,
            in_axis_resources=in_axis_resources,
            out_axis_resources=out_axis_resources,
            donate_args=donate_args,
            donate_kwargs=donate_kwargs,
            **jit_args,
        )
    for bad in (
        "in_shardings",
        "out_shardings",
        "donate_argnums",
        "donate_argnames",
        "static_argnums",
    ):
        if bad in jit_args:
            raise TypeError(
                f"named_jit computes {bad} itself; use the *_axis_resources / donate_* arguments"
            )

    cache: dict = {}

    def prepare(args: tuple, kwargs: dict) -> tuple[Any, list]:
        """The cached ``jax.jit`` of ``fn`` for these arguments, and its dynamic leaves."""
        compute = (
            _validated(axis_resources) if axis_resources is not None else current_axis_mapping()
        )
        out_map = _validated(out_axis_resources) if out_axis_resources is not None else compute
        mesh = _current_mesh() if (compute or out_map or in_axis_resources) else None
        if in_axis_resources is not None:
            args, kwargs = shard((args, kwargs), in_axis_resources, mesh)

        is_named = lambda v: isinstance(v, NamedArray)
        leaves, treedef = jax.tree.flatten((args, kwargs), is_leaf=is_named)
        dynamic_mask = tuple(_is_dynamic(leaf) for leaf in leaves)
        static = tuple(None if d else leaf for leaf, d in zip(leaves, dynamic_mask))
        dynamic = [leaf for leaf, d in zip(leaves, dynamic_mask) if d]
        if donate_args is None and donate_kwargs is None:
            donate: tuple[int, ...] = ()
        else:
            flags = _donation_flags(donate_args, args, "donate_args") + _donation_flags(
                donate_kwargs, kwargs, "donate_kwargs"
            )
            donate = tuple(
                i for i, k in enumerate(j for j, d in enumerate(dynamic_mask) if d) if flags[k]
            )
        key = (
            treedef,
            dynamic_mask,
            static,
            donate,
            tuple(sorted(compute.items())),
            tuple(sorted(out_map.items())),
            id(mesh) if mesh is not None else None,
        )
        try:
            jitted = cache.get(key)
        except TypeError as e:
            raise TypeError(f"named_jit: non-array arguments must be hashable ({e})") from None
        if jitted is None:

            def flat_fn(*dyn):
                it = iter(dyn)
                full = [next(it) if d else s for d, s in zip(dynamic_mask, static)]
                a, kw = jax.tree.unflatten(treedef, full)
                with axis_mapping(compute):
                    out = fn(*a, **kw)
                if out_map:
                    out = shard(out, out_map, mesh)
                return out

            jitted = jax.jit(flat_fn, donate_argnums=donate, **jit_args)
            cache[key] = jitted
        return jitted, dynamic

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        jitted, dynamic = prepare(args, kwargs)
        return jitted(*dynamic)

    def lower(*args, **kwargs):
        """``jax.jit(...).lower`` for these arguments (for cost analysis or the HLO text)."""
        jitted, dynamic = prepare(args, kwargs)
        return jitted.lower(*dynamic)

    wrapper.lower = lower  # type: ignore[attr-defined]  # Haliax's named_jit(...).lower
    return wrapper


def fsdp(
    fn: Callable | None = None,
    parameter_mapping: ResourceMapping | None = None,
    compute_mapping: ResourceMapping | None = None,
):
    """``named_jit`` for fully-sharded data parallelism.

    Inputs and outputs use ``parameter_mapping``; the body runs under ``compute_mapping``.
    Usable as ``fsdp(fn, p, c)`` or as a decorator ``@fsdp(p, c)``.
    """
    if fn is not None and not callable(fn):
        fn, parameter_mapping, compute_mapping = None, fn, parameter_mapping
    if parameter_mapping is None or compute_mapping is None:
        raise TypeError("fsdp needs both parameter_mapping and compute_mapping")
    decorator = named_jit(
        axis_resources=compute_mapping,
        in_axis_resources=parameter_mapping,
        out_axis_resources=parameter_mapping,
    )
    return decorator if fn is None else decorator(fn)

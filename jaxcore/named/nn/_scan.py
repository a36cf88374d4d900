"""``Stacked`` and ``BlockSeq``: a stack of identical layers applied one after another.

``Stacked`` keeps one copy of the layer whose every parameter has a leading ``Block`` axis
(a "layers" axis) and runs it with ``hax.scan``/``hax.fold`` over that axis, so the layer
is traced and compiled once however deep the stack is ("scan over layers"). Its
``gradient_checkpointing`` (a ``ScanCheckpointPolicy`` or one of its shorthands) says what
each step keeps for the backward pass.

``BlockSeq`` holds the same layers as a Python sequence and applies them in an unrolled
loop: the same results, one traced copy per layer. It also allows heterogeneous blocks.

Both are built curried, as in Haliax::

    layers = hax.nn.Stacked.init(Layers, Block, gradient_checkpointing=True)(
        config, key=jax.random.split(key, Layers.size))
    x = layers.fold(x)              # block(carry, *args) -> carry
    x, outs = layers.scan(x)        # block(carry, *args) -> (carry, out)

Arguments of ``init``, ``fold``, ``scan`` and ``vmap`` are split per layer by one rule: a
``NamedArray`` that has the ``Block`` axis is indexed along it, a plain array of rank >= 1
along its first dimension (e.g. ``jax.random.split(key, Layers.size)``); anything else is
given whole to every layer.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

import jax
import jax.numpy as jnp

import jaxcore.tree as jtree
from jaxcore.named import hof
from jaxcore.named._array import NamedArray
from jaxcore.named._axis import Axis
from jaxcore.named._checkpoint import ScanCheckpointPolicy, ScanCheckpointSpec
from jaxcore.named.jax_utils import is_jax_array_like, tree_checkpoint_name
from jaxcore.named.nn._module import module

__all__ = ["BlockFoldable", "BlockSeq", "ModuleInit", "Stacked"]

M = TypeVar("M")
M_co = TypeVar("M_co", covariant=True)


class ModuleInit(Protocol[M_co]):
    """What ``Stacked.init``/``BlockSeq.init`` return: ``fn(*args, **kwargs) -> module``."""

    def __call__(self, *args: Any, **kwargs: Any) -> M_co: ...


class BlockFoldable(Protocol[M_co]):
    """The interface ``Stacked`` and ``BlockSeq`` share (for type hints)."""

    Block: Axis

    def fold(
        self, init: Any, *args: Any, unroll: int | bool | None = None, **kwargs: Any
    ) -> Any: ...

    def scan(
        self, init: Any, *args: Any, unroll: int | bool | None = None, **kwargs: Any
    ) -> tuple[Any, Any]: ...

    def fold_via(
        self, fn: Callable[..., Any], *, unroll: int | bool | None = None
    ) -> Callable[..., Any]: ...

    def scan_via(
        self, fn: Callable[..., Any], *, unroll: int | bool | None = None
    ) -> Callable[..., Any]: ...

    def vmap_via(self, fn: Callable[..., Any]) -> Callable[..., Any]: ...

    def unstacked(self) -> Sequence[M_co]: ...


# ------------------------------------------------------------------------------ helpers

_NO_CHECKPOINT = ScanCheckpointPolicy.from_bool_or_str(False)
"""The default policy (``gradient_checkpointing=False``): store everything, recompute nothing."""


def _describe(axes) -> str:
    return "(" + ", ".join(f"{a.name}={a.size}" for a in axes) + ")"


def _is_named(x: Any) -> bool:
    return isinstance(x, NamedArray)


def _policy(
    owner: str, gradient_checkpointing: ScanCheckpointSpec, prevent_cse: bool | None
) -> ScanCheckpointPolicy:
    policy = ScanCheckpointPolicy._mk(gradient_checkpointing)
    if prevent_cse is not None:
        warnings.warn(
            f"{owner}.init: prevent_cse is deprecated (as in Haliax); pass "
            "ScanCheckpointPolicy(prevent_cse=...) as gradient_checkpointing instead",
            DeprecationWarning,
            stacklevel=3,
        )
        policy = dataclasses.replace(policy, prevent_cse=prevent_cse)
    return policy


def _check_block(owner: str, block: Any) -> Axis:
    if not isinstance(block, Axis):
        raise TypeError(
            f"{owner}: Block must be an Axis (its size is the number of layers), got {block!r}"
        )
    return block


def _coerce_checkpointing(layers: Any) -> None:
    """Turns a frozen layer stack's ``gradient_checkpointing`` spec into its policy."""
    if not isinstance(layers.gradient_checkpointing, ScanCheckpointPolicy):
        object.__setattr__(
            layers,
            "gradient_checkpointing",
            ScanCheckpointPolicy._mk(layers.gradient_checkpointing),
        )


def _init_fn(owner: str, mod: Any) -> Callable[..., Any]:
    init = getattr(mod, "init", None)
    if callable(init):
        return init
    if callable(mod):
        return mod
    raise TypeError(
        f"{owner}.init: {mod!r} has no init method (pass the layer class, whose init builds one layer)"
    )


def _normalize_unroll(unroll: int | bool | None, n: int) -> int:
    """``None``/``False`` -> 1, ``True`` -> every layer, an int >= 1 as is."""
    if unroll is None:
        return 1
    if isinstance(unroll, bool):
        return max(n, 1) if unroll else 1
    k = int(unroll)
    if k < 1:
        raise ValueError(f"unroll must be >= 1 (or a bool), got {unroll!r}")
    return k


def _slice_layer(block: Axis, i: int, x: Any) -> Any:
    """Layer ``i``'s part of one argument leaf (the rule in the module docstring)."""
    if isinstance(x, NamedArray):
        names = x._names
        if block.name not in names:
            return x
        at = names.index(block.name)
        if x.axes[at].size != block.size:
            raise ValueError(
                f"an argument has the layer axis {block.name!r} with size {x.axes[at].size} "
                f"(axes {_describe(x.axes)}), the stack has {block.size} layers"
            )
        return NamedArray._new(x.array[(slice(None),) * at + (i,)], x.axes[:at] + x.axes[at + 1 :])
    if is_jax_array_like(x) and jnp.ndim(x) >= 1:
        if x.shape[0] != block.size:
            raise ValueError(
                f"a plain array argument has leading dimension {x.shape[0]}, the stack over "
                f"{block.name!r} has {block.size} layers"
            )
        return x[i]
    return x


def _slice_tree(block: Axis, i: int, tree: Any) -> Any:
    return jax.tree.map(functools.partial(_slice_layer, block, i), tree, is_leaf=_is_named)


def _stack_outputs(block: Axis, outs: list[Any]) -> Any:
    """Stacks per-layer outputs the way ``hax.scan`` does: named arrays get ``Block`` first."""

    def stack(*leaves):
        first = leaves[0]
        if isinstance(first, NamedArray):
            return NamedArray._new(jnp.stack([x.array for x in leaves]), (block, *first.axes))
        if is_jax_array_like(first):
            return jnp.stack(leaves)
        return leaves[-1]

    return jax.tree.map(stack, *outs, is_leaf=_is_named)


def _pair(owner: str, result: Any) -> tuple[Any, Any]:
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise ValueError(
            f"{owner}.scan: each block must return a pair (carry, output), got "
            f"{type(result).__name__}; use fold for blocks that return only the carry"
        )
    return result[0], result[1]


# ------------------------------------------------------------------------------ Stacked


@module
class Stacked(Generic[M]):
    """A stack of ``Block.size`` identical layers run by ``scan`` over the ``Block`` axis.

    Attributes:
      stacked: one layer whose arrays carry the extra leading ``Block`` axis (named
        arrays) or leading dimension (plain arrays).
      Block: the layer axis (static).
      gradient_checkpointing: the ``ScanCheckpointPolicy`` of each step (static); a bool
        or shorthand string given here is turned into one.
    """

    stacked: M
    Block: Axis = jtree.field(static=True)  # noqa: N815 - Haliax's name
    gradient_checkpointing: ScanCheckpointPolicy = jtree.field(static=True, default=_NO_CHECKPOINT)

    def __post_init__(self):
        _check_block("Stacked", self.Block)
        _coerce_checkpointing(self)

    @classmethod
    def init(
        cls,
        Block: Axis,  # noqa: N803 - Haliax's name
        module: Any,
        *,
        gradient_checkpointing: ScanCheckpointSpec = False,
        prevent_cse: bool | None = None,
    ) -> ModuleInit[Stacked]:
        """Curried constructor: ``Stacked.init(Block, Layer)(*args, **kwargs)``.

        The returned function calls ``Layer.init(*args, **kwargs)`` once per layer under
        ``hax.vmap`` over ``Block``: arrays in the arguments are split per layer (pass
        ``key=jax.random.split(key, Block.size)``), everything else is shared.

        Args:
          Block: the layer axis; its size is the number of layers.
          module: the layer class (anything with an ``init``), or a function building one.
          gradient_checkpointing: a ``ScanCheckpointPolicy``, or ``True`` (recompute each
            layer's internals), ``False`` (store everything), "offload", "recompute",
            "full", "save_all" or "nested".
          prevent_cse: deprecated; set it on the policy.

        Raises:
          TypeError: if ``Block`` is not an ``Axis`` or ``module`` cannot build a layer.
          ValueError: on an unknown checkpoint shorthand.
        """
        Block = _check_block("Stacked.init", Block)  # noqa: N806 - Haliax's name
        policy = _policy("Stacked", gradient_checkpointing, prevent_cse)
        make = _init_fn("Stacked", module)

        def build(*args, **kwargs) -> Stacked:
            return cls(hof.vmap(make, Block)(*args, **kwargs), Block, policy)

        if isinstance(module, type):
            functools.update_wrapper(build, module, updated=())
        return build

    # -- applying the stack ----------------------------------------------------------------

    def scan(self, init: Any, *args: Any, unroll: int | bool | None = None, **kwargs: Any):
        """``carry, out = block(carry, *args, **kwargs)`` for each layer, as a ``hax.scan``.

        Returns:
          ``(carry, outs)``: the last carry, and every layer's ``out`` stacked along
          ``Block`` (named arrays get ``Block`` as their first axis).

        Raises:
          ValueError: if a block does not return a pair.
        """

        def step(carry, block, *a, **k):
            return _pair("Stacked", block(carry, *a, **k))

        return self._scan(step, unroll)(init, *args, **kwargs)

    def fold(self, init: Any, *args: Any, unroll: int | bool | None = None, **kwargs: Any):
        """``carry = block(carry, *args, **kwargs)`` for each layer; returns the last carry."""

        def step(carry, block, *a, **k):
            return block(carry, *a, **k)

        return self._fold(step, unroll)(init, *args, **kwargs)

    def fold_via(self, fn: Callable[..., Any], *, unroll: int | bool | None = None):
        """A fold with ``carry = fn(block, carry, *args, **kwargs)`` (e.g. an unbound method).

        Returns:
          ``folded(init, *args, **kwargs) -> carry``.
        """

        def step(carry, block, *a, **k):
            return fn(block, carry, *a, **k)

        return self._fold(step, unroll)

    def scan_via(self, fn: Callable[..., Any], *, unroll: int | bool | None = None):
        """A scan with ``carry, out = fn(block, carry, *args, **kwargs)``.

        Returns:
          ``scanned(init, *args, **kwargs) -> (carry, outs)``.
        """

        def step(carry, block, *a, **k):
            return _pair("Stacked", fn(block, carry, *a, **k))

        return self._scan(step, unroll)

    def vmap_via(self, fn: Callable[..., Any]):
        """Applies ``fn(block, *args, **kwargs)`` to every layer independently (``hax.vmap``).

        Returns:
          ``mapped(*args, **kwargs)``, whose named results get ``Block`` as first axis.
        """

        def per_layer(block, *a, **k):
            return fn(block, *a, **k)

        def mapped(*args, **kwargs):
            return hof.vmap(per_layer, self.Block)(self.stacked, *args, **kwargs)

        return mapped

    def vmap(self, *args: Any, **kwargs: Any):
        """Calls every layer on the same arguments in parallel: ``block(*args, **kwargs)``."""
        return self.vmap_via(lambda block, *a, **k: block(*a, **k))(*args, **kwargs)

    def _scan(self, step: Callable[..., Any], unroll: int | bool | None):
        scanned = hof.scan(
            step,
            self.Block,
            remat=self.gradient_checkpointing,
            unroll=_normalize_unroll(unroll, self.Block.size),
        )

        def run(init, *args, **kwargs):
            return scanned(init, self.stacked, *args, **kwargs)

        return run

    def _fold(self, step: Callable[..., Any], unroll: int | bool | None):
        folded = hof.fold(
            step,
            self.Block,
            remat=self.gradient_checkpointing,
            unroll=_normalize_unroll(unroll, self.Block.size),
        )

        def run(init, *args, **kwargs):
            return folded(init, self.stacked, *args, **kwargs)

        return run

    # -- looking at single layers ---------------------------------------------------------

    def unstacked(self) -> Sequence[M]:
        """The ``Block.size`` layers as separate modules (for logging, export, ``BlockSeq``).

        Raises:
          ValueError: if an array of the stack lacks the layer axis / dimension.
        """
        n = self.Block.size

        def check(x):
            if isinstance(x, NamedArray) and self.Block.name not in x._names:
                raise ValueError(
                    f"Stacked.unstacked: an array of the stack has axes {_describe(x.axes)} "
                    f"without the layer axis {self.Block.name!r}"
                )
            if is_jax_array_like(x) and not isinstance(x, NamedArray) and jnp.ndim(x) == 0:
                raise ValueError(
                    f"Stacked.unstacked: a 0-d plain array has no leading layer dimension "
                    f"({self.Block.name!r} has {n} layers)"
                )
            return x

        jax.tree.map(check, self.stacked, is_leaf=_is_named)
        return tuple(_slice_tree(self.Block, i, self.stacked) for i in range(n))

    def get_layer(self, index: int) -> M:
        """Layer ``index`` as a module of its own (its slice of every stacked array).

        Args:
          index: The layer, ``0 <= index < Block.size`` (negative counts from the end).

        Raises:
          IndexError: if ``index`` is out of range.
        """
        n = self.Block.size
        if not -n <= index < n:
            raise IndexError(f"Stacked.get_layer: layer {index} of {n} ({self.Block.name!r})")
        return _slice_tree(self.Block, index % n, self.stacked)

    def _state_dict_key_map(self) -> dict[str, str | None]:
        """State-dict keys skip the ``stacked`` level: ``<prefix>.<i>.<param>`` per layer."""
        return {"stacked": None}


# ------------------------------------------------------------------------------ BlockSeq


@module
class BlockSeq(Generic[M]):
    """The unrolled twin of ``Stacked``: layers in a Python sequence, applied in a loop.

    ``fold``/``scan``/``*_via`` give the same results as ``Stacked``'s (arguments are split
    per layer by the same rule); each call of a block runs under ``gradient_checkpointing``
    like one ``Stacked`` step. Blocks need not be identical.

    Attributes:
      blocks: the layers, first applied first.
      Block: the layer axis (static); ``Block.size == len(blocks)``.
      gradient_checkpointing: the policy of each block call (static).
    """

    blocks: Sequence[M]
    Block: Axis = jtree.field(static=True)  # noqa: N815 - Haliax's name
    gradient_checkpointing: ScanCheckpointPolicy = jtree.field(static=True, default=_NO_CHECKPOINT)

    def __post_init__(self):
        _check_block("BlockSeq", self.Block)
        object.__setattr__(self, "blocks", tuple(self.blocks))
        if len(self.blocks) != self.Block.size:
            raise ValueError(f"BlockSeq: {len(self.blocks)} blocks for the layer axis {self.Block}")
        _coerce_checkpointing(self)

    @classmethod
    def init(
        cls,
        Block: Axis,  # noqa: N803 - Haliax's name
        module: Any,
        *,
        gradient_checkpointing: ScanCheckpointSpec = False,
        prevent_cse: bool | None = None,
    ) -> ModuleInit[BlockSeq]:
        """Curried constructor, as ``Stacked.init``: ``Layer.init`` is called once per layer
        with that layer's slice of the arguments."""
        Block = _check_block("BlockSeq.init", Block)  # noqa: N806 - Haliax's name
        policy = _policy("BlockSeq", gradient_checkpointing, prevent_cse)
        make = _init_fn("BlockSeq", module)

        def build(*args, **kwargs) -> BlockSeq:
            blocks = []
            for i in range(Block.size):
                a, k = _slice_tree(Block, i, (args, kwargs))
                blocks.append(make(*a, **k))
            return cls(tuple(blocks), Block, policy)

        if isinstance(module, type):
            functools.update_wrapper(build, module, updated=())
        return build

    @property
    def _names(self) -> tuple[str, str]:
        kind = type(self.blocks[0]).__name__ if self.blocks else "block"
        base = f"BlockSeq[{self.Block.name}, {kind}]"
        return f"{base}.carry", f"{base}.inputs"

    def _step(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn(carry, block, *a, **k)`` with the carry/inputs tagged and the policy applied."""
        carry_name, input_name = self._names

        def tagged(carry, block, *a, **k):
            carry = tree_checkpoint_name(carry, carry_name)
            a, k = tree_checkpoint_name((a, k), input_name)
            return fn(carry, block, *a, **k)

        return self.gradient_checkpointing.checkpoint(carry_name, input_name, tagged)

    def _run(self, fn: Callable[..., Any], scan: bool, init: Any, args: tuple, kwargs: dict):
        step = self._step(fn)
        carry = init
        outs = []
        for i, block in enumerate(self.blocks):
            a, k = _slice_tree(self.Block, i, (args, kwargs))
            result = step(carry, block, *a, **k)
            if scan:
                carry, out = _pair("BlockSeq", result)
                outs.append(out)
            else:
                carry = result
        if not scan:
            return carry
        return carry, (_stack_outputs(self.Block, outs) if outs else None)

    def scan(self, init: Any, *args: Any, unroll: int | bool | None = None, **kwargs: Any):
        """As ``Stacked.scan`` (``unroll`` is accepted; the loop is always unrolled)."""
        _normalize_unroll(unroll, self.Block.size)
        return self._run(lambda c, b, *a, **k: b(c, *a, **k), True, init, args, kwargs)

    def fold(self, init: Any, *args: Any, unroll: int | bool | None = None, **kwargs: Any):
        """As ``Stacked.fold``."""
        _normalize_unroll(unroll, self.Block.size)
        return self._run(lambda c, b, *a, **k: b(c, *a, **k), False, init, args, kwargs)

    def fold_via(self, fn: Callable[..., Any], *, unroll: int | bool | None = None):
        """As ``Stacked.fold_via``: ``carry = fn(block, carry, *args, **kwargs)``."""
        _normalize_unroll(unroll, self.Block.size)

        def run(init, *args, **kwargs):
            return self._run(lambda c, b, *a, **k: fn(b, c, *a, **k), False, init, args, kwargs)

        return run

    def scan_via(self, fn: Callable[..., Any], *, unroll: int | bool | None = None):
        """As ``Stacked.scan_via``: ``carry, out = fn(block, carry, *args, **kwargs)``."""
        _normalize_unroll(unroll, self.Block.size)

        def run(init, *args, **kwargs):
            return self._run(lambda c, b, *a, **k: fn(b, c, *a, **k), True, init, args, kwargs)

        return run

    def vmap_via(self, fn: Callable[..., Any]):
        """As ``Stacked.vmap_via``: ``fn(block, *args, **kwargs)`` per layer, results stacked."""

        def run(*args, **kwargs):
            outs = []
            for i, block in enumerate(self.blocks):
                a, k = _slice_tree(self.Block, i, (args, kwargs))
                outs.append(fn(block, *a, **k))
            return _stack_outputs(self.Block, outs)

        return run

    def vmap(self, *args: Any, **kwargs: Any):
        """As ``Stacked.vmap``: every block called on (its slice of) the same arguments."""
        return self.vmap_via(lambda block, *a, **k: block(*a, **k))(*args, **kwargs)

    def unstacked(self) -> Sequence[M]:
        """The blocks."""
        return self.blocks

    def get_layer(self, index: int) -> M:
        """Block ``index`` (as ``Stacked.get_layer``).

        Raises:
          IndexError: if ``index`` is out of range.
        """
        n = len(self.blocks)
        if not -n <= index < n:
            raise IndexError(f"BlockSeq.get_layer: block {index} of {n} ({self.Block.name!r})")
        return self.blocks[index]

    def _state_dict_key_map(self) -> dict[str, str | None]:
        """State-dict keys skip the ``blocks`` level: ``<prefix>.<i>.<param>`` per layer."""
        return {"blocks": None}

"""``ScanCheckpointPolicy``: which values a scanned block keeps for its backward pass.

A scan over blocks (``hax.scan``, ``hax.fold``, ``hax.nn.Stacked``) passes a *carry* from
block to block and feeds each block an *input* slice. Without checkpointing every block
intermediate is stored for the gradient; a policy here says what to keep (carries,
inputs, named internals), what to move to host memory, and what to recompute. The
carries and inputs are tagged with ``tree_checkpoint_name`` under the names the scan
passes to ``checkpoint``, so JAX's name-based policies can pick them out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Literal

import jax

from jaxcore.named.jax_utils import filter_checkpoint

__all__ = ["ScanCheckpointPolicy", "ScanCheckpointSpec"]

_SaveSpec = bool | Literal["offload"]


@dataclasses.dataclass(frozen=True)
class ScanCheckpointPolicy:
    """A gradient-checkpoint policy for the blocks of a scan.

    Attributes:
      save_carries: keep each block's input carry (True), move it to host memory
        ("offload"), or recompute it (False).
      save_inputs: the same for each block's non-carry inputs.
      save_block_internals: keep every intermediate of a block (True), none (False) or only
        those tagged with the listed ``checkpoint_name`` names.
      offload_block_internals: names of block intermediates to move to host memory.
      prevent_cse: passed to ``jax.checkpoint``.
      disable: no checkpointing at all (everything is stored).
      simple: plain ``jax.checkpoint`` of each block (keep only block inputs and carries).
      nested: scan in ``k`` outer blocks, checkpointing each (O(sqrt N) memory when
        ``k ~ sqrt(N)``); True picks the divisor of the length closest to its square root.
    """

    save_carries: _SaveSpec = True
    save_inputs: _SaveSpec = False
    save_block_internals: bool | list[str] = False
    offload_block_internals: list[str] = dataclasses.field(default_factory=list)
    prevent_cse: bool = False
    disable: bool = False
    simple: bool = False
    nested: bool | int = False

    @staticmethod
    def from_bool_or_str(remat_policy: bool | str) -> ScanCheckpointPolicy:
        """Builds a policy from Haliax's shorthands.

        ``True``: checkpoint each block (recompute internals); ``False`` or "save_all":
        store everything; "offload": offload carries and inputs to the host; "recompute"
        or "full": recompute everything; "nested": nested remat.

        Raises:
          ValueError: on any other value.
        """
        if remat_policy is True:
            return ScanCheckpointPolicy(simple=True)
        if remat_policy is False:
            return ScanCheckpointPolicy(
                save_carries=True, save_inputs=True, save_block_internals=True, disable=True
            )
        if remat_policy == "offload":
            return ScanCheckpointPolicy(save_carries="offload", save_inputs="offload")
        if remat_policy in ("recompute", "full"):
            return ScanCheckpointPolicy(save_carries=False, save_inputs=False)
        if remat_policy == "save_all":
            return ScanCheckpointPolicy(
                save_carries=True, save_inputs=True, save_block_internals=True
            )
        if remat_policy == "nested":
            return ScanCheckpointPolicy(nested=True)
        raise ValueError(
            f"Invalid checkpoint policy {remat_policy!r}: expected a ScanCheckpointPolicy, True, False, "
            "'offload', 'recompute', 'full', 'save_all' or 'nested'"
        )

    @staticmethod
    def _mk(remat_policy: ScanCheckpointSpec) -> ScanCheckpointPolicy:
        if isinstance(remat_policy, ScanCheckpointPolicy):
            return remat_policy
        return ScanCheckpointPolicy.from_bool_or_str(remat_policy)

    def checkpoint(self, carry_name: str, input_name: str, fn: Callable) -> Callable:
        """Wraps a scan body ``fn`` so that its backward pass follows this policy."""
        if self.disable:
            return fn
        if self.simple:
            return filter_checkpoint(fn, prevent_cse=self.prevent_cse)
        return filter_checkpoint(
            fn, policy=self._to_jax_policy(carry_name, input_name), prevent_cse=self.prevent_cse
        )

    def _to_jax_policy(self, carry_name: str, input_name: str):
        save: list[str] = []
        offload: list[str] = []
        remat: list[str] = []
        for what, name in ((self.save_inputs, input_name), (self.save_carries, carry_name)):
            if what is True:
                save.append(name)
            elif what == "offload":
                offload.append(name)
            elif what is False:
                remat.append(name)
            else:
                raise ValueError(
                    f"ScanCheckpointPolicy: expected True, False or 'offload', got {what!r}"
                )
        if isinstance(self.save_block_internals, Sequence) and not isinstance(
            self.save_block_internals, str
        ):
            save.extend(self.save_block_internals)
        offload.extend(self.offload_block_internals)
        if offload:
            if self.save_block_internals is True:
                raise ValueError(
                    "ScanCheckpointPolicy: cannot save all block internals and offload too; list the names to save"
                )
            return jax.checkpoint_policies.save_and_offload_only_these_names(
                names_which_can_be_saved=save,
                names_which_can_be_offloaded=offload,
                offload_src="device",
                offload_dst="pinned_host",
            )
        if self.save_block_internals is True:
            return jax.checkpoint_policies.save_anything_except_these_names(*remat)
        if save:
            return jax.checkpoint_policies.save_only_these_names(*save)
        return None  # jax.checkpoint's default: save nothing, recompute everything


ScanCheckpointSpec = (
    ScanCheckpointPolicy | bool | Literal["offload", "recompute", "full", "save_all", "nested"]
)
"""A policy, or one of the shorthands ``ScanCheckpointPolicy.from_bool_or_str`` accepts."""

"""What the tensor-parallel adapters share: the input side of a column-parallel lm_head, and the
one reduction of a per-token loss a vocab-parallel head returns.

A column-parallel layer hands every rank the same hidden states and sums their gradient over the
group in backward (Megatron's `copy_to_tensor_model_parallel_region`; PyTorch's ColwiseParallel
does it by redistributing the Replicate input's Partial gradient). A peer whose head leaves each
rank its shard's part of dL/dh (verl's) relies on that layer; a PyTorch user writing the logits
shard by hand (`hidden @ weight_shard.T` before `loss_parallel`) needs it too. The vocab-parallel
kernels' contracts want the whole gradient on every rank, so the adapter adds what the trainer's
layer would.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ligerbench.suites.common.rounding import backward_through


def summed_over_group(hidden: torch.Tensor, group) -> torch.Tensor:
    """`hidden`, whose backward sums the gradient over `group`, in float32, rounded once to the
    input's dtype: the adapter adds one rounding, so a 16-bit error in the sum is never ours to pin
    on the peer. `group` may be a ProcessGroup or None (the default group; a single process when
    torch.distributed is not initialized), or a simulated one (tests)."""

    def summed(grad):
        from ligerbench.kernels.vocab_parallel_cross_entropy import all_reduce_

        return all_reduce_(grad.float().contiguous(), group).to(grad.dtype)

    return backward_through(hidden, summed)


def default_group(group):
    """`group`, or the default group where the harness passed None for it under torch.distributed:
    for a peer that reads None as "no tensor parallelism" (verl) rather than as torch.distributed's
    default group."""
    if group is None and dist.is_available() and dist.is_initialized():
        return dist.group.WORLD
    return group


def reduced(per_token: torch.Tensor, target: torch.Tensor, ignore_index: int, reduction: str) -> torch.Tensor:
    """A per-token loss (0 on ignored rows) reduced as F.cross_entropy reduces it: the mean over
    the counted rows, divided on the device (no host sync), or the sum, or as is."""
    if reduction == "none":
        return per_token
    total = per_token.sum()
    if reduction == "sum":
        return total
    return total / (target != ignore_index).sum().clamp(min=1)


def equal_shards(case) -> str | None:
    """The refusal of a peer that puts rank r's vocabulary at r * V_local (equal shards)."""
    world = case.get("world", 0)
    if world and case.get("v", 0) % world:
        return (
            f"takes equal shards (rank r's vocabulary starts at r * V / world): V={case.get('v')} over {world} "
            "ranks; ours runs uneven shards"
        )
    return None

"""How the loss patch (kernels/hf.py) meets a parallelised model: FSDP2 and tensor parallelism.

  call_as_forward   FSDP2: the fused loss runs as lm_head's forward, so that FSDP2's hooks gather
                    lm_head's weight (or a tied weight's owner) around it.
  vocab_shard       tensor parallelism: the shard, group and first global row of a column-parallel
                    lm_head's weight, for the vocab-parallel fused kernel.
  vocab_sharded_head  which of the two a model's lm_head needs now: its weight a tensor-parallel
                    shard (TP alone, or TP under FSDP2 with lm_head in an enclosing unit), or a
                    weight that is whole, or made whole by lm_head's own call (FSDP2).
  under_fsdp, is_dtensor, replicated_local: what tells them apart, and the local tensor of
                    replicated hidden states.

Imports torch.distributed only inside the functions: a torch without it still runs the
single-process patch.
"""

from __future__ import annotations

import torch


def is_dtensor(t) -> bool:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # a torch without DTensor
        return False
    return isinstance(t, DTensor)


def call_as_forward(module: torch.nn.Module, forward, *args):
    """`module(*args)` with `forward` standing in for the module's forward for this one call.

    The fused loss reads lm_head's weight; calling the module (rather than reading
    `model.lm_head.weight` from outside) runs the module's hooks around it. Under FSDP2 with
    lm_head its own unit, those gather the weight before (once per step, not per chunk: the
    kernel gets the whole weight), reshard it after, and gather again / reduce-scatter its
    gradient in backward; read from outside, the weight is still sharded (a DTensor, and
    `aten.mm.out got mixed torch.Tensor and DTensor`). With tied embeddings the weight is owned
    by the unit that holds the embedding (the root, or a unit grouping embedding and lm_head):
    then it is gathered there and lm_head's own call adds nothing. Forward hooks on lm_head see
    the loss as its output during this call. The instance attribute is removed in `finally`."""
    if "forward" in vars(module):
        raise RuntimeError(f"{type(module).__name__} instance already has a forward of its own; nest no patches")
    module.forward = forward
    try:
        return module(*args)
    finally:
        del module.forward


def vocab_sharded_head(model: torch.nn.Module) -> bool:
    """Whether the loss must take lm_head's weight as a tensor-parallel vocab shard (vocab_shard),
    as the model's forward sees the weight now, rather than whole through lm_head's call.

    Its weight is a DTensor in three cases, which DTensor's layout alone cannot tell apart (a TP
    shard and an FSDP2 shard are both Shard(0) over a 1-D mesh):
      TP alone (no FSDP2 in the model): the shard, for good;
      FSDP2 with lm_head a unit of its own (fully_shard(lm_head), or a list holding it: either
        makes lm_head an FSDPModule): sharded until lm_head's call gathers it; with TP composed
        under that unit, still the TP shard inside the call, which the fused loss refuses there;
      FSDP2 x TP with lm_head in an enclosing unit (the root, as torchtitan's 2-D recipe puts
        it): that unit's forward, running now, has gathered the dp dim; the TP shard is left,
        a DTensor on the tp sub-mesh.
    A tied weight under FSDP2 (the embedding's) is never taken for a TP shard: owned by the
    embedding's unit it can be an FSDP2 shard here, and summing a loss over the dp ranks'
    different tokens would be silently wrong; lm_head's call then finds it (or refuses it)."""
    head = model.lm_head
    if not is_dtensor(head.weight):
        return False
    if not under_fsdp(model):
        return True
    from torch.distributed.fsdp import FSDPModule

    tied = head.weight is model.get_input_embeddings().weight
    return not isinstance(head, FSDPModule) and not tied


def vocab_shard(head: torch.nn.Module):
    """(weight shard, bias shard or None, process group, vocab_start) of an lm_head whose weight
    [V, H] is a DTensor sharded on the vocab (Shard(0)) over a 1-D mesh, as ColwiseParallel makes
    it (its bias, if any, Shard(0) on the same mesh). Anything else is refused (ValueError). On a
    2-D mesh under FSDP2, read inside the forward of the unit that owns lm_head: that unit has
    gathered the dp dim, and the weight is the shard on the tp sub-mesh, whose group (the tp
    group, not the default one) and coordinate place it: inside the tp group of ranks {2, 3},
    rank 2 holds the first shard.

    vocab_start comes from the DTensor's layout, not from rank * local width: torch's Shard(0)
    gives the first ranks ceil(V / world) rows and the last ones fewer (or none), so shards are
    uneven whenever world does not divide V. It is read with compute_local_shape_and_global_offset
    (torch.distributed.tensor._utils, the function distributed checkpointing places shards with;
    private, but there with the same (global_shape, mesh, placements) call since
    torch.distributed.tensor became public in 2.5; run here on 2.13): no collective and no host
    sync. The local width it predicts must be the shard's (else RuntimeError: torch's layout
    rule changed under us). Where the import fails (a torch that moved it) vocab_start is None
    and the kernel derives it from one all_gather of the shard widths; either way the kernel
    checks that the shards tile [0, V)."""
    from torch.distributed.tensor import Shard

    weight, bias = head.weight, head.bias
    mesh, placements = weight.device_mesh, tuple(weight.placements)
    if mesh.ndim != 1 or len(placements) != 1 or type(placements[0]) is not Shard or placements[0].dim != 0:
        raise ValueError(
            f"lm_head's weight is a DTensor placed {placements} on a {mesh.ndim}-D mesh: the fused patch "
            "takes a column-parallel lm_head only, the weight sharded on the vocab (Shard(0)) over a 1-D mesh"
        )
    local = weight.to_local()
    if bias is not None and not (
        is_dtensor(bias) and bias.device_mesh == mesh and tuple(bias.placements) == placements
    ):
        raise ValueError("lm_head's bias must be sharded like its weight (Shard(0) on the same mesh)")
    return local, None if bias is None else bias.to_local(), mesh.get_group(), _vocab_start(weight, local)


def _vocab_start(weight, local: torch.Tensor) -> int | None:
    """This rank's first global row of a Shard(0) DTensor (vocab_shard's docstring), or None."""
    try:
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    except ImportError:
        return None  # the kernel derives it: one all_gather of the widths
    shape, offset = compute_local_shape_and_global_offset(weight.shape, weight.device_mesh, weight.placements)
    if shape[0] != local.shape[0]:
        raise RuntimeError(f"torch's layout says {shape[0]} rows on this rank, the local shard has {local.shape[0]}")
    return int(offset[0])


def replicated_local(t):
    """The local tensor of a DTensor replicated on every mesh dim (differentiable); else ValueError."""
    from torch.distributed.tensor import Replicate

    if not all(isinstance(p, Replicate) for p in t.placements):
        raise ValueError(
            f"the hidden states are a DTensor placed {tuple(t.placements)}: the fused patch needs them replicated"
        )
    return t.to_local()


def under_fsdp(model: torch.nn.Module) -> bool:
    """Whether FSDP2 (fully_shard) wraps any part of the model: its sharded parameters are
    DTensors outside their unit's call, gathered inside it (call_as_forward)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # a torch without FSDP2
        return False
    return any(isinstance(m, FSDPModule) for m in model.modules())

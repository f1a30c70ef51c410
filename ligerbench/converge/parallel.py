"""Training a mini model on several ranks under a parallel plan, our kernels patched in, for
`converge --nproc N --parallel PLAN` (the checks: suites/converge/parallel.py).

    model = build(case)                                   # every rank, same seed: same weights
    wrapped, layout = apply_plan(model, "fsdp2_tp", world=4, device=dev)
    with patch_causal_lm(model, "flce") as patch:
        run, grads0 = train_parallel(model, wrapped, batches, plan="fsdp2_tp", layout=layout, lr=1e-2)

Plans (each rank runs one process of the default group):
  ddp    DistributedDataParallel; each rank its slice of every global batch.
  fsdp2  fully_shard on each decoder layer, on lm_head as its own unit (as large-model recipes
         wrap it) and on the root; each rank its slice of every global batch.
  tp     lm_head column-parallel (ColwiseParallel, output left a DTensor sharded on the vocab,
         which the `ce` patch hands to the vocab-parallel loss; `flce` hands lm_head's weight
         shard to the vocab-parallel fused kernel instead); the rest replicated (every rank
         computes it from the same inputs; the hidden states' gradient is all-reduced by the
         column-parallel layer, or by the fused kernel); every rank the same batch.
  fsdp2_tp          a 2-D mesh (dp, tp) of world / 2 x 2 ranks (`mesh_2d`): tp as above on the
         "tp" sub-mesh, FIRST (torchtitan's order: fully_shard then takes lm_head's DTensor
         weight and shards it further over dp, a 2-D DTensor), then fully_shard on the "dp"
         sub-mesh for each decoder layer and the root. Each dp replica its slice of every global
         batch, the two tp ranks of a replica the same slice. tp groups are neighbours: {0,1},
         {2,3}; inside {2,3} the group rank, not the global one, places a rank's vocab shard.
  fsdp2_tp_strided  the same on the mesh (tp, dp): tp groups {0,2}, {1,3}, where a vocab offset
         taken from the global rank, or from the global rank mod 2, is wrong too.
  Under both 2-D plans lm_head belongs to the root's unit, not a unit of its own: the root's
  forward gathers lm_head's weight over dp, leaving the tp shard (a DTensor on the tp sub-mesh,
  Shard(0)) that the patch hands to the vocab-parallel kernels as under tp. As its own unit,
  lm_head's weight would be whole only inside lm_head's call, and the fused loss cannot run as
  that call's forward: ColwiseParallel's output hook redistributes a DTensor, not a scalar loss.

Data parallel normalisation: the loss is the sum over this rank's counted targets divided by
the GLOBAL count (`num_items_in_batch`, all-reduced over ranks and accumulation micro-batches),
so the summed losses equal the mean over the whole batch. DDP and FSDP2 AVERAGE gradients over
ranks, so the loss is multiplied by the world size for backward (backward_scale): the gradient
is then exactly that of the single-process run on the whole batch. Under a 2-D plan "ranks" are
the dp replicas: the count is all-reduced over the dp group only (the two tp ranks of a replica
see the same tokens: summed over them, every token would count twice), and the scale is the dp
size (FSDP2 averages over dp; the tp ranks' gradients are already whole, the column-parallel
layer or the fused kernel summed the hidden states' over tp). Getting this wrong divides
the gradient by the world size twice (the planted bug in ligerbench/converge/mutants.py); Adam
is nearly blind to a gradient's scale, so that is judged on step 0's gradients.

Gradient accumulation: `accum` micro-batches per step and rank (gradient sync off on all but
the last: DDP's no_sync, FSDP2's set_requires_gradient_sync), one optimizer step. The count
above covers every micro-batch of the step: a mean taken per micro-batch and averaged over the
micro-batches and ranks weighs a micro-batch with few targets like one with many (the second
planted bug; it is what transformers' gradient accumulation did until late 2024).

`Normalisation` says how a step normalises (CORRECT is the above); the planted bugs of
ligerbench/converge/mutants.py are other Normalisations.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ligerbench.converge.data import IGNORE, Batch
from ligerbench.converge.train import BETAS, WEIGHT_DECAY, RunResult

PLANS: tuple[str, ...] = ("ddp", "fsdp2", "tp", "fsdp2_tp", "fsdp2_tp_strided")
DATA_PARALLEL = ("ddp", "fsdp2", "fsdp2_tp", "fsdp2_tp_strided")  # each replica its slice of the batch
MESH_2D = ("fsdp2_tp", "fsdp2_tp_strided")
TP_SIZE = 2  # the 2-D plans' tp width: the smallest whose groups hold a rank that is not its group's rank 0


def backward_scale(dp_size: int) -> float:
    """What the data-parallel loss is multiplied by for backward: DDP/FSDP2 average over the dp ranks."""
    return float(dp_size)


@dataclass(frozen=True)
class Normalisation:
    """How a data-parallel step normalises its loss. `scale(dp_size)`: what the loss is multiplied
    by for backward. `per_micro_batch`: each micro-batch's loss is the mean over its own counted
    targets, divided by the number of micro-batches (instead of the sum over the global count).
    `count_over_world`: the count all-reduced over every rank instead of the dp group (under a 2-D
    plan the tp ranks of a replica then count its tokens once each: a planted bug)."""

    scale: Callable[[int], float] = backward_scale
    per_micro_batch: bool = False
    count_over_world: bool = False


CORRECT = Normalisation()


@dataclass(frozen=True)
class Layout:
    """This rank's place in the data-parallel split: replica `dp_rank` of `dp_size` (each replica
    its slice of every global batch), `dp_group` the group counts and losses are summed over
    (None: the default group)."""

    dp_rank: int = 0
    dp_size: int = 1
    dp_group: dist.ProcessGroup | None = None


def full(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a DTensor (a collective: every rank calls it), or the tensor itself.
    A DTensor on a 2-D mesh is gathered one mesh dim at a time, outer first: asked for both at
    once, torch warns on every rank that it cannot merge the two all_gathers (the values are the
    same: a gather is exact)."""
    if not hasattr(t, "full_tensor"):
        return t
    from torch.distributed.tensor import Replicate

    for dim in range(t.device_mesh.ndim - 1):
        t = t.redistribute(placements=[Replicate() if d == dim else p for d, p in enumerate(t.placements)])
    return t.full_tensor()


def mesh_2d(plan: str, world: int, device_type: str):
    """The (dp, tp) DeviceMesh of a 2-D plan: tp groups of neighbouring ranks for fsdp2_tp, of
    ranks world / TP_SIZE apart for fsdp2_tp_strided (the mesh's outer dim is tp there)."""
    from torch.distributed.device_mesh import init_device_mesh

    if world % TP_SIZE or world < 2 * TP_SIZE:
        raise ValueError(f"--parallel {plan} takes a multiple of {TP_SIZE} ranks, at least {2 * TP_SIZE}: got {world}")
    dp = world // TP_SIZE
    if plan == "fsdp2_tp":
        return init_device_mesh(device_type, (dp, TP_SIZE), mesh_dim_names=("dp", "tp"))
    return init_device_mesh(device_type, (TP_SIZE, dp), mesh_dim_names=("tp", "dp"))


def _tp_lm_head(model: torch.nn.Module, mesh) -> None:
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    if model.lm_head.weight is model.model.embed_tokens.weight:
        raise ValueError("the tp plans shard lm_head alone: a model with tied embeddings is not supported")
    parallelize_module(model, mesh, {"lm_head": ColwiseParallel(use_local_output=False)})


def apply_plan(
    model: torch.nn.Module, plan: str, *, world: int, device: torch.device
) -> tuple[torch.nn.Module, Layout]:
    """Parallelise `model` (in place but for ddp); returns what to call (the DDP wrapper for ddp)
    and this rank's Layout."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    rank = dist.get_rank()
    if plan == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        ddp = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
        return ddp, Layout(rank, world)
    if plan == "fsdp2":
        mesh = init_device_mesh(device.type, (world,))
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model.lm_head, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model, Layout(rank, world)
    if plan == "tp":
        _tp_lm_head(model, init_device_mesh(device.type, (world,)))
        return model, Layout()
    if plan in MESH_2D:  # tp first, then fully_shard over dp; lm_head in the root's unit (module docstring)
        mesh = mesh_2d(plan, world, device.type)
        _tp_lm_head(model, mesh["tp"])
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
        dp = mesh["dp"]
        return model, Layout(dp.get_local_rank(), dp.size(), dp.get_group())
    raise ValueError(f"unknown parallel plan {plan!r}; choose from {', '.join(PLANS)}")


def counted_targets(batch: Batch) -> torch.Tensor:
    """Targets the loss counts: labels shifted by one (ForCausalLMLoss), != IGNORE."""
    return (batch.labels[..., 1:] != IGNORE).sum()


def micro_rows(n: int, layout: Layout, accum: int) -> list[slice]:
    """The global batch's rows of this rank's micro-batches: its replica's slice of the batch (all
    of it without data parallelism), in `accum` contiguous parts (torch.tensor_split's sizes,
    which differ by at most one). Slices, not index tensors: a CPU index into a batch on the GPU
    is a host-to-device copy, and a host sync, per micro-batch."""
    mine = torch.tensor_split(torch.arange(n), layout.dp_size)[layout.dp_rank]
    parts = torch.tensor_split(mine, accum)
    return [slice(int(part[0]), int(part[-1]) + 1) if len(part) else slice(0, 0) for part in parts]


def select(batch: Batch, rows: slice) -> Batch:
    return Batch(batch.input_ids[rows], batch.attention_mask[rows], batch.labels[rows], batch.lengths[rows])


@dataclass(frozen=True)
class Objective:
    """What a training step minimises, micro-batch by micro-batch:
    count(micro, rows, step)  the items its loss is normalised by (a tensor; summed over the
                              step's micro-batches and, under data parallelism, all-reduced);
    loss(wrapped, micro, rows, n_items, step)  the micro-batch's loss: its sum over its items
                              divided by n_items (None: tp without accumulation, its own mean).
    `rows` is the micro-batch's slice of the step's global batch (for per-row data such as an
    RL step's advantages)."""

    count: Callable[[Batch, slice, int], torch.Tensor]
    loss: Callable[[torch.nn.Module, Batch, slice, torch.Tensor | None, int], torch.Tensor]


def _causal_lm_loss(wrapped, micro: Batch, rows, n_items, step) -> torch.Tensor:
    inputs = micro.inputs()
    if n_items is not None:
        inputs["num_items_in_batch"] = n_items
    return wrapped(**inputs).loss


CAUSAL_LM = Objective(count=lambda micro, rows, step: counted_targets(micro), loss=_causal_lm_loss)


def _no_sync(wrapped, plan: str, last: bool):
    if last or plan not in DATA_PARALLEL:
        return contextlib.nullcontext()
    if plan == "ddp":
        return wrapped.no_sync()

    @contextlib.contextmanager
    def off():
        wrapped.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            wrapped.set_requires_gradient_sync(True)

    return off()


def train_parallel(
    model: torch.nn.Module,
    wrapped: torch.nn.Module,
    batches: list[Batch],
    *,
    plan: str,
    layout: Layout,
    lr: float,
    accum: int = 1,
    norm: Normalisation = CORRECT,
    on_step: Callable[[int, float], None] | None = None,
    objective: Objective = CAUSAL_LM,
) -> tuple[RunResult, dict[str, torch.Tensor]]:
    """AdamW over the global `batches` under `plan` (already applied: `wrapped`, this rank's
    `layout`); every rank calls it. Returns (losses of the GLOBAL batch per step, full final
    parameters, in RunResult) and the full parameter gradients of step 0 (after the ranks'
    reduction, before the update). `objective`: the causal LM loss, or another
    (suites/converge/rl.py's policy loss).

    No host sync per step unless `on_step` asks for each loss: the batches go to the device once,
    micro-batches are slices of them, the counts stay on the device, and the losses are read back
    together at the end."""
    device = next(model.parameters()).device
    model.train()
    # foreach=False: the tp plans mix DTensor (lm_head) and plain parameters, or DTensors on
    # different meshes, in one group
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=BETAS, weight_decay=WEIGHT_DECAY, foreach=False)
    dp = plan in DATA_PARALLEL
    count_group = None if norm.count_over_world else layout.dp_group
    totals: list[torch.Tensor] = []
    grads0: dict[str, torch.Tensor] = {}
    for step, batch in enumerate([b.to(device) for b in batches]):  # all moved before the first step
        picks = micro_rows(batch.input_ids.shape[0], layout, accum)
        micro = [select(batch, rows) for rows in picks]
        total = torch.zeros((), dtype=torch.float32, device=device)
        n_items = None
        if norm.per_micro_batch:  # each micro-batch its own mean (n_items None), then / accum
            pass
        elif dp or accum > 1:  # normalised by the count over every replica and micro-batch of the step
            n_items = sum(objective.count(m, rows, step) for m, rows in zip(micro, picks, strict=True))
            if dp:
                dist.all_reduce(n_items, group=count_group)
        for i, (m, rows) in enumerate(zip(micro, picks, strict=True)):
            with _no_sync(wrapped, plan, last=i == len(micro) - 1):
                loss = objective.loss(wrapped, m, rows, n_items, step)
                if norm.per_micro_batch:
                    loss = loss / len(micro)
                (loss * norm.scale(layout.dp_size) if dp else loss).backward()
            total += loss.detach().float()
        if dp:  # each replica's share of the global mean: their sum is the global loss
            dist.all_reduce(total, group=layout.dp_group)
            if norm.per_micro_batch:  # each replica logged a mean of its own: average them
                total /= layout.dp_size
        if step == 0:
            grads0 = {n: full(p.grad).detach().clone() for n, p in model.named_parameters() if p.grad is not None}
        opt.step()
        opt.zero_grad(set_to_none=True)
        totals.append(total)
        if on_step:
            on_step(step, float(total))
    losses = torch.stack(totals).tolist() if totals else []
    params = {n: full(p.detach()).clone() for n, p in model.named_parameters()}
    return RunResult(losses, params), grads0


@torch.no_grad()
def eval_logprobs_parallel(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    """train.eval_logprobs on a parallelised model: every rank runs the same batch (a collective
    under fsdp2 and the tp plans); vocab-sharded logits are gathered."""
    model.eval()
    b = batch.to(next(model.parameters()).device)
    logits = full(model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits)
    model.train()
    return torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)

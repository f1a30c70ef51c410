"""Training a mini model on several ranks under a parallel plan, our kernels patched in, for
`converge --nproc N --parallel PLAN` (the checks: suites/converge_parallel.py).

    model = build(case)                                   # every rank, same seed: same weights
    wrapped = apply_plan(model, "fsdp2", world=2, device=dev)
    with patch_causal_lm(model, "flce") as patch:
        run = train_parallel(model, wrapped, batches, plan="fsdp2", lr=1e-2)

Plans (each rank runs one process of the default group):
  ddp    DistributedDataParallel; each rank its slice of every global batch.
  fsdp2  fully_shard on each decoder layer, on lm_head as its own unit (as large-model recipes
         wrap it) and on the root; each rank its slice of every global batch.
  tp     lm_head column-parallel (ColwiseParallel, output left a DTensor sharded on the vocab,
         which the `ce` patch hands to the vocab-parallel loss; `flce` hands lm_head's weight
         shard to the vocab-parallel fused kernel instead); the rest replicated (every rank
         computes it from the same inputs; the hidden states' gradient is all-reduced by the
         column-parallel layer, or by the fused kernel); every rank the same batch.

Data parallel normalisation: the loss is the sum over this rank's counted targets divided by
the GLOBAL count (`num_items_in_batch`, all-reduced over ranks and accumulation micro-batches),
so the summed losses equal the mean over the whole batch. DDP and FSDP2 AVERAGE gradients over
ranks, so the loss is multiplied by the world size for backward (BACKWARD_SCALE): the gradient
is then exactly that of the single-process run on the whole batch. Getting this wrong divides
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

PLANS: tuple[str, ...] = ("ddp", "fsdp2", "tp")
DATA_PARALLEL = ("ddp", "fsdp2")


def backward_scale(world: int) -> float:
    """What the data-parallel loss is multiplied by for backward: DDP/FSDP2 average over ranks."""
    return float(world)


@dataclass(frozen=True)
class Normalisation:
    """How a data-parallel step normalises its loss. `scale(world)`: what the loss is multiplied
    by for backward. `per_micro_batch`: each micro-batch's loss is the mean over its own counted
    targets, divided by the number of micro-batches (instead of the sum over the global count)."""

    scale: Callable[[int], float] = backward_scale
    per_micro_batch: bool = False


CORRECT = Normalisation()


def full(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a DTensor (a collective: every rank calls it), or the tensor itself."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def apply_plan(model: torch.nn.Module, plan: str, *, world: int, device: torch.device) -> torch.nn.Module:
    """Parallelise `model` (in place for fsdp2/tp); returns what to call (the DDP wrapper for ddp)."""
    from torch.distributed.device_mesh import init_device_mesh

    if plan == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    mesh = init_device_mesh(device.type, (world,))
    if plan == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model.lm_head, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model
    if plan == "tp":
        from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

        if model.lm_head.weight is model.model.embed_tokens.weight:
            raise ValueError("the tp plan shards lm_head alone: a model with tied embeddings is not supported")
        parallelize_module(model, mesh, {"lm_head": ColwiseParallel(use_local_output=False)})
        return model
    raise ValueError(f"unknown parallel plan {plan!r}; choose from {', '.join(PLANS)}")


def counted_targets(batch: Batch) -> torch.Tensor:
    """Targets the loss counts: labels shifted by one (ForCausalLMLoss), != IGNORE."""
    return (batch.labels[..., 1:] != IGNORE).sum()


def micro_rows(n: int, rank: int, world: int, plan: str, accum: int) -> list[torch.Tensor]:
    """The global batch's row indices of this rank's micro-batches: its slice of the batch for
    data-parallel plans, all of it for tp, in `accum` contiguous parts (torch.tensor_split:
    sizes differ by at most one)."""
    mine = torch.arange(n)
    if plan in DATA_PARALLEL:
        mine = torch.tensor_split(mine, world)[rank]
    return list(torch.tensor_split(mine, accum))


def select(batch: Batch, idx: torch.Tensor) -> Batch:
    return Batch(batch.input_ids[idx], batch.attention_mask[idx], batch.labels[idx],
                 tuple(batch.lengths[j] for j in idx.tolist()))  # fmt: skip


@dataclass(frozen=True)
class Objective:
    """What a training step minimises, micro-batch by micro-batch:
    count(micro, rows, step)  the items its loss is normalised by (a tensor; summed over the
                              step's micro-batches and, under data parallelism, all-reduced);
    loss(wrapped, micro, rows, n_items, step)  the micro-batch's loss: its sum over its items
                              divided by n_items (None: tp without accumulation, its own mean).
    `rows` are the micro-batch's row indices in the step's global batch (for per-row data such
    as an RL step's advantages)."""

    count: Callable[[Batch, torch.Tensor, int], torch.Tensor]
    loss: Callable[[torch.nn.Module, Batch, torch.Tensor, torch.Tensor | None, int], torch.Tensor]


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
    lr: float,
    accum: int = 1,
    norm: Normalisation = CORRECT,
    on_step: Callable[[int, float], None] | None = None,
    objective: Objective = CAUSAL_LM,
) -> tuple[RunResult, dict[str, torch.Tensor]]:
    """AdamW over the global `batches` under `plan` (already applied: `wrapped`); every rank calls
    it. Returns (losses of the GLOBAL batch per step, full final parameters, in RunResult) and
    the full parameter gradients of step 0 (after the ranks' reduction, before the update).
    `objective`: the causal LM loss, or another (suites/converge_rl.py's policy loss)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    device = next(model.parameters()).device
    model.train()
    # foreach=False: the tp plan mixes DTensor (lm_head) and plain parameters in one group
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=BETAS, weight_decay=WEIGHT_DECAY, foreach=False)
    dp = plan in DATA_PARALLEL
    losses: list[float] = []
    grads0: dict[str, torch.Tensor] = {}
    for step, batch in enumerate(batches):
        picks = micro_rows(batch.input_ids.shape[0], rank, world, plan, accum)
        micro = [select(batch, idx) for idx in picks]
        total = torch.zeros((), dtype=torch.float32, device=device)
        n_items = None
        if norm.per_micro_batch:  # each micro-batch its own mean (n_items None), then / accum
            pass
        elif dp or accum > 1:  # normalised by the count over every rank and micro-batch of the step
            n_items = sum(objective.count(m, idx, step) for m, idx in zip(micro, picks, strict=True)).to(device)
            if dp:
                dist.all_reduce(n_items)
        for i, (m, idx) in enumerate(zip(micro, picks, strict=True)):
            with _no_sync(wrapped, plan, last=i == len(micro) - 1):
                loss = objective.loss(wrapped, m.to(device), idx, n_items, step)
                if norm.per_micro_batch:
                    loss = loss / len(micro)
                (loss * norm.scale(world) if dp else loss).backward()
            total += loss.detach().float()
        if dp:  # each rank's share of the global mean: their sum is the global loss
            dist.all_reduce(total)
            if norm.per_micro_batch:  # each rank logged a mean of its own: average them
                total /= world
        if step == 0:
            grads0 = {n: full(p.grad).detach().clone() for n, p in model.named_parameters() if p.grad is not None}
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(total))
        if on_step:
            on_step(step, losses[-1])
    params = {n: full(p.detach()).clone() for n, p in model.named_parameters()}
    return RunResult(losses, params), grads0


@torch.no_grad()
def eval_logprobs_parallel(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    """train.eval_logprobs on a parallelised model: every rank runs the same batch (a collective
    under fsdp2/tp); vocab-sharded logits are gathered."""
    model.eval()
    b = batch.to(next(model.parameters()).device)
    logits = full(model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits)
    model.train()
    return torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)

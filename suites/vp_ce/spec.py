"""The `vp_ce` kernel (vocab-parallel cross entropy) as the harness sees it.

A case is the GLOBAL problem of `ce` (suites/ce/spec.py draws it: logits [N, V], targets,
options) plus `case.world`, the ranks the vocab is split over, and `case.targets` ("edges": every
counted target on the first or last class of some shard). The float64 reference is `ce`'s, on the
whole problem in one process. `run` splits the logits (and the class weights) on the vocab dim,
`shard_bounds` deciding the split (uneven when V is not divisible by the world size; ranks past V
get empty shards), calls the provider on every rank's shard and puts the gradient shards back
together:
  - under torch.distributed (`verify --nproc N`, ligerbench/distributed/): this process is one
    rank, the world size must be the case's; the gradient shards and every rank's loss are
    all-gathered so that rank 0 (which writes the records) compares them all;
  - otherwise: the case's ranks are simulated in this process (ligerbench/distributed/simulated.py).
The loss compared is every rank's loss, stacked ([world, ...]): each must equal the truth.

A provider is called per rank as
    fn(logits_shard, target, *, group, vocab_start, class_weight_shard, ignore_index, reduction,
       label_smoothing, softcap, z_loss_scale, token_weight) -> loss | (loss, z_loss)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from ligerbench.cases import Case
from ligerbench.distributed.simulated import run_ranks
from ligerbench.problems import Outcome, as_handed, same_bits
from ligerbench.suites.ce import spec as ce

SIGNATURE = (
    "fn(logits_shard, target, *, group, vocab_start, class_weight_shard, ignore_index, reduction, "
    "label_smoothing, softcap, z_loss_scale, token_weight) -> loss | (loss, z_loss)"
)


def shard_bounds(v: int, world: int) -> list[tuple[int, int]]:
    """[lo, hi) of each rank: the first V % world ranks get one class more (torch.tensor_split)."""
    base, extra = divmod(v, world)
    bounds, lo = [], 0
    for r in range(world):
        hi = lo + base + (1 if r < extra else 0)
        bounds.append((lo, hi))
        lo = hi
    return bounds


def edge_classes(v: int, world: int) -> list[int]:
    """The first and last class of every non-empty shard."""
    return sorted({c for lo, hi in shard_bounds(v, world) if hi > lo for c in (lo, hi - 1)})


@dataclass
class VPProblem:
    base: ce.CEProblem  # the global problem
    world: int


def make_problem(case: Case, seed: int, device: torch.device) -> VPProblem:
    if case.world < 1:
        raise ValueError(f"vp_ce case {case.id} needs world >= 1")
    base = ce.make_problem(case, seed, device)
    base.target = place_targets(case, base.target, base.ignore_index)
    return VPProblem(base=base, world=case.world)


def place_targets(case: Case, target: torch.Tensor, ignore_index: int) -> torch.Tensor:
    """The case's targets: as drawn ("random"), or every counted one moved onto the first or
    last class of some shard ("edges"), in turn; ignored rows stay ignored."""
    if case.targets == "random":
        return target
    if case.targets != "edges":
        raise ValueError(f"unknown targets {case.targets!r}; expected random or edges")
    edges = torch.tensor(edge_classes(case.v, case.world), device=target.device)
    counted = target != ignore_index
    picked = edges[torch.arange(target.numel(), device=target.device) % len(edges)].reshape(target.shape)
    return torch.where(counted, picked, target)


def per_rank(outcome: Outcome, world: int, keys: tuple[str, ...] = ("loss", "z_loss")) -> Outcome:
    """The single-process outcome with `keys` (the loss and z-loss: what every rank returns
    whole) repeated once per rank."""
    values = dict(outcome.values)
    for k in keys:
        if k in values:
            values[k] = values[k].unsqueeze(0).expand(world, *values[k].shape)
    return Outcome(values=values, input_mutated=outcome.input_mutated)


def reference(problem: VPProblem) -> Outcome:
    """The float64 truth of the global problem, in this process."""
    return per_rank(ce.reference(problem.base), problem.world)


def eager_in_dtype(problem: VPProblem) -> Outcome:
    """PyTorch eager on the global problem in the case dtype: the tolerance yardstick."""
    return per_rank(ce.eager_in_dtype(problem.base), problem.world)


def textbook(problem: VPProblem) -> tuple[Outcome, ...]:
    """ce's textbook yardsticks on the global problem (ligerbench/tolerance.py)."""
    return tuple(per_rank(form, problem.world) for form in ce.textbook(problem.base))


def _forward(fn, problem: VPProblem, rank: int, group):
    """One rank's call: a fresh leaf copy of its shard, the provider's outputs."""
    p = problem.base
    lo, hi = shard_bounds(p.logits.shape[1], problem.world)[rank]
    x = p.logits[:, lo:hi].detach().clone().requires_grad_(True)
    before = x.detach().clone()
    w = None if p.weight is None else p.weight[lo:hi].clone()
    out = fn(
        x,
        p.target,
        group=group,
        vocab_start=lo,
        class_weight_shard=w,
        ignore_index=p.ignore_index,
        reduction=p.reduction,
        label_smoothing=p.label_smoothing,
        softcap=p.softcap,
        z_loss_scale=p.z_loss_scale,
        token_weight=p.token_weight,
    )
    loss, z = out if isinstance(out, tuple) else (out, None)
    return x, before, loss, z


def _backward(problem: VPProblem, x, before, loss, z) -> dict:
    loss.backward(as_handed(problem.base.upstream, dtype=loss.dtype).expand_as(loss))
    return {
        "loss": loss.detach().float(),
        "z_loss": None if z is None else z.detach().float(),
        "grad": None if x.grad is None else x.grad.detach().clone(),
        "mutated": not same_bits(x.detach(), before),
        "width": x.shape[1],
    }


def _outcome(problem: VPProblem, ranks: list[dict]) -> Outcome:
    dt = problem.base.logits.dtype
    values = {"loss": torch.stack([r["loss"] for r in ranks])}
    if all(r["z_loss"] is not None for r in ranks):
        values["z_loss"] = torch.stack([r["z_loss"] for r in ranks])
    if all(r["grad"] is not None for r in ranks):
        values["grad_logits"] = torch.cat([r["grad"].to(dt) for r in ranks], dim=1)
    else:
        values["grad_logits"] = None
    return Outcome(values=values, input_mutated=any(r["mutated"] for r in ranks))


class RanksOutOfStep(BaseException):
    """A collective failed or timed out under torch.distributed: the ranks can no longer be
    trusted to be in step, so the run stops here. A BaseException on purpose: the verify engine
    records ordinary exceptions as error rows and goes on to the next collective, which would
    wait for a rank that is gone."""


def _collective_failure(exc: BaseException) -> bool:
    dist_error = getattr(dist, "DistError", None)  # torch >= 2.2
    if dist_error is not None and isinstance(exc, dist_error):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(k in text for k in ("gloo", "nccl", "timed out", "connection"))


def run_vp(fn, problem: VPProblem) -> Outcome:
    if dist.is_available() and dist.is_initialized():
        try:
            return _run_distributed(fn, problem)
        except Exception as exc:
            if _collective_failure(exc):
                raise RanksOutOfStep(f"{type(exc).__name__}: {exc}") from exc
            raise
    forwards = run_ranks(problem.world, lambda rank, group: _forward(fn, problem, rank, group))
    # backward in this thread, rank after rank: vocab-parallel backward has no collective
    return _outcome(problem, [_backward(problem, *f) for f in forwards])


def _run_distributed(fn, problem: VPProblem) -> Outcome:
    """This process is one rank of the default group; every rank ends with every rank's results."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != problem.world:
        raise ValueError(f"the case is split over {problem.world} ranks but the group has {world}")
    mine = _backward(problem, *_forward(fn, problem, rank, None))
    dev = problem.base.logits.device
    n = problem.base.logits.shape[0]
    widths = [hi - lo for lo, hi in shard_bounds(problem.base.logits.shape[1], world)]
    # float32 travels on every backend (gloo has no bf16 collectives); bf16/fp16 convert exactly
    grad = mine["grad"] if mine["grad"] is not None else torch.full((n, mine["width"]), float("nan"), device=dev)
    padded = torch.zeros(n, max(widths), dtype=torch.float32, device=dev)
    padded[:, : grad.shape[1]] = grad.float()
    flags = torch.tensor(
        [float(mine["mutated"]), float(mine["grad"] is None), float(mine["z_loss"] is None)], device=dev
    )
    gathered = _gather(padded, world)
    all_flags = _gather(flags, world)
    losses = _gather(mine["loss"].float().reshape(mine["loss"].shape), world)
    zs = None
    if not bool(all_flags[:, 2].any()):
        zs = _gather(mine["z_loss"].float(), world)
    ranks = []
    for r in range(world):
        ranks.append(
            {
                "loss": losses[r],
                "z_loss": None if zs is None else zs[r],
                "grad": None if bool(all_flags[r, 1]) else gathered[r, :, : widths[r]],
                "mutated": bool(all_flags[r, 0]),
            }
        )
    return _outcome(problem, ranks)


def _gather(t: torch.Tensor, world: int) -> torch.Tensor:
    from ligerbench.kernels.vocab_parallel_cross_entropy import all_gather

    return all_gather(t, None)

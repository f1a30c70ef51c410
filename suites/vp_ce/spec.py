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

import dataclasses
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ligerbench.cases import Case
from ligerbench.problems import Outcome, as_handed, same_bits
from ligerbench.suites.ce import spec as ce
from ligerbench.suites.vp_ce.axes import SHARD_MASKED
from ligerbench.suites.vp_ce.mesh import Mesh, replicated, run_on_mesh

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
    world: int  # the tensor-parallel size
    mesh: Mesh  # how the ranks sit in the world (suites/vp_ce/mesh.py)
    handed: str = "shards"  # "gathered": every rank handed the whole logits (a refusal expected)


def make_problem(case: Case, seed: int, device: torch.device) -> VPProblem:
    if case.world < 1:
        raise ValueError(f"vp_ce case {case.id} needs world >= 1")
    masked = case.logits == SHARD_MASKED
    base = ce.make_problem(case.replace(logits="normal") if masked else case, seed, device)
    base.target = place_targets(case, base.target, base.ignore_index)
    if masked:
        base.logits = masked_shard(base.logits, base.target, base.ignore_index, case.world)
    return VPProblem(base=base, world=case.world, mesh=Mesh.of(case), handed=case.handed)


def masked_shard(logits: torch.Tensor, target: torch.Tensor, ignore_index: int, world: int) -> torch.Tensor:
    """The logits with one rank's whole shard -inf in every row: the last rank's, or the first's
    in a row whose counted target sits in the last (a sampler draws finite tokens only)."""
    bounds = [b for b in shard_bounds(logits.shape[-1], world) if b[1] > b[0]]
    (first_lo, first_hi), (last_lo, last_hi) = bounds[0], bounds[-1]
    cols = torch.arange(logits.shape[-1], device=logits.device)
    in_last = (target != ignore_index) & (target >= last_lo) & (target < last_hi)
    last = (cols >= last_lo) & (cols < last_hi)
    first = (cols >= first_lo) & (cols < first_hi)
    mask = torch.where(in_last.unsqueeze(-1), first, last)
    return logits.masked_fill(mask, float("-inf"))


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


def per_rank(outcome: Outcome, mesh: Mesh, keys: tuple[str, ...] = ("loss", "z_loss")) -> Outcome:
    """The single-process outcome with `keys` (the loss and z-loss: what every rank returns
    whole) repeated once per rank of a tensor-parallel group, then the whole repeated once per
    replica of the mesh (suites/vp_ce/mesh.py)."""
    values = dict(outcome.values)
    for k in keys:
        if k in values:
            values[k] = values[k].unsqueeze(0).expand(mesh.tp, *values[k].shape)
    return replicated(dataclasses.replace(outcome, values=values), mesh)


def reference(problem: VPProblem) -> Outcome:
    """The float64 truth of the global problem, in this process."""
    return refusal_expected(per_rank(ce.reference(problem.base), problem.mesh), problem)


def eager_in_dtype(problem: VPProblem) -> Outcome:
    """PyTorch eager on the global problem in the case dtype: the tolerance yardstick."""
    return refusal_expected(per_rank(ce.eager_in_dtype(problem.base), problem.mesh), problem)


def textbook(problem: VPProblem) -> tuple[Outcome, ...]:
    """ce's textbook yardsticks on the global problem (ligerbench/tolerance.py)."""
    return tuple(refusal_expected(per_rank(form, problem.mesh), problem) for form in ce.textbook(problem.base))


def _forward(fn, problem: VPProblem, rank: int, group):
    """One rank's call: a fresh leaf copy of its shard (of the whole logits where the case hands
    them gathered), the provider's outputs."""
    p = problem.base
    lo, hi = shard_bounds(p.logits.shape[1], problem.world)[rank]
    x = (p.logits if problem.handed == "gathered" else p.logits[:, lo:hi]).detach().clone().requires_grad_(True)
    before = x.detach().clone()
    w = None if p.weight is None else p.weight[lo:hi].clone()
    out = fn(x, p.target, **rank_options(p, group, lo, w))
    loss, z = out if isinstance(out, tuple) else (out, None)
    return x, before, loss, z


def rank_options(p, group, lo: int, class_weight_shard) -> dict:
    """The keywords of one rank's vocab-parallel cross entropy call (vp_ce's and vp_flce's): its
    group, where its shard starts, its shard of the class weights, and the global problem's options."""
    return dict(group=group, vocab_start=lo, class_weight_shard=class_weight_shard, ignore_index=p.ignore_index,
                reduction=p.reduction, label_smoothing=p.label_smoothing, softcap=p.softcap,
                z_loss_scale=p.z_loss_scale, token_weight=p.token_weight)  # fmt: skip


def _backward(problem: VPProblem, x, before, loss, z) -> dict:
    loss.backward(as_handed(problem.base.upstream, dtype=loss.dtype).expand_as(loss))
    return {
        "loss": loss.detach().float(),
        "z_loss": None if z is None else z.detach().float(),
        "grad": None if x.grad is None else x.grad.detach().clone(),
        "mutated": not same_bits(x.detach(), before),
        "width": x.shape[1],
    }


def _gathered_call(fn, problem: VPProblem, rank: int, group) -> dict:
    """A rank handed the whole logits with its shard's offset, as a caller that gathered them
    already does (Megatron-LM #7452: the loss came out log(TP) too large, the gradients wrong).
    The shards then overlap: a vocab-parallel kernel must refuse (a ValueError or RuntimeError);
    one that computes has nothing right to compute. Only the refusal is compared (`applies`)."""
    try:
        x, before, loss, z = _forward(fn, problem, rank, group)
    except (ValueError, RuntimeError) as exc:
        if _collective_failure(exc):
            raise
        return {"loss": torch.zeros(()), "z_loss": None, "grad": None, "mutated": False, "width": 0, "refused": True}
    return {"loss": loss.detach().float().sum(), "z_loss": None, "grad": None,
            "mutated": not same_bits(x.detach(), before), "width": 0, "refused": False}  # fmt: skip


def refusal_expected(outcome: Outcome, problem: VPProblem) -> Outcome:
    """The truth (or a yardstick) of a case that hands the logits gathered: refused, on every rank."""
    if problem.handed != "gathered":
        return outcome
    return dataclasses.replace(outcome, values={**outcome.values, "refused": torch.tensor(1.0, dtype=torch.float64)})


def _outcome(problem: VPProblem, ranks: list[dict]) -> Outcome:
    dt = problem.base.logits.dtype
    if problem.handed == "gathered":
        refused = float(all(r.get("refused", False) for r in ranks))
        values = {"refused": torch.tensor(refused, dtype=torch.float64)}
        values["loss"] = torch.stack([r["loss"] for r in ranks])
        return Outcome(values=values, input_mutated=any(r["mutated"] for r in ranks))
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
    def one(rank: int, group) -> dict:
        if problem.handed == "gathered":
            return _gathered_call(fn, problem, rank, group)
        return _backward(problem, *_forward(fn, problem, rank, group))

    return on_mesh(problem.mesh, one, lambda mine, mesh: _exchange(problem, mine, mesh),
                   lambda ranks: _outcome(problem, ranks))  # fmt: skip


def on_mesh(mesh: Mesh, one, exchange, outcome) -> Outcome:
    """suites/vp_ce/mesh.py's run_on_mesh, a failed collective raised as RanksOutOfStep."""
    try:
        return run_on_mesh(mesh, one, exchange, outcome)
    except Exception as exc:
        if dist.is_available() and dist.is_initialized() and _collective_failure(exc):
            raise RanksOutOfStep(f"{type(exc).__name__}: {exc}") from exc
        raise


def _exchange(problem: VPProblem, mine: dict, mesh: Mesh) -> list[dict]:
    """Every rank's results, in world-rank order, gathered over the whole world."""
    procs = mesh.procs
    dev = problem.base.logits.device
    n = problem.base.logits.shape[0]
    widths = [hi - lo for lo, hi in shard_bounds(problem.base.logits.shape[1], mesh.tp)]
    # float32 travels on every backend (gloo has no bf16 collectives); bf16/fp16 convert exactly
    grad = mine["grad"] if mine["grad"] is not None else torch.full((n, mine["width"]), float("nan"), device=dev)
    padded = torch.zeros(n, max(widths), dtype=torch.float32, device=dev)
    padded[:, : grad.shape[1]] = grad.float()
    flags = [mine["mutated"], mine["grad"] is None, mine["z_loss"] is None, mine.get("refused", False)]
    flags = torch.tensor([float(f) for f in flags], device=dev)
    gathered = _gather(padded, procs)
    all_flags = _gather(flags, procs)
    losses = _gather(mine["loss"].float().reshape(mine["loss"].shape), procs)
    zs = None
    if not bool(all_flags[:, 2].any()):
        zs = _gather(mine["z_loss"].float(), procs)
    ranks = []
    for r in range(procs):
        width = widths[mesh.position(r)[1]]
        ranks.append(
            {
                "loss": losses[r],
                "z_loss": None if zs is None else zs[r],
                "grad": None if bool(all_flags[r, 1]) else gathered[r, :, :width],
                "mutated": bool(all_flags[r, 0]),
                "refused": bool(all_flags[r, 3]),
            }
        )
    return ranks


def _gather(t: torch.Tensor, world: int) -> torch.Tensor:
    from ligerbench.kernels.vocab_parallel_cross_entropy import all_gather

    return all_gather(t, None)

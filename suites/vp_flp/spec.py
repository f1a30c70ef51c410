"""The `vp_flp` kernel (vocab-parallel per-token log-probs and entropy from a column-parallel
lm_head) as the harness sees it.

A case is the GLOBAL problem of `flp` (suites/flp/spec.py draws it: hidden [N, H] or [B, T, H],
the lm_head weight [V, H], bias, targets [..] or [.., K], options, upstream gradients on logp,
entropy or both) plus `case.world`, the ranks the vocab is split over, and `case.placement`
("edges": every counted target moved onto the first or last class of some shard). The float64
reference is `flp`'s, on the whole problem in one process. `run` splits the weight and the bias
on the vocab dim (vp_ce.shard_bounds: uneven when V is not divisible by the world size, ranks
past V get empty shards), hands every rank its own copy of the hidden states and the targets,
runs forward and backward on every rank (backward holds the hidden gradient's all-reduce) and
puts the results together:
  - logp, entropy, grad_hidden: every rank's, stacked ([world, ...]): each must equal the truth
    (the hidden gradient is the full one on every rank, summed over the group);
  - grad_weight, grad_bias: the shards, concatenated on the vocab dim;
  - outputs_float32: 1 when every rank's logp and entropy are float32.
Under torch.distributed (`verify --nproc N`) this process is one rank and everything is
all-gathered so that rank 0 (which writes the records) compares it all; otherwise the ranks are
simulated in this process (ligerbench/distributed/simulated.py).

A provider is called per rank as
    fn(hidden, weight_shard, target, *, bias, temperature, softcap, logit_scale, ignore_index, group,
       vocab_start) -> (logp, entropy)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ligerbench.cases import Case
from ligerbench.problems import Outcome, as_handed, same_bits
from ligerbench.suites.flp import spec as flp
from ligerbench.suites.vp_ce import head_masks
from ligerbench.suites.vp_ce.mesh import Mesh
from ligerbench.suites.vp_ce.spec import _gather, edge_classes, per_rank, shard_bounds
from ligerbench.suites.vp_flce.spec import (
    _HEAD_GRADS,
    _padded,
    exchanged_grads,
    exchanged_grads_of,
    head_leaves,
    run_ranks,
    sharded_values,
    whole_values,
)

SIGNATURE = (
    "fn(hidden, weight_shard, target, *, bias, temperature, softcap, logit_scale, ignore_index, group, vocab_start) "
    "-> (logp, entropy)"
)
QUANTITIES = ("logp", "entropy", "outputs_float32", "grad_hidden", "grad_weight", "grad_bias", "input_unchanged")
_WHOLE = ("logp", "entropy", "grad_hidden")  # what every rank holds whole
_FULL = (torch.float32, torch.float64)


@dataclass
class VPFLPProblem:
    base: flp.FLPProblem  # the global problem
    world: int  # the tensor-parallel size
    mesh: Mesh  # how the ranks sit in the world (suites/vp_ce/mesh.py)


def place_targets(case: Case, target: torch.Tensor) -> torch.Tensor:
    """The case's targets: as drawn ("random"), or every counted one moved onto the first or
    last class of some shard ("edges"), in turn; ignored entries stay ignored."""
    if case.placement == "random":
        return target
    edges = torch.tensor(edge_classes(case.v, case.world), device=target.device)
    counted = target != flp.IGNORE
    picked = edges[torch.arange(target.numel(), device=target.device) % len(edges)].reshape(target.shape)
    return torch.where(counted, picked, target)


def make_problem(case: Case, seed: int, device: torch.device) -> VPFLPProblem:
    if case.world < 1:
        raise ValueError(f"vp_flp case {case.id} needs world >= 1")
    if case.logits in head_masks.KINDS:  # a sampler's mask through the bias (head_masks.py)
        base = head_masks.masked_problem(flp.make_problem, case, seed, device, flp.IGNORE)
    else:
        base = flp.make_problem(case, seed, device)
    base.target = place_targets(case, base.target)
    return VPFLPProblem(base=base, world=case.world, mesh=Mesh.of(case))


def reference(problem: VPFLPProblem) -> Outcome:
    """The float64 truth of the global problem, in this process."""
    return per_rank(flp.reference(problem.base), problem.mesh, _WHOLE)


def eager_in_dtype(problem: VPFLPProblem) -> Outcome:
    """flp's yardstick on the global problem: float32 logits from the unrounded inputs."""
    return per_rank(flp.eager_in_dtype(problem.base), problem.mesh, _WHOLE)


def _rank(fn, problem: VPFLPProblem, rank: int, group) -> dict:
    """One rank's call, forward and backward, on fresh leaf copies of its inputs."""
    p = problem.base
    lo, hi = shard_bounds(p.weight.shape[0], problem.world)[rank]
    mine = head_leaves(p, lo, hi)
    target = p.target.clone()
    before = {k: t.detach().clone() for k, t in mine.items() if t is not None}
    logp, entropy = fn(mine["hidden"], mine["weight"], target, bias=mine["bias"], group=group, vocab_start=lo,
                       **p.options)  # fmt: skip
    dl, de = p.upstream
    outs, ups = [], []
    for out, up in ((logp, dl), (entropy, de)):
        if up is not None:
            outs.append(out)
            ups.append(as_handed(up, device=out.device, dtype=out.dtype).reshape(out.shape))
    if any(o.requires_grad for o in outs):
        torch.autograd.backward(outs, ups)
    result = {"logp": logp.detach().clone(), "entropy": entropy.detach().clone(),
              "float32": logp.dtype in _FULL and entropy.dtype in _FULL}  # fmt: skip
    for k, t in mine.items():  # no gradient reached a leaf: zeros, as flp reports it
        grad = None if t is None else t.grad
        result[f"grad_{k}"] = None if t is None else (torch.zeros_like(t) if grad is None else grad.detach().clone())
    result["mutated"] = any(not same_bits(mine[k].detach(), b) for k, b in before.items())
    result["mutated"] |= not same_bits(target, p.target)
    return result


def _outcome(problem: VPFLPProblem, ranks: list[dict]) -> Outcome:
    values = whole_values(problem.base, ranks, _WHOLE)
    sharded_values(problem.base, ranks, values)
    values["outputs_float32"] = torch.tensor(float(all(r["float32"] for r in ranks)), dtype=torch.float64)
    return Outcome(values=values, input_mutated=any(r["mutated"] for r in ranks))


def run_vp_flp(fn, problem: VPFLPProblem) -> Outcome:
    return run_ranks(_rank, _exchange, _outcome, fn, problem)


def _exchange(problem: VPFLPProblem, mine: dict, mesh: Mesh) -> list[dict]:
    """Every rank's results, in world-rank order, gathered over the whole world."""
    procs = mesh.procs
    p = problem.base
    dev = p.hidden.device
    widths = [hi - lo for lo, hi in shard_bounds(p.weight.shape[0], mesh.tp)]
    flags = [float(mine["mutated"]), float(mine["float32"])] + [float(mine[k] is None) for k in _HEAD_GRADS]
    all_flags = _gather(torch.tensor(flags, device=dev), procs)
    got = {k: _gather(_padded(mine[k], tuple(mine[k].shape), dev), procs) for k in ("logp", "entropy")}
    got.update(exchanged_grads(p, mine, procs, widths))
    ranks = []
    for r in range(procs):
        width = widths[mesh.position(r)[1]]
        one = {"mutated": bool(all_flags[r, 0]), "float32": bool(all_flags[r, 1])}
        one["logp"], one["entropy"] = got["logp"][r], got["entropy"][r]
        one.update(exchanged_grads_of(got, all_flags, 2, r, width))
        ranks.append(one)
    return ranks


def textbook(problem: VPFLPProblem) -> Outcome:
    """flp's textbook yardstick on the global problem (ligerbench/tolerance.py)."""
    return tuple(per_rank(form, problem.mesh, _WHOLE) for form in flp.textbook(problem.base))

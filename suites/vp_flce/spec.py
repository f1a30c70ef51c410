"""The `vp_flce` kernel (vocab-parallel fused linear + cross entropy) as the harness sees it.

A case is the GLOBAL problem of `flce` (suites/flce/spec.py draws it: hidden [N, H], the
lm_head weight [V, H], bias, targets, options) plus `case.world`, the ranks the vocab is split
over, and `case.targets` ("edges": every counted target on the first or last class of some
shard; suites/vp_ce/spec.py). The float64 reference is `flce`'s, on the whole problem in
one process. `run` splits the weight, the bias and the class weights on the vocab dim
(vp_ce.shard_bounds: uneven when V is not divisible by the world size, ranks past V get empty
shards), hands every rank the whole hidden states and targets, runs forward and backward on
every rank (backward may hold a collective: the hidden gradient's all-reduce for reduction
none) and puts the results together:
  - loss, z_loss, grad_hidden: every rank's, stacked ([world, ...]): each must equal the truth
    (the hidden gradient is the full one on every rank, reduced over the group);
  - grad_weight, grad_bias: the shards, concatenated on the vocab dim.
Under torch.distributed (`verify --nproc N`) this process is one rank and everything is
all-gathered so that rank 0 (which writes the records) compares it all; otherwise the ranks
are simulated in this process (ligerbench/distributed/simulated.py).

A provider is called per rank as
    fn(hidden, weight_shard, target, *, group, vocab_start, bias_shard, class_weight_shard,
       ignore_index, reduction, label_smoothing, softcap, z_loss_scale, token_weight)
    -> loss | (loss, z_loss)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ligerbench.cases import Case
from ligerbench.problems import Outcome, as_handed, same_bits
from ligerbench.suites.flce import spec as flce
from ligerbench.suites.vp_ce import head_masks
from ligerbench.suites.vp_ce.mesh import Mesh
from ligerbench.suites.vp_ce.spec import _gather, on_mesh, per_rank, place_targets, rank_options, shard_bounds

SIGNATURE = (
    "fn(hidden, weight_shard, target, *, group, vocab_start, bias_shard, class_weight_shard, ignore_index, "
    "reduction, label_smoothing, softcap, z_loss_scale, token_weight) -> loss | (loss, z_loss)"
)
QUANTITIES = ("loss", "z_loss", "grad_hidden", "grad_weight", "grad_bias", "input_unchanged")
_WHOLE = ("loss", "z_loss", "grad_hidden")  # what every rank holds whole
_SHARDED = ("grad_weight", "grad_bias")  # what every rank holds a vocab shard of
_HEAD_GRADS = ("grad_hidden", *_SHARDED)


@dataclass
class VPFProblem:
    base: flce.FLCEProblem  # the global problem
    world: int  # the tensor-parallel size
    mesh: Mesh  # how the ranks sit in the world (suites/vp_ce/mesh.py)


def make_problem(case: Case, seed: int, device: torch.device) -> VPFProblem:
    if case.world < 1:
        raise ValueError(f"vp_flce case {case.id} needs world >= 1")
    if case.targets == "edges" and case.logits == "confident":
        raise ValueError("confident hidden states are solved for the drawn targets: not with targets on edges")
    if case.layout not in ("2d", "3d"):
        raise ValueError(f"vp_flce hands every rank a copy of hidden: layout {case.layout!r} is not kept")
    if case.logits in head_masks.KINDS:  # a sampler's mask through the bias (suites/vp_ce/head_masks.py)
        base = head_masks.masked_problem(flce.make_problem, case, seed, device)
    else:
        base = flce.make_problem(case, seed, device)
    base.target = place_targets(case, base.target, base.ignore_index)
    return VPFProblem(base=base, world=case.world, mesh=Mesh.of(case))


def reference(problem: VPFProblem) -> Outcome:
    """The float64 truth of the global problem, in this process."""
    return per_rank(flce.reference(problem.base), problem.mesh, _WHOLE)


def eager_in_dtype(problem: VPFProblem) -> Outcome:
    """PyTorch eager on the global problem in the case dtype: the tolerance yardstick."""
    return per_rank(flce.eager_in_dtype(problem.base), problem.mesh, _WHOLE)


def textbook(problem: VPFProblem) -> tuple[Outcome, ...]:
    """flce's textbook yardsticks on the global problem (ligerbench/tolerance.py)."""
    return tuple(per_rank(form, problem.mesh, _WHOLE) for form in flce.textbook(problem.base))


def head_leaves(p, lo: int, hi: int) -> dict:
    """One rank's inputs of a column-parallel head (vp_flce's and vp_flp's), fresh leaf copies: the
    whole hidden states, and classes [lo, hi) of the weight and of the bias (None without one)."""

    def leaf(t):
        return None if t is None else t.detach().clone().requires_grad_(True)

    return {"hidden": leaf(p.hidden), "weight": leaf(p.weight[lo:hi]),
            "bias": leaf(None if p.bias is None else p.bias[lo:hi])}  # fmt: skip


def whole_values(p, ranks: list[dict], names: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict:
    """What every rank holds whole (`names`), the ranks' copies stacked ([world, ...]; the hidden
    gradient in the inputs' dtype): None where a rank gave none, left out for a name in `optional`."""
    values: dict = {}
    for k in names:
        parts = [r[k] for r in ranks]
        if any(part is None for part in parts):
            if k not in optional:
                values[k] = None
            continue
        values[k] = torch.stack([part.to(p.hidden.dtype) if k == "grad_hidden" else part for part in parts])
    return values


def sharded_values(p, ranks: list[dict], values: dict) -> None:
    """The head's shard gradients (_SHARDED) of every rank put together into `values`: concatenated
    on the vocabulary dim in the inputs' dtype, None where a rank left one out, none for no bias."""
    for k in _SHARDED:
        if k == "grad_bias" and p.bias is None:
            continue
        parts = [r[k] for r in ranks]
        values[k] = None if any(part is None for part in parts) else torch.cat([part.to(p.hidden.dtype)
                                                                                for part in parts], dim=0)  # fmt: skip


def exchanged_grads(p, mine: dict, procs: int, widths: list[int]) -> dict:
    """The head's gradients of every rank, gathered over the world: the whole hidden gradient, the
    weight's and bias's shards padded to the widest (exchanged_grads_of reads them back)."""
    dev = p.hidden.device
    got = {"grad_hidden": _gather(_padded(mine["grad_hidden"], tuple(p.hidden.shape), dev), procs)}
    got["grad_weight"] = _gather(_padded(mine["grad_weight"], (max(widths), p.weight.shape[1]), dev), procs)
    if p.bias is not None:
        got["grad_bias"] = _gather(_padded(mine["grad_bias"], (max(widths),), dev), procs)
    return got


def exchanged_grads_of(got: dict, flags: torch.Tensor, first: int, r: int, width: int) -> dict:
    """Rank r's head gradients out of exchanged_grads: each None where the rank gave none (its flag,
    from column `first` on, in _HEAD_GRADS order), the shards cut back to the rank's width."""
    one = {}
    for i, k in enumerate(_HEAD_GRADS, start=first):
        if k not in got or bool(flags[r, i]):
            one[k] = None
        else:
            one[k] = got[k][r] if k == "grad_hidden" else got[k][r, :width]
    return one


def run_ranks(rank, exchange, outcome, fn, problem) -> Outcome:
    """`rank(fn, problem, rank, group)` on every rank of the problem's mesh, forward and backward in
    each rank's thread (backward may hold the hidden gradient's all-reduce), the results exchanged
    (`exchange(problem, mine, mesh)`) and put together (`outcome(problem, ranks)`)."""

    def one(r: int, group) -> dict:
        return rank(fn, problem, r, group)

    return on_mesh(problem.mesh, one, lambda mine, mesh: exchange(problem, mine, mesh),
                   lambda ranks: outcome(problem, ranks))  # fmt: skip


def _rank(fn, problem: VPFProblem, rank: int, group) -> dict:
    """One rank's call, forward and backward, on fresh leaf copies of its inputs."""
    p = problem.base
    lo, hi = shard_bounds(p.weight.shape[0], problem.world)[rank]
    mine = head_leaves(p, lo, hi)
    hidden, weight, bias = mine["hidden"], mine["weight"], mine["bias"]
    before = {k: t.detach().clone() for k, t in mine.items() if t is not None}
    w = None if p.class_weight is None else p.class_weight[lo:hi].clone()
    out = fn(hidden, weight, p.target, bias_shard=bias, **rank_options(p, group, lo, w))
    loss, z = out if isinstance(out, tuple) else (out, None)
    loss.backward(as_handed(p.upstream, dtype=loss.dtype).expand_as(loss))
    result = {"loss": loss.detach().float(), "z_loss": None if z is None else z.detach().float()}
    for k, t in mine.items():
        result[f"grad_{k}"] = None if t is None or t.grad is None else t.grad.detach().clone()
    result["mutated"] = any(not same_bits(mine[k].detach(), b) for k, b in before.items())
    return result


def _outcome(problem: VPFProblem, ranks: list[dict]) -> Outcome:
    # a z-loss not returned is reported as such; a missing gradient fails
    values = whole_values(problem.base, ranks, _WHOLE, optional=("z_loss",))
    sharded_values(problem.base, ranks, values)
    return Outcome(values=values, input_mutated=any(r["mutated"] for r in ranks))


def run_vp_flce(fn, problem: VPFProblem) -> Outcome:
    return run_ranks(_rank, _exchange, _outcome, fn, problem)


def _padded(t: torch.Tensor | None, shape: tuple[int, ...], device) -> torch.Tensor:
    """t in float32 (every backend gathers it; 16-bit values convert exactly) in the first rows
    of a NaN-free zero tensor of `shape`; all NaN when t is None (the flags say so)."""
    out = torch.zeros(shape, dtype=torch.float32, device=device)
    if t is None:
        return out.fill_(float("nan"))
    out[: t.shape[0]] = t.float()
    return out


def _exchange(problem: VPFProblem, mine: dict, mesh: Mesh) -> list[dict]:
    """Every rank's results, in world-rank order, gathered over the whole world."""
    procs = mesh.procs
    p = problem.base
    dev = p.hidden.device
    widths = [hi - lo for lo, hi in shard_bounds(p.weight.shape[0], mesh.tp)]
    names = ("z_loss", *_HEAD_GRADS)
    flags = torch.tensor([float(mine["mutated"])] + [float(mine[k] is None) for k in names], device=dev)
    all_flags = _gather(flags, procs)
    got = {"loss": _gather(mine["loss"], procs)}
    if not bool(all_flags[:, 1].any()):
        got["z_loss"] = _gather(mine["z_loss"], procs)
    got.update(exchanged_grads(p, mine, procs, widths))
    ranks = []
    for r in range(procs):
        width = widths[mesh.position(r)[1]]
        one = {"mutated": bool(all_flags[r, 0]), "loss": got["loss"][r], "z_loss": None}
        if "z_loss" in got:
            one["z_loss"] = got["z_loss"][r]
        one.update(exchanged_grads_of(got, all_flags, 2, r, width))
        ranks.append(one)
    return ranks

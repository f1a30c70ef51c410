"""The single-process runs a `converge --nproc N` case is judged against, trained once over the
ranks instead of once on every rank.

    ys = yardsticks(ref=("ref", case.dtype), train_ref=lambda: ..., truth=("float64",), train_truth=lambda: ...)
    if ys is not None:  # rank 0, the one that judges
        judge(ys.ref, ours, ys.truth)

A parallel case is judged against transformers' run in the case's dtype (the yardstick) and in
float64 (the truth), each single-process on the WHOLE batch. Every rank used to train both
itself, though only rank 0 judges and writes records: four of the five trainings a rank ran
were the same on every rank (on 4 gloo ranks sharing 2 cores, four times the CPU; on GPUs, the
float64 run after the yardstick, one after the other). Now rank 0 trains the yardstick while
rank 1 trains the truth, then rank 1 sends it to rank 0: its losses and parameter names (one
object), then three float64 tensors (the flattened final parameters, the flattened step-0
gradients, the eval log-probs). The other ranks train neither and wait in the plan's first
collective. On one rank, rank 0 trains both.

Each run is kept in this process for the next case with the same key (the float64 truth is the
same for every dtype; a test that runs several cases in one set of ranks reuses the yardstick
too): one entry per role, the last.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ligerbench.converge.train import RunResult, StepZero, flat

JUDGE, TRUTH_RANK = 0, 1  # the rank that judges (and writes the records); the one that trains float64


@dataclass(frozen=True)
class Run:
    """A single-process run: losses per step, final parameters, step-0 gradients (in
    result.step0.grads) and the eval log-probs on the held-out batch."""

    result: RunResult
    logprobs: torch.Tensor


@dataclass(frozen=True)
class Yardsticks:
    ref: Run  # transformers in the case's dtype
    truth: Run  # transformers in float64


# A training: () -> (RunResult with step0.grads kept, eval log-probs)
Training = Callable[[], tuple[RunResult, torch.Tensor]]
_KEPT: dict[str, tuple[Hashable, Run]] = {}


def _kept(role: str, key: Hashable, train: Training) -> Run:
    if role not in _KEPT or _KEPT[role][0] != key:
        _KEPT.pop(role, None)  # the previous one freed before the next is trained
        result, lp = train()
        # only what is judged: not step 0's hidden states and logits gradient
        _KEPT[role] = (key, Run(RunResult(result.losses, result.params, StepZero(grads=result.step0.grads)), lp))
    return _KEPT[role][1]


def yardsticks(*, ref: Hashable, train_ref: Training, truth: Hashable, train_truth: Training) -> Yardsticks | None:
    """The yardstick and the truth on rank 0 (None on every other rank); a collective between
    ranks 0 and 1 (module docstring). `ref`, `truth`: keys under which a run is kept for reuse."""
    rank, world = dist.get_rank(), dist.get_world_size()
    truth_rank = TRUTH_RANK if world > TRUTH_RANK else JUDGE
    if rank == JUDGE:
        theirs = _kept("ref", ref, train_ref)
        if truth_rank == JUDGE:
            return Yardsticks(theirs, _kept("truth", truth, train_truth))
        return Yardsticks(theirs, _receive(truth_rank, like=theirs.result.params))
    if rank == truth_rank:
        _send(_kept("truth", truth, train_truth), JUDGE)
    return None


def _send(run: Run, dst: int) -> None:
    grads = run.result.step0.grads or {}
    dist.send_object_list([run.result.losses, sorted(grads), tuple(run.logprobs.shape)], dst=dst)
    for t in (flat(run.result.params), flat(grads), run.logprobs.double()):
        dist.send(t.contiguous(), dst=dst)


def _receive(src: int, *, like: dict[str, torch.Tensor]) -> Run:
    """The run `_send` sent from `src`; `like`: a run of the same model (names, shapes, device)."""
    meta = [None, None, None]
    dist.recv_object_list(meta, src=src)
    losses, grad_names, lp_shape = meta
    device = next(iter(like.values())).device

    def receive(n: int | tuple) -> torch.Tensor:
        t = torch.empty(n, dtype=torch.float64, device=device)
        dist.recv(t, src=src)
        return t

    params = _unflat(receive(sum(p.numel() for p in like.values())), {n: like[n].shape for n in like})
    grads = _unflat(receive(sum(like[n].numel() for n in grad_names)), {n: like[n].shape for n in grad_names})
    return Run(RunResult(losses, params, StepZero(grads=grads)), receive(lp_shape))


def _unflat(vector: torch.Tensor, shapes: dict[str, torch.Size]) -> dict[str, torch.Tensor]:
    """train.flat's inverse: the tensors in name order, each its shape."""
    out, at = {}, 0
    for name in sorted(shapes):
        n = shapes[name].numel()
        out[name] = vector[at : at + n].view(shapes[name])
        at += n
    return out

"""The single-process runs a `converge --nproc N` case is judged against, trained once over the
ranks instead of once on every rank.

    ys = yardsticks(ref=key, train_ref=lambda: ..., truth=key64, train_truth=lambda: ..., device=dev)
    if ys is not None:  # rank 0, the one that judges
        judge(ys.ref, ours, ys.truth)

A parallel case is judged against transformers' run in the case's dtype (the yardstick) and in
float64 (the truth), each single-process on the WHOLE batch. Every rank used to train both
itself, though only rank 0 judges and writes records: four of the five trainings a rank ran
were the same on every rank (on 4 gloo ranks sharing 2 cores, four times the CPU; on GPUs, the
float64 run after the yardstick, one after the other). Now rank 0 trains the yardstick while
rank 1 trains the truth, then rank 1 broadcasts it: its losses, parameter names and sizes (one
object), then three float64 tensors (the flattened final parameters, the flattened step-0
gradients, the eval log-probs). The other ranks train neither, and wait in the broadcast,
whose copy they drop. A broadcast rather than rank 1's send to rank 0: one collective that every
backend runs alike, no point-to-point communicator beside the group's while the others wait.
On one rank, rank 0 trains both.

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


def yardsticks(
    *, ref: Hashable, train_ref: Training, truth: Hashable, train_truth: Training, device: torch.device
) -> Yardsticks | None:
    """The yardstick and the truth on rank 0 (None on every other rank); a collective (module
    docstring). `ref`, `truth`: keys under which a run is kept for reuse; `device`: where the
    broadcast's buffers live (the group's device)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    theirs = _kept("ref", ref, train_ref) if rank == JUDGE else None
    if world == 1:
        return Yardsticks(theirs, _kept("truth", truth, train_truth))
    ours = _kept("truth", truth, train_truth) if rank == TRUTH_RANK else None
    got = _broadcast(ours, device)
    return Yardsticks(theirs, _run_like(got, theirs.result.params)) if rank == JUDGE else None


def _broadcast(run: Run | None, device: torch.device) -> tuple[list, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(losses and names, flat parameters, flat step-0 gradients, log-probs) of TRUTH_RANK's `run`,
    on every rank."""
    meta: list = [None]
    if run is not None:
        grads = run.result.step0.grads or {}
        tensors = [flat(run.result.params), flat(grads), run.logprobs.double().contiguous()]
        meta = [(run.result.losses, sorted(run.result.params), sorted(grads), [tuple(t.shape) for t in tensors])]
    dist.broadcast_object_list(meta, src=TRUTH_RANK, device=device if device.type == "cuda" else None)
    *names, shapes = meta[0]
    if run is None:
        tensors = [torch.empty(shape, dtype=torch.float64, device=device) for shape in shapes]
    for t in tensors:
        dist.broadcast(t, src=TRUTH_RANK)
    return (names, *tensors)


def _run_like(got, like: dict[str, torch.Tensor]) -> Run:
    """The broadcast run back as a Run; `like`: a run of the same model (its parameters' shapes)."""
    (losses, param_names, grad_names), params, grads, lp = got
    params = _unflat(params, {n: like[n].shape for n in param_names})
    return Run(RunResult(losses, params, StepZero(grads=_unflat(grads, {n: like[n].shape for n in grad_names}))), lp)


def _unflat(vector: torch.Tensor, shapes: dict[str, torch.Size]) -> dict[str, torch.Tensor]:
    """train.flat's inverse: the tensors in name order, each its shape."""
    out, at = {}, 0
    for name in sorted(shapes):
        n = shapes[name].numel()
        out[name] = vector[at : at + n].view(shapes[name])
        at += n
    return out

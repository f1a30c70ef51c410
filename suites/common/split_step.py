"""One training step's batch split into pieces, as trainers split it (data-parallel ranks,
gradient-accumulation micro-batches), and the normaliser each piece's loss must take for the
pieces' summed gradients to be the gradient of the step's global mean. Shared by `ce` and `flce`
(pieces of tokens) and `grpo` (pieces of sequences).

    ligerbench verify --kernel ce --split dp4 --spread one_token
    ligerbench verify --kernel ce --nproc 2 --device cpu          # the dp2 cases on two real ranks

A split is a kind and a count: `dp2` is two data-parallel ranks, `accum4` four micro-batches of
gradient accumulation. Each piece is a contiguous block of the batch's rows: a rank's share of
whole sequences, or, for a per-token loss, a context-parallel shard of one sequence's tokens
(the same normaliser: Megatron-LM #7513). A spread says how the valid tokens fall over the
pieces: as the case drew them, unevenly, one valid token in the whole step, or a piece with none.

A piece's loss is the sum over its valid tokens divided by the step's count (transformers'
`num_items_in_batch`; Megatron-LM's per-token loss with the count all-reduced) and, data
parallel, multiplied by the world size, since DDP averages the ranks' gradients. In one process
the two factors cancel and the pieces' gradients are summed; under `verify --nproc N` each rank
backpropagates its own piece and all_reduce sums them (DDP's average times the world size).

The field's bug is the piece normalised by its own count, the pieces' means then averaged:
with one valid token in the step its gradient is 1/2 at CP=2 and 1/4 at CP=4 (Megatron-LM
#7452, #7513; multi-token prediction heads, #7498); gradient accumulation's normaliser is the
same bug (Liger-Kernel #1082, TRL #6024). `local_normaliser` plants it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from ligerbench.axes import Axis
from ligerbench.registry import Provider

SPLITS = ("none", "dp2", "dp4", "accum2", "accum4")
SPREADS = ("drawn", "uneven", "one_token", "empty_piece")


@dataclass(frozen=True)
class Split:
    """A split axis value read: its kind ("none", "dp" or "accum") and how many pieces."""

    kind: str
    pieces: int

    @classmethod
    def of(cls, name: str) -> Split:
        if name == "none":
            return cls("none", 1)
        for kind in ("dp", "accum"):
            if name.startswith(kind) and name[len(kind) :].isdigit():
                return cls(kind, int(name[len(kind) :]))
        raise ValueError(f"unknown split {name!r}; expected one of {SPLITS}")

    @property
    def ranks(self) -> int | None:
        """The real ranks `verify --nproc N` runs it on: data-parallel splits only (the pieces of
        gradient accumulation follow one another in one process)."""
        return self.pieces if self.kind == "dp" else None


def is_split(case) -> bool:
    return case.get("split", "none") != "none"


def ranks_of(case) -> int | None:
    """KernelSpec.ranks: the real ranks a case runs on under `verify --nproc N` (dp cases)."""
    return Split.of(case.get("split", "none")).ranks


def split_axis(about: str, means: dict[str, str]) -> Axis:
    return Axis("split", about, SPLITS, default="none", tag="split-", hidden=("none",), means=means)


def spread_axis(means: dict[str, str]) -> Axis:
    return Axis("spread", "how the valid tokens fall over the split's pieces", SPREADS, default="drawn",
                tag="spread-", hidden=("drawn",), means={"drawn": "as the case drew them", **means})  # fmt: skip


# ----------------------------------------------------------------------------- the pieces


def blocks(n: int, sizes: Sequence[int]) -> tuple[slice, ...]:
    """Contiguous blocks of n rows of the given sizes, in order."""
    if sum(sizes) != n or min(sizes) < 1:
        raise ValueError(f"piece sizes {tuple(sizes)} do not cut {n} rows into non-empty blocks")
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return tuple(slice(s, s + k) for s, k in zip(starts, sizes, strict=True))


def even_sizes(n: int, pieces: int) -> tuple[int, ...]:
    """n rows in `pieces` blocks as even as possible (the first n % pieces one row longer)."""
    if n < pieces:
        raise ValueError(f"{n} rows cannot be cut into {pieces} pieces")
    return tuple(n // pieces + (i < n % pieces) for i in range(pieces))


def spread_ignored(spread: str, ignored: torch.Tensor, pieces: Sequence[slice]) -> torch.Tensor:
    """The ignored-token mask [N] of a case with a split, its spread applied to the mask its
    ignore pattern drew over the pieces (contiguous row blocks):
      uneven       the last piece keeps one valid token, its last; the others as drawn
      one_token    one valid token in the whole step, the last
      empty_piece  the first piece has none; the others as drawn."""
    out = ignored.clone()
    if spread == "uneven":
        last = pieces[-1]
        out[last] = True
        out[last.stop - 1] = False
    elif spread == "one_token":
        out[:] = True
        out[-1] = False
    elif spread == "empty_piece":
        out[pieces[0]] = True
    elif spread != "drawn":
        raise ValueError(f"unknown spread {spread!r}; expected one of {SPREADS}")
    return out


def check_spread(spread: str, counted: torch.Tensor, pieces: Sequence[slice], case_id: str) -> None:
    """Refuse a case whose pieces do not hold what its spread promises (a target that is also the
    ignore_index can leave a token the spread meant to count uncounted)."""
    per_piece = [int(counted[p].sum()) for p in pieces]
    ok = {
        "drawn": True,
        "uneven": per_piece[-1] == 1 and max(per_piece) > 1,
        "one_token": sum(per_piece) == 1,
        "empty_piece": per_piece[0] == 0 and sum(per_piece) > 0,
    }[spread]
    if not ok:
        raise ValueError(f"case {case_id}: valid tokens per piece {per_piece} are not what spread {spread!r} says")


def token_pieces(n: int, split: str) -> tuple[slice, ...]:
    """`ce`, `flce`: the pieces of n tokens, contiguous and as even as possible."""
    return blocks(n, even_sizes(n, Split.of(split).pieces))


def ignored_of(case, ignored: torch.Tensor, target: torch.Tensor, ignore_index: int) -> torch.Tensor:
    """`ce`, `flce`: the ignored-token mask of a case, its split's spread applied (the kernels built
    on them, vp_ce and vp_flce, have no split: `case.get`)."""
    split, spread = case.get("split", "none"), case.get("spread", "drawn")
    if split == "none":
        if spread != "drawn":
            raise ValueError(f"case {case.id}: spread {spread!r} needs a split")
        return ignored
    if case.reduction == "none":
        raise ValueError(f"case {case.id}: a split step reduces its tokens (mean or sum), not reduction='none'")
    pieces = token_pieces(len(ignored), split)
    out = spread_ignored(spread, ignored, pieces) | (target == ignore_index)
    check_spread(spread, ~out, pieces, case.id)
    return out


# ----------------------------------------------------------------------------- the split step's gradients


def on_real_ranks(split: Split) -> bool:
    """Whether this process is one of `split.pieces` real data-parallel ranks (verify --nproc N)."""
    if split.ranks is None or not (dist.is_available() and dist.is_initialized()):
        return False
    return dist.get_world_size() == split.pieces


def summed_over_pieces(split: Split, like: Sequence[torch.Tensor], add_piece: Callable[[int, list], None]) -> list:
    """Σ over the pieces of their gradients, float64 tensors shaped as `like`: `add_piece(i, acc)`
    backpropagates piece i on leaves of its own (as on a rank or in a step of its own) and adds
    its gradients into acc. On real ranks each rank adds its own piece and all_reduce sums them
    (gloo and NCCL both reduce float64)."""
    acc = [torch.zeros(t.shape, dtype=torch.float64, device=t.device) for t in like]
    real = on_real_ranks(split)
    for i in [dist.get_rank()] if real else range(split.pieces):
        add_piece(i, acc)
    if real:
        for a in acc:
            dist.all_reduce(a)
    return acc


def step_denominator(target: torch.Tensor, weight: torch.Tensor | None, ignore_index: int, n_classes: int):
    """The whole step's denominator of a mean, in float64 (suites/ce/spec.py's semantics): its
    valid tokens, or with class weights the sum of their weights (PyTorch's)."""
    counted = target.reshape(-1) != ignore_index
    if weight is None:
        return counted.sum(dtype=torch.float64)
    safe = torch.where(counted, target.reshape(-1), 0).clamp(0, n_classes - 1)
    return (weight.double()[safe] * counted).sum()


def token_split_grads(fn, split: str, reduction: str, upstream: torch.Tensor, denominator, row_leaves: Sequence,
                      whole_leaves: Sequence, call: Callable) -> list:  # fmt: skip
    """`ce`, `flce`: the split step's gradients, float64, one per leaf (None where a whole leaf is
    None). Each piece gets its own copies: of its rows of each [N, ...] row leaf (a rank's own
    activations, contiguous) and of each whole leaf (weight, bias); `call(rows, row_leaves,
    whole_leaves, reduction) -> loss` runs the provider on them. mean: the piece's sum over the
    step's `denominator` (or, normalised locally, its own mean over the number of pieces); sum:
    the piece's sum. Backward takes the case's upstream scalar; the pieces' gradients are summed."""
    how = Split.of(split)
    pieces = token_pieces(row_leaves[0].shape[0], split)
    if reduction == "sum":
        piece_reduction, scale = "sum", 1.0
    elif normalises_locally(fn):
        piece_reduction, scale = "mean", 1.0 / how.pieces
    else:
        piece_reduction, scale = "sum", 1.0 / float(denominator)
    whole = [t for t in whole_leaves if t is not None]

    def add(i: int, acc: list) -> None:
        rows = pieces[i]
        mine = [t.detach()[rows].clone().requires_grad_(True) for t in row_leaves]
        shared = [None if t is None else t.detach().clone().requires_grad_(True) for t in whole_leaves]
        loss = call(rows, mine, shared, piece_reduction)
        loss = loss[0] if isinstance(loss, tuple) else loss
        (loss * scale).backward(upstream.to(device=loss.device, dtype=loss.dtype))
        for a, leaf in zip(acc[: len(mine)], mine, strict=True):
            if leaf.grad is not None:
                a[rows] += leaf.grad.double()
        for a, leaf in zip(acc[len(mine) :], [t for t in shared if t is not None], strict=True):
            if leaf.grad is not None:
                a += leaf.grad.double()

    sums = iter(summed_over_pieces(how, [*row_leaves, *whole], add))
    out = [next(sums) for _ in row_leaves]
    return out + [None if t is None else next(sums) for t in whole_leaves]


def whole(problem):
    """A kernel's problem (a dataclass with a `split` field) as one batch: the truth and the
    yardsticks of a split step's gradients are those of the one batch (the split must not
    change them)."""
    return dataclasses.replace(problem, split="none")


def aliased(out, split: str):
    """The one batch's outcome with each gradient also as the split step's (grad_x: split_grad_x)."""
    if split != "none":
        out.values.update({f"split_{k}": g for k, g in list(out.values.items()) if k.startswith("grad_")})
    return out


# ----------------------------------------------------------------------------- the planted bug


@dataclass(frozen=True)
class LocalNormaliser:
    """A planted bug of the trainer, not of the kernel: calls `fn` as it is, but the split step
    that runs it normalises each piece by the piece's own count and averages the pieces (see
    normalises_locally). The kernel's own call, on the whole batch, stays right."""

    fn: Callable

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


def normalises_locally(fn: Any) -> bool:
    return isinstance(fn, LocalNormaliser)


def local_normaliser(kernel: str, name: str, load: Callable[[], Callable], about: str, *targets: dict) -> Provider:
    """The planted bug on our `kernel` (`load` gives our callable): each piece normalised by its
    own count, the pieces averaged (the module docstring's field bugs)."""
    return Provider(name=name, kernel=kernel, description=about, load=lambda: LocalNormaliser(load()), mutant=True,
                    targets=targets)  # fmt: skip

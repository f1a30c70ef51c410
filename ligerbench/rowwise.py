"""What a kernel declares about its rows, for the batch-invariance suite (ligerbench/verify/invariance.py):
how to cut a problem down to some of its rows, which quantities have one slice per row, and which
of those our kernels promise bit for bit whatever else is in the batch.

    ROWS = Rows(take=take_fields("logits", "target", "upstream"), per_row=("logp", "entropy", "grad_logits"),
                promised=("logp", "entropy", "grad_logits"))

A row's answer must not depend on the batch around it: alone, at another position, in a batch of
another size, or beside other rows. The invariance check runs a provider again on such batches
of the case's rows and compares, row by row, what the two calls share. A kernel that names its
log-probability (`log_prob`) also gets the RL ratio exp(logp_a - logp_b) of its counted tokens
reported; a vocabulary-parallel kernel declares `ranks` instead of rows to cut (Ranks: the same
global problem over another number of ranks, for the rank-count suite).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

DETERMINISM = "rerun_bits"  # the determinism suite's quantity
BATCH_INVARIANCE = "row_bits"  # the batch-invariance suite's quantity
LAST_ROWS = "last_rows_bits"  # the past-int32 suite's quantity: the last rows alone (LAST)
RANK_COUNT = "rank_bits"  # the rank-count suite's quantity: the vocabulary split over fewer ranks (Ranks)

# the batches a row is run in again, each the case's row indices it holds (n rows in the case):
# alone (the last row, the one a 32-bit offset or a tile chosen from N reaches last), every row
# at another position (the batch reversed), a smaller batch (the first half) and a padded batch
# (the rows, then the same rows again in reverse: each row beside rows it did not have)
BATCHES: dict[str, Callable[[int], torch.Tensor]] = {
    "alone": lambda n: torch.tensor([n - 1]),
    "position": lambda n: torch.arange(n - 1, -1, -1),
    "smaller": lambda n: torch.arange(max(n // 2, 1)),
    "padded": lambda n: torch.cat([torch.arange(n), torch.arange(n - 1, -1, -1)]),
}
# the last rows of a batch past 2**31 elements, alone: where a 32-bit row offset has wrapped, they
# read another row's memory in the case's batch and their own alone
LAST = {"last_rows": lambda n: torch.arange(max(n - 2, 0), n)}
# the batch whose rows are the case's own, reordered: where a quantity summed over every row (a
# weight's gradient) is compared, as the order of micro-batches a trainer accumulates in
REORDERED = "position"


@dataclass(frozen=True)
class Rows:
    """A kernel's rows, as the batch-invariance suite needs them."""

    take: Callable[[Any, torch.Tensor], Any]  # (problem, row indices) -> the problem of those rows, in that order
    count: Callable[[Any], int]  # problem -> its rows
    per_row: tuple[str, ...]  # quantities whose first dimension is the row
    # the per-row quantities our kernels promise bit for bit whatever the batch (a difference fails
    # ours; any other provider's, and any other quantity's, is recorded as info)
    promised: tuple[str, ...] = ()
    # quantities summed over every row (a weight's gradient): compared on the reordered batch alone
    # (the same rows in another order), recorded as info
    shared: tuple[str, ...] = ()
    # the per-row log-probability an RL trainer divides by its sampler's: where named, each batch's
    # log-probs and the case's give the ratio exp(logp_a - logp_b) of every counted token, and the
    # fraction of tokens outside [0.999, 1.001] and [0.9, 1.1] is reported (RATIO_BANDS)
    log_prob: str = ""
    # problem -> bool tensor of the log-prob's shape: the tokens counted (not ignored); None: all
    counted: Callable[[Any], torch.Tensor] | None = None
    # a vocabulary-parallel kernel's split, for the rank-count suite (Ranks); None: not split
    ranks: Ranks | None = None
    # the dim a per-row quantity holds its rows on, where not 0 (a vocabulary-parallel outcome's
    # whole quantities: one per rank on dim 0, the rows on dim 1); the counted tokens stay on 0
    row_dims: tuple[tuple[str, int], ...] = ()

    def row_dim(self, name: str) -> int:
        return dict(self.row_dims).get(name, 0)


@dataclass(frozen=True)
class Ranks:
    """How a vocabulary-parallel problem is split again over another number of ranks, for the
    rank-count suite (ligerbench/verify/invariance.py, rank_count): the same global problem, the
    same processes, the vocabulary over `count` ranks (the other processes as replicas)."""

    split: Callable[[Any, int], Any]  # (problem, ranks) -> the problem over that many ranks
    replicas: Callable[[Any], int]  # problem -> replicas its outcome holds one after another on dim 0
    world: Callable[[Any], int]  # problem -> the ranks its vocabulary is split over
    whole: tuple[str, ...]  # quantities every rank holds whole (stacked on dim 0, one per rank)
    sharded: tuple[str, ...]  # quantities put back together from the ranks' shards (the global tensor)
    counts: tuple[int, ...] = (1, 2, 4)  # the counts compared: those below the case's that divide it


# the bands of the probability ratio reported (Rows.log_prob): (name, low, high)
RATIO_BANDS = (("ratio_off_0.1pct", 0.999, 1.001), ("ratio_off_10pct", 0.9, 1.1))


def take_fields(*names: str, dim: int = 0) -> Callable[[Any, torch.Tensor], Any]:
    """A `take` for a dataclass problem whose fields `names` hold the rows along `dim` (a tensor,
    or a tuple of tensors or None, such as a pair of upstream gradients); other fields are kept."""

    def take(problem: Any, index: torch.Tensor) -> Any:
        def rows(t):
            if t is None or not torch.is_tensor(t) or t.dim() <= dim:
                return t  # a scalar upstream, or none
            return t.index_select(dim, index.to(t.device)).contiguous()

        changes = {}
        for name in names:
            value = getattr(problem, name)
            changes[name] = tuple(rows(v) for v in value) if isinstance(value, tuple) else rows(value)
        return dataclasses.replace(problem, **changes)

    return take


def count_of(name: str, dim: int = 0) -> Callable[[Any], int]:
    """A `count` reading the rows off the problem's field `name`."""
    return lambda problem: int(getattr(problem, name).shape[dim])

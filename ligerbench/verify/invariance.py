"""Same row, same answer: the determinism and batch-invariance checks of a verify run.

determinism: the provider runs the case's inputs again and every output and gradient must have
the same bits. Batch invariance: the provider runs again on other batches of the case's rows
(ligerbench/rowwise.py: alone, at another position, in a smaller batch, padded with other rows)
and each row's per-row quantities must have the bits the row had in the case's batch; a quantity
summed over every row (a weight's gradient) is compared on the reordered batch. Rank count (the
vocab-parallel kernels): the provider runs the case's global problem with its vocabulary over
fewer ranks (ligerbench/rowwise.py, Ranks) and every output and gradient is compared with the
case's. Where a kernel names its log-probability, the fraction of counted tokens whose ratio
exp(logp_a - logp_b) between the two calls leaves [0.999, 1.001] and [0.9, 1.1] is reported too
(the figure an RL trainer's clipped ratio sees).

Each comparison is one record: the largest distance in units in the last place (ULP) between the
two calls over the elements they share (0: the same bits; inf: a NaN or a shape on one side
only), limit 0. It fails only where the provider promises it (ours: deterministic, and the
quantities its kernel's Rows promise); everywhere else it is `info`, a property reported and
never failed.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ligerbench.rowwise import (
    BATCH_INVARIANCE,
    BATCHES,
    DETERMINISM,
    LAST_ROWS,
    RANK_COUNT,
    RATIO_BANDS,
    REORDERED,
    Ranks,
    Rows,
)

QUANTITIES = (DETERMINISM, BATCH_INVARIANCE, LAST_ROWS, RANK_COUNT)
INFO = "info"

_INT = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def ulp_distance(a: torch.Tensor | None, b: torch.Tensor | None) -> float:
    """The largest distance in ULP between two tensors of one floating dtype, element by element
    (0.0 and -0.0 are 0 apart; NaN is 0 from NaN and inf from anything else); non-floating
    tensors are 0 where equal and inf where not. inf also where the shapes or dtypes differ."""
    if a is None or b is None:
        return 0.0 if a is None and b is None else math.inf
    a, b = a.detach(), b.detach().to(a.device)
    if a.shape != b.shape or a.dtype != b.dtype:
        return math.inf
    if a.numel() == 0:
        return 0.0
    if not a.is_floating_point():
        return 0.0 if torch.equal(a, b) else math.inf
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    if not torch.equal(nan_a, nan_b):
        return math.inf
    ia, ib = _ordered(a), _ordered(b)
    gap = (ia - ib).abs().masked_fill(nan_a, 0)
    return float(gap.max())


def _ordered(t: torch.Tensor) -> torch.Tensor:
    """The floats as integers in the order of their values (adjacent floats one apart), int64."""
    bits = t.contiguous().view(_INT[t.element_size()]).to(torch.int64)
    sign = 1 << (8 * t.element_size() - 1)
    return torch.where(bits < 0, -(bits + sign), bits)  # a negative float's magnitude bits, negated


def _row(name: str, distance: float, promised: bool, detail: str) -> tuple[str, dict]:
    """One record's fields: the distance, and its verdict (pass/fail where promised, else info)."""
    if promised:
        verdict = "pass" if distance == 0 else "fail"
    else:
        verdict = INFO
    message = "" if distance == 0 else f"{detail}: {_ulps(distance)} apart"
    if verdict == INFO and distance != 0:
        message += " (not promised: reported, not failed)"
    return name, dict(metric="ulp_max", value=distance, unit="ulp", limit=0.0, verdict=verdict, message=message)


def unmeasured(verdict: str, message: str, limit: float = 0.0) -> dict:
    """A same-row record's fields where no distance was measured: a skip, or a call that raised."""
    return dict(metric="ulp_max", value=float("nan"), unit="", limit=limit, verdict=verdict, message=message)


def _ulps(distance: float) -> str:
    return "a NaN or shape on one side only" if math.isinf(distance) else f"up to {distance:.0f} ulp"


def determinism(run: Callable[[], object], first, *, promised: bool) -> list[tuple[str, dict]]:
    """Run once more on the same inputs; one record per quantity the first run produced."""
    again = run()
    out = []
    for name, value in first.values.items():
        distance = ulp_distance(value, again.values.get(name))
        out.append(_row(name, distance, promised, "a second call on the same inputs differs"))
    return out


def batch_invariance(run: Callable[[object], object], problem, first, rows: Rows, *, ours: bool,
                     batches: dict = BATCHES, describe: Callable[[BaseException], str] | None = None,
                     ) -> list[tuple[str, dict]]:  # fmt: skip
    """Run on each batch of `batches` cut from the case's rows; one record per batch and quantity
    (named `batch:quantity`), comparing each row of the batch with the same row of the case. With
    `describe`, a batch whose call raises is an error record per quantity (its message from
    `describe`) and the other batches are still measured; without it the exception propagates."""
    n = rows.count(problem)
    out = []
    pairs = []  # (the case's log-probs, the batch's, the counted tokens) of every batch, for the ratio
    for batch, indices in batches.items():
        index = indices(n)
        if batch != REORDERED and n < 2 and batches is BATCHES:
            continue  # one row: every batch but itself is the case's own
        try:
            got = run(rows.take(problem, index))
        except Exception as exc:
            if describe is None:
                raise
            why = f"the {batch} batch raised: {describe(exc)}"
            out += [(f"{batch}:{q}", unmeasured("error", why)) for q in rows.per_row if q in first.values]
            continue
        for name in rows.per_row:
            if name not in first.values:
                continue
            mine = first.values[name]
            theirs = got.values.get(name)
            dim = rows.row_dim(name)
            expected = mine.index_select(dim, index.to(mine.device)) if mine.dim() > dim else mine
            distance = ulp_distance(expected, theirs)
            detail = f"a row in the {batch} batch differs from the same row in the case's"
            out.append(_row(f"{batch}:{name}", distance, ours and name in rows.promised, detail))
            if name == rows.log_prob and theirs is not None:
                counted = None if rows.counted is None else rows.counted(problem)
                counted = None if counted is None else counted.index_select(0, index.to(counted.device))
                pairs.append((expected, theirs, counted))
        if batch == REORDERED:
            for name in rows.shared:
                if name in first.values:
                    distance = ulp_distance(first.values[name], got.values.get(name))
                    out.append(_row(f"{batch}:{name}", distance, False, "summed over the rows in another order"))
    if pairs:
        out += ratio_rows(pairs, promised=ours and rows.log_prob in rows.promised, between="the case's batch and "
                          "another batch of its rows")  # fmt: skip
    return out


def ratio_off(pairs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]) -> dict[str, tuple[int, int]]:
    """The probability ratio exp(logp_a - logp_b) of every counted token of `pairs` (the same
    tokens' log-probs from two calls, and which tokens are counted: None, every one), in float64:
    per band of RATIO_BANDS, (tokens outside it, tokens). A NaN ratio is outside every band."""
    off = {name: 0 for name, _, _ in RATIO_BANDS}
    total = 0
    for a, b, counted in pairs:
        if b.shape != a.shape:
            raise ValueError(f"log-probs of shapes {tuple(a.shape)} and {tuple(b.shape)}: no ratio")
        ratio = torch.exp(a.detach().double() - b.detach().to(a.device).double())
        if counted is not None:
            ratio = ratio[counted.to(ratio.device).expand_as(ratio)]
        total += ratio.numel()
        for name, low, high in RATIO_BANDS:
            off[name] += int((~((ratio >= low) & (ratio <= high))).sum())
    return {name: (k, total) for name, k in off.items()}


def ratio_rows(pairs, *, promised: bool, between: str, prefix: str = "") -> list[tuple[str, dict]]:
    """One record per band of RATIO_BANDS: the fraction of counted tokens whose probability ratio
    between two calls leaves it (metric `ratio_off`). Information, the figure an RL trainer reads
    off its clipped ratio, except where the log-probs are promised bit for bit (then any token off
    1 fails: the bitwise records fail with it)."""
    out = []
    for name, (k, total) in ratio_off(pairs).items():
        low, high = next((lo, hi) for n, lo, hi in RATIO_BANDS if n == name)
        fraction = k / total if total else 0.0
        verdict = ("pass" if k == 0 else "fail") if promised else INFO
        message = f"{k} of {total} tokens' exp(logp_a - logp_b) outside [{low}, {high}] between {between}"
        out.append((f"{prefix}{name}", dict(metric="ratio_off", value=fraction, unit="fraction", limit=0.0,
                                           verdict=verdict, message=message)))  # fmt: skip
    return out


def rank_count(run: Callable[[object], object], problem, first, ranks: Ranks, rows: Rows,
               *, promised: bool = False) -> list[tuple[str, dict]]:  # fmt: skip
    """The case's global problem split again over each count of `ranks.counts` below the case's
    world that divides it, on the same processes; one record per count and quantity (named
    `ranksK:quantity`): the largest ulp distance between every rank's value in the case and rank
    0's at K ranks (a sharded quantity: the global tensor put back together). With a log-prob
    (Rows.log_prob), the fraction of counted tokens whose ratio leaves each band (RATIO_BANDS)."""
    world = ranks.world(problem)
    out = []
    for count in ranks.counts:
        if count >= world or world % count:
            continue
        again = ranks.split(problem, count)
        got = run(again)
        replicas = ranks.replicas(again)
        mine_replicas = ranks.replicas(problem)
        pairs = []
        for name in (*ranks.whole, *ranks.sharded):
            mine = _first_replica(first.values.get(name), mine_replicas)
            theirs = _first_replica(got.values.get(name), replicas)
            if mine is None and theirs is None:
                continue
            if name in ranks.whole and theirs is not None and mine is not None and theirs.dim() and mine.dim():
                theirs = theirs[:1].expand_as(mine) if theirs.shape[1:] == mine.shape[1:] else theirs
            distance = ulp_distance(mine, theirs)
            detail = f"the vocabulary over {count} rank(s) differs from the case's {world}"
            out.append(_row(f"ranks{count}:{name}", distance, promised, detail))
            if name == rows.log_prob and mine is not None and theirs is not None:
                counted = None if rows.counted is None else rows.counted(problem)
                pairs.append((mine[0], theirs[0], counted))  # rank 0's tokens, each counted once
        if pairs:
            out += ratio_rows(pairs, promised=promised, prefix=f"ranks{count}:",
                              between=f"the vocabulary over {world} ranks and over {count}")  # fmt: skip
    return out


def _first_replica(value: torch.Tensor | None, replicas: int) -> torch.Tensor | None:
    """The first replica's part of a value whose replicas lie one after another on dim 0."""
    if value is None or replicas == 1 or value.dim() == 0:
        return value
    return value[: value.shape[0] // replicas]

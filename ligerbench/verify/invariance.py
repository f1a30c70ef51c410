"""Same row, same answer: the determinism and batch-invariance checks of a verify run.

determinism: the provider runs the case's inputs again and every output and gradient must have
the same bits. Batch invariance: the provider runs again on other batches of the case's rows
(ligerbench/rowwise.py: alone, at another position, in a smaller batch, padded with other rows)
and each row's per-row quantities must have the bits the row had in the case's batch; a quantity
summed over every row (a weight's gradient) is compared on the reordered batch.

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

from ligerbench.rowwise import BATCH_INVARIANCE, BATCHES, DETERMINISM, LAST_ROWS, REORDERED, Rows

QUANTITIES = (DETERMINISM, BATCH_INVARIANCE, LAST_ROWS)
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
                     batches: dict = BATCHES) -> list[tuple[str, dict]]:  # fmt: skip
    """Run on each batch of `batches` cut from the case's rows; one record per batch and quantity
    (named `batch:quantity`), comparing each row of the batch with the same row of the case."""
    n = rows.count(problem)
    out = []
    for batch, indices in batches.items():
        index = indices(n)
        if batch != REORDERED and n < 2 and batches is BATCHES:
            continue  # one row: every batch but itself is the case's own
        got = run(rows.take(problem, index))
        for name in rows.per_row:
            if name not in first.values:
                continue
            mine = first.values[name]
            theirs = got.values.get(name)
            expected = mine.index_select(0, index.to(mine.device)) if mine.dim() else mine
            distance = ulp_distance(expected, theirs)
            detail = f"a row in the {batch} batch differs from the same row in the case's"
            out.append(_row(f"{batch}:{name}", distance, ours and name in rows.promised, detail))
        if batch == REORDERED:
            for name in rows.shared:
                if name in first.values:
                    distance = ulp_distance(first.values[name], got.values.get(name))
                    out.append(_row(f"{batch}:{name}", distance, False, "summed over the rows in another order"))
    return out

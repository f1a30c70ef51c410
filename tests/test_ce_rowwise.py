"""The row-block truth of large ce cases (suites/ce/spec.py rowwise) is the whole-tensor truth:
same loss, z-loss and gradient, for every reduction, option and upstream, with blocks that
split the rows unevenly; and the full grid holds a case past 2**31 logits (suites/ce/grid.py, E),
whose truth and yardstick take that path."""

from __future__ import annotations

import pytest
import torch

from ligerbench.builtin import default_registry
from ligerbench.suites.ce import grid as ce_grid
from ligerbench.suites.ce import spec as ce_spec

CE = default_registry().kernels["ce"]


def _cases():
    cases = [c for c in CE.grid("quick", "cpu") if c.layout in ("2d", "3d") and c.n > 1]
    picked = {}
    for c in cases:  # one case per (reduction, upstream, option, dtype)
        picked.setdefault((c.reduction, c.upstream, c.option, c.dtype), c)
    return list(picked.values())


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c.id)
def test_the_row_block_truth_is_the_whole_tensor_truth(case):
    problem = CE.make_problem(case, 3, torch.device("cpu"))
    whole = ce_spec.reference(problem).values
    v = problem.logits.shape[-1]
    blocks = ce_spec.rowwise(problem, torch.float64, chunk_elements=5 * v).values  # 5-row blocks
    for q in ("loss", "z_loss", "grad_logits"):  # (NaN where every target is ignored under "mean")
        torch.testing.assert_close(blocks[q], whole[q], rtol=1e-12, atol=1e-15, equal_nan=True, msg=q)


def test_the_full_grid_has_a_case_past_int32_and_its_truth_goes_by_row_blocks(monkeypatch):
    # the float64 truth's past-int32 case; the past_int32 suite's own cases form no truth (ce/grid.py)
    last_rows = set(ce_grid.last_rows_cases("full", "cuda"))
    big = [c for c in ce_grid.ce_cases("full", "cuda") if c.n * c.v > 2**31 and c not in last_rows]
    assert len(big) == 1 and big[0].dtype == "bf16"
    assert big[0].n * big[0].v >= ce_spec.CHUNKED_FROM
    # every other case keeps the whole-tensor path (its copies fit: under 4 GiB per float64 copy)
    rest = [c for c in ce_grid.ce_cases("full", "cuda") if c not in big and c not in last_rows]
    assert max(c.n * c.v for c in rest) * 8 < 4 * 2**30 and max(c.n * c.v for c in rest) < ce_spec.CHUNKED_FROM
    # and the switch is taken: a small case under a lowered threshold goes by rowwise
    case = next(c for c in CE.grid("quick", "cpu") if c.layout == "2d")
    problem = CE.make_problem(case, 0, torch.device("cpu"))
    calls = []
    real = ce_spec.rowwise
    monkeypatch.setattr(ce_spec, "rowwise", lambda p, dt, **k: calls.append(dt) or real(p, dt, **k))
    monkeypatch.setattr(ce_spec, "CHUNKED_FROM", 1)
    ce_spec.reference(problem)
    ce_spec.eager_in_dtype(problem)
    assert calls[0] == torch.float64 and calls[1] in (torch.float32,)

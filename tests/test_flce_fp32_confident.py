"""A case where the verdict once failed our kernel for a float32 rounding, not a bug (docs/bugs.md,
"What the careful yardstick found in our own kernels"): at seed 2 `verify --kernel flce` failed
ours on `flce/n12/v256/h32/fp32/mean/up-ones/random_10/plain/confident` (loss error 2.7e-6 against
a limit of 2.46e-6 set by one draw of PyTorch's float32 roundings). What this test shows there:

1. ours is the exact cross entropy of the float32 logits it forms: its loss is the float64 mean
   over those logits to within four float32 roundings. Its error against the truth is the float32
   logits' own, which every float32 implementation pays.
2. per row, ours is never farther from the truth than PyTorch's float32 cross entropy, which on
   confident rows is 10 to 100 times farther (its log-softmax loses digits where p_t -> 1);
3. both verdicts pass it now: the careful yardstick re-drawn on nudged inputs and the textbook
   forms (ligerbench/tolerance.py) no longer rest on one draw. Whether PyTorch's mean lands closer
   than ours is itself a draw of the CPU's summation order: it did on the machine where the case
   was found and does not on another (2026-11-27), so nothing here depends on it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ligerbench.builtin import default_registry
from ligerbench.kernels.fused_linear_cross_entropy import fused_linear_cross_entropy
from ligerbench.testing import run_provider

pytestmark = pytest.mark.interpreter
CASE = "flce/n12/v256/h32/fp32/mean/up-ones/random_10/plain/confident"


def _problem():
    spec = default_registry().kernels["flce"]
    (case,) = [c for c in spec.grid("quick", "cpu") if c.id == CASE]
    return spec.make_problem(case, 2, torch.device("cpu"))


def test_ours_is_exact_given_its_float32_logits_and_never_worse_per_row_than_pytorch():
    p = _problem()
    h, w, t = p.hidden, p.weight, p.target
    counted = t != p.ignore_index
    truth_rows = F.cross_entropy(h.double() @ w.double().T, t, reduction="none", ignore_index=p.ignore_index)
    logits32 = h @ w.T
    exact_of_logits32 = F.cross_entropy(logits32.double(), t, ignore_index=p.ignore_index)
    ours = fused_linear_cross_entropy(h, w, t, ignore_index=p.ignore_index)
    # 1. four float32 roundings (sum, divide: tolerance.FLOOR), against an error of 2.7e-6 to the truth
    assert abs(ours.item() - exact_of_logits32.item()) <= 4 * 2.0**-24 * exact_of_logits32.item()

    ours_rows = fused_linear_cross_entropy(h, w, t, ignore_index=p.ignore_index, reduction="none")
    torch_rows = F.cross_entropy(logits32, t, reduction="none", ignore_index=p.ignore_index)

    def rel(rows):
        return ((rows.double() - truth_rows).abs() / truth_rows.abs())[counted]

    assert (rel(ours_rows) <= rel(torch_rows) + 1e-12).all()  # 2.
    assert rel(torch_rows).max() > 10 * rel(ours_rows).max()


@pytest.mark.parametrize("strict", [False, True])
def test_both_verdicts_pass_ours_on_that_case(strict):
    spec = default_registry()
    case = [c for c in spec.kernels["flce"].grid("quick", "cpu") if c.id == CASE]
    result = run_provider("flce", spec.providers[("flce", "ours")], seed=2, cases=case, strict=strict)
    assert result.compared >= 3
    assert result.failures.empty, result.failures[["quantity", "value", "limit", "message"]].to_string()

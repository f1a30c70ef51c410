import math

import torch

from ligerbench import tolerance


def test_rel_error_is_relative_l2():
    ref = torch.tensor([3.0, 4.0])
    assert tolerance.rel_error(torch.tensor([3.0, 4.5]), ref) == 0.1


def test_zero_reference_needs_exact_zero():
    zero = torch.zeros(4)
    assert tolerance.rel_error(torch.zeros(4), zero) == 0.0
    assert tolerance.rel_error(torch.tensor([0.0, 0.0, 1e-30, 0.0]), zero) == math.inf


def test_nan_must_match_positions():
    ref = torch.tensor([float("nan"), 1.0])
    assert tolerance.rel_error(torch.tensor([float("nan"), 1.0]), ref) == 0.0
    assert tolerance.rel_error(torch.tensor([0.0, 1.0]), ref) == math.inf  # NaN hidden
    assert tolerance.rel_error(torch.tensor([float("nan"), float("nan")]), ref) == math.inf  # NaN invented


def test_inf_sign_matters():
    ref = torch.tensor([float("inf"), 1.0])
    assert tolerance.rel_error(torch.tensor([-float("inf"), 1.0]), ref) == math.inf


def test_limit_is_factor_times_eager_plus_floor():
    assert tolerance.limit_for(1e-3, torch.bfloat16) == tolerance.FACTOR * 1e-3 + tolerance.FLOOR[torch.bfloat16]
    assert tolerance.verdict(2.0, 1.0) == "fail" and tolerance.verdict(1.0, 1.0) == "pass"


def test_missing_output_fails():
    assert tolerance.rel_error(None, torch.ones(2)) == math.inf

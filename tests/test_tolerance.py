import math

import pytest
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


def _errors(case_id: str) -> dict[str, float]:
    """grad_logits error against float64 of PyTorch's own 16-bit path and of the yardstick."""
    from ligerbench.cases import Case
    from ligerbench.suites.ce.axes import case as ce_case
    from ligerbench.suites.ce.spec import ce_torch, eager_in_dtype, make_problem, reference, run_ce

    case: Case = ce_case(**case_id)
    problem = make_problem(case, seed=0, device=torch.device("cpu"))
    truth = reference(problem).values["grad_logits"]
    native = run_ce(ce_torch, problem).values["grad_logits"]
    careful = eager_in_dtype(problem).values["grad_logits"]
    return {"native": tolerance.rel_error(native, truth), "yardstick": tolerance.rel_error(careful, truth)}


def test_the_16_bit_yardstick_is_float32_rounded_once_not_pytorchs_own_16_bit_path():
    # docs/bugs.md, "What the careful yardstick found in our own kernels": on confident rows
    # PyTorch's bf16 true-class gradient is far off, and a limit of twice that passed a kernel with
    # the same bug; the yardstick must be the careful one
    e = _errors(dict(n=16, v=1000, dtype="bf16", reduction="sum", logits="confident", ignore_pattern="random_10"))
    assert e["native"] > tolerance.limit_for(e["yardstick"], torch.bfloat16), e
    assert e["yardstick"] <= 2.0**-8, e  # one rounding to bf16 (relative, L2), no more


def test_a_large_tensor_is_compared_a_block_at_a_time_with_the_same_result(monkeypatch):
    """Past BLOCK_ELEMENTS the comparison never holds whole float64 copies (17 GB each
    at 2**31 elements, the size of the full ce grid's largest case); the error is the one the whole
    comparison gives, and a NaN in a later block is still caught."""
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(37, 53, generator=g, dtype=torch.float64)
    out = (ref + 1e-3 * torch.randn(37, 53, generator=g, dtype=torch.float64)).float()
    whole = tolerance.rel_error(out, ref)
    monkeypatch.setattr(tolerance, "BLOCK_ELEMENTS", 100)
    assert math.isclose(tolerance.rel_error(out, ref), whole, rel_tol=1e-12)
    out[30, 7] = float("nan")
    assert tolerance.rel_error(out, ref) == math.inf


def test_nudged_moves_each_finite_nonzero_float32_value_one_ulp_and_keeps_the_rest():
    import dataclasses

    @dataclasses.dataclass
    class Problem:
        student: torch.Tensor
        teacher: torch.Tensor
        labels: torch.Tensor
        half: torch.Tensor
        t: float

    x = torch.tensor([1.0, -2.5, 0.0, float("-inf"), float("nan"), 3e-39, 1e30]).requires_grad_(True)
    p = Problem(x, x, torch.tensor([1, 2]), torch.ones(3, dtype=torch.bfloat16), 2.0)
    q = tolerance.nudged(p)
    moved = q.student.detach()
    finite = torch.isfinite(x.detach()) & (x.detach() != 0)
    ups, downs = (
        torch.nextafter(x.detach(), torch.tensor(math.inf)),
        torch.nextafter(x.detach(), torch.tensor(-math.inf)),
    )
    assert bool(((moved == ups) | (moved == downs))[finite].all())  # one ulp, either way
    assert not torch.equal(moved[finite], x.detach()[finite])
    assert moved[2] == 0 and moved[3] == -math.inf and torch.isnan(moved[4])
    assert q.teacher is q.student  # one tensor in two fields moves once
    assert q.student.requires_grad and q.labels is p.labels and q.half is p.half and q.t == 2.0
    torch.testing.assert_close(
        tolerance.nudged(p).student.detach(), moved, rtol=0, atol=0, equal_nan=True
    )  # a fixed seed


def test_the_nudged_yardstick_counts_up_to_its_cap_and_only_there():
    from types import SimpleNamespace

    from ligerbench.verify.engine import Yardsticks

    truth = torch.tensor([1.0], dtype=torch.float64)
    exact = SimpleNamespace(values={"loss": truth.float()})

    def off(rel):
        return SimpleNamespace(values={"loss": (truth * (1 + rel)).double()})

    drawn = Yardsticks(exact, None, (off(1e-7), off(3e-7), exact)).errors("loss", truth)[0]
    assert drawn == pytest.approx(3e-7, rel=1e-6)  # the largest draw
    crossed = Yardsticks(exact, None, (off(0.3),)).errors("loss", truth)[0]  # a branch crossed: not counted
    assert crossed == 0.0
    assert Yardsticks(exact, None).errors("loss", truth)[0] == 0.0


def test_on_cpu_copies_the_tensors_keeps_shared_ones_shared_and_refuses_large_problems(monkeypatch):
    import dataclasses

    @dataclasses.dataclass
    class Problem:
        student: torch.Tensor
        teacher: torch.Tensor
        labels: torch.Tensor
        options: dict

    x = torch.randn(3, 4).requires_grad_(True)
    p = Problem(x, x, torch.tensor([0, 1, 2]), {"t": 2.0})
    q = tolerance.on_cpu(p)
    assert q.student.device.type == "cpu" and q.student is not x and torch.equal(q.student, x.detach())
    assert q.teacher is q.student and q.student.requires_grad and q.options == {"t": 2.0}
    monkeypatch.setattr(tolerance, "CPU_DRAW_ELEMENTS", 14)  # 12 + 3 distinct elements
    assert tolerance.on_cpu(p) is None


def test_on_a_gpu_the_careful_yardstick_is_also_drawn_on_the_cpu(monkeypatch):
    """The engine's draws: three nudges, and off the CPU one run on a CPU copy (a device whose
    careful run lands on the truth every time no longer sets the limit alone)."""
    import dataclasses
    from types import SimpleNamespace

    from ligerbench.verify import engine

    @dataclasses.dataclass
    class Problem:
        x: torch.Tensor

    seen = []
    spec = SimpleNamespace(eager=lambda p: seen.append(p.x.device.type) or SimpleNamespace(values={}))
    assert len(engine._float32_draws(spec, Problem(torch.ones(2)), torch.device("cpu"))) == tolerance.NUDGES
    seen.clear()
    # a run on another device (its tensors here on the CPU: this machine has no GPU)
    draws = engine._float32_draws(spec, Problem(torch.ones(2)), torch.device("meta"))
    assert len(draws) == tolerance.NUDGES + 1 and seen[-1] == "cpu"
    # a problem whose copy cannot come to the CPU (meta tensors: no data): no CPU draw, no error
    meta = Problem(torch.ones(2, device="meta"))
    assert len(engine._float32_draws(spec, meta, torch.device("meta"))) == tolerance.NUDGES

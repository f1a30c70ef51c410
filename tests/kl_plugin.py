"""A third loss kernel that exists only in the tests: KL divergence from a teacher distribution
to the softmax of a student's logits, registered through the public plugin entry point exactly as
a third party would (tests/test_third_kernel.py installs it). Nothing under ligerbench/ or
suites/ knows it.

    loss_i = sum_j p_j (log p_j - log softmax(x_i)_j),   p = softmax(teacher logits / T)
    none: loss_i;  sum: sum_i loss_i;  mean: sum_i loss_i / N   (PyTorch's "batchmean")

Its axes are its own (AXES): besides shape, dtype, reduction and logits it has one no other
kernel has, `teacher_temperature` (T above); `verify --where teacher_temperature=4.0`, the records'
column and `gate --subset` follow from the declaration with no edit outside this file.

It has one correct provider (`torch_kl`, the control) and one planted bug: `reduction="mean"`
taken as F.kl_div's elementwise mean (divided by N*V instead of N), a real and common slip.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ligerbench.axes import Axis
from ligerbench.cases import DTYPES, Case, draw_logits, generator_for
from ligerbench.problems import Outcome, same_bits
from ligerbench.registry import KernelSpec, Provider, Registry, Suite


@dataclass
class KLProblem:
    logits: torch.Tensor  # [N, V] student logits, case dtype
    teacher: torch.Tensor  # [N, V] teacher log-probabilities, float32
    reduction: str
    upstream: torch.Tensor


def make_problem(case: Case, seed: int, device: torch.device) -> KLProblem:
    g = generator_for(case, seed)
    target = torch.randint(0, case.v, (case.n,), generator=g)
    logits = draw_logits(case.logits, case.n, case.v, target, g)
    teacher = torch.log_softmax(torch.randn(case.n, case.v, generator=g) * 2.0 / case.teacher_temperature, dim=-1)
    up = torch.rand(case.n, generator=g) * 2.0 - 0.5 if case.reduction == "none" else torch.tensor(1.0)
    return KLProblem(logits.to(DTYPES[case.dtype]).to(device), teacher.to(device), case.reduction, up.to(device))


def kl_torch(logits, teacher, *, reduction):
    """The semantics above in PyTorch ops, in the dtype of `logits` (float32 teacher cast to it)."""
    rows = (teacher.exp() * (teacher - torch.log_softmax(logits, dim=-1))).to(logits.dtype).sum(-1)
    return {"none": rows, "sum": rows.sum(), "mean": rows.sum() / rows.shape[0]}[reduction]


def run_kl(fn, problem: KLProblem) -> Outcome:
    x = problem.logits.detach().clone().requires_grad_(True)
    before = x.detach().clone()
    loss = fn(x, problem.teacher.to(x.dtype), reduction=problem.reduction)
    loss.backward(problem.upstream.to(loss.dtype).expand_as(loss))
    values = {"loss": loss.detach().clone(), "grad_logits": x.grad.detach().clone()}
    return Outcome(values=values, input_mutated=not same_bits(x.detach(), before))


def reference(problem: KLProblem) -> Outcome:
    p64 = KLProblem(problem.logits.double(), problem.teacher.double(), problem.reduction, problem.upstream.double())
    return run_kl(kl_torch, p64)


def eager(problem: KLProblem) -> Outcome:
    return run_kl(kl_torch, problem)


SIZES = {"quick": ((16, 33), (7, 1000), (1, 5)), "full": ((1024, 32000), (777, 4099))}
AXES = (
    Axis("n", "tokens", {p: tuple(dict.fromkeys(n for n, _ in s)) for p, s in SIZES.items()}, tag="n"),
    Axis("v", "classes", {p: tuple(dict.fromkeys(v for _, v in s)) for p, s in SIZES.items()}, tag="v"),
    Axis("dtype", "the student logits' dtype", ("fp32", "bf16"), default="fp32"),
    Axis("reduction", "how the per-token losses are reduced", ("none", "sum", "mean"), default="mean",
         means={"none": "per-token losses", "sum": "a summed loss", "mean": "PyTorch's batchmean"}),
    Axis("upstream", "the gradient backward receives", ("random", "ones"), default="ones", tag="up-"),
    Axis("logits", "the kind of student logits", ("normal", "confident"), default="normal"),
    Axis(
        "teacher_temperature",
        "the temperature T of the teacher's softmax",
        (1.0, 4.0),
        means={1.0: "distillation from the teacher's own distribution", 4.0: "soft targets (Hinton et al.'s T)"},
        default=1.0,
        tag="T",
    ),
)  # fmt: skip


def grid(preset: str, device_type: str) -> list[Case]:
    cases = []
    for n, v in SIZES[preset]:
        for dtype in ("fp32", "bf16"):
            for reduction, upstream in (("none", "random"), ("sum", "ones"), ("mean", "ones")):
                for i, kind in enumerate(("normal", "confident")):
                    t = (1.0, 4.0)[(len(cases) // 2 + i) % 2]  # both temperatures with every other axis value
                    cases.append(
                        Case.of("kl", AXES, n=n, v=v, dtype=dtype, reduction=reduction, upstream=upstream,
                                logits=kind, teacher_temperature=t)
                    )  # fmt: skip
    return cases


def _kl_div(logits, teacher, *, reduction):
    """A correct third-party implementation: F.kl_div over log-softmax, float32 math."""
    log_q = torch.log_softmax(logits.float(), dim=-1)
    rows = F.kl_div(log_q, teacher.float(), log_target=True, reduction="none").sum(-1)
    out = {"none": rows, "sum": rows.sum(), "mean": rows.sum() / rows.shape[0]}[reduction]
    return out.to(logits.dtype)


def _elementwise_mean(logits, teacher, *, reduction):
    """The planted bug: reduction='mean' as F.kl_div's elementwise mean, N*V in the denominator."""
    if reduction != "mean":
        return _kl_div(logits, teacher, reduction=reduction)
    log_q = torch.log_softmax(logits.float(), dim=-1)
    total = F.kl_div(log_q, teacher.float(), log_target=True, reduction="sum")
    return (total / logits.numel()).to(logits.dtype)


KERNEL = KernelSpec(
    name="kl",
    description="KL divergence of softmax(logits) from a teacher distribution (tests only)",
    make_problem=make_problem,
    reference=reference,
    eager=eager,
    run=run_kl,
    quantities=("loss", "grad_logits", "input_unchanged"),
    grid=grid,
    axes=AXES,
    signature="fn(logits, teacher_logprobs, *, reduction) -> loss",
    peer="eager",
    control="torch_kl",
)


def register(registry: Registry) -> None:
    registry.add(
        KERNEL,
        Suite("kl_loss", "kl", "KL loss vs float64", ("loss",)),
        Suite("kl_gradients", "kl", "gradient of the student logits vs float64", ("grad_logits",)),
        Suite("contracts", "kl", "the logits handed in are unchanged", ("input_unchanged",)),
        Provider("torch_kl", "kl", "F.kl_div over log-softmax, float32 math", load=lambda: _kl_div),
        Provider("eager", "kl", "the formula in the logits dtype (the tolerance yardstick)", load=lambda: kl_torch),
        Provider(
            "mutant_elementwise_mean",
            "kl",
            "reduction='mean' divides by N*V (F.kl_div's 'mean') instead of N",
            load=lambda: _elementwise_mean,
            mutant=True,
            targets=({"reduction": "mean"},),
        ),
    )

"""The `flkd` kernel as the harness sees it: its inputs, float64 reference, yardsticks and call.

Student logits hidden @ weight.T, teacher logits teacher_hidden @ teacher_weight.T, then
kernels/distill.py's semantics (suites/families/distill.py). A provider is
`fn(student_hidden, student_weight, teacher_hidden, teacher_weight, *, labels, divergence, beta,
temperature, ignore_index, reduction) -> loss`; the student's hidden and weight get gradients,
the teacher's two tensors are leaves that require grad and must get none (`teacher_no_grad`).
The float64 truth forms both heads' logits in float64; the careful yardstick in float32 from the
same inputs, the student logits' gradient rounded once to a 16-bit dtype before the products
(suites/common/rounding.py) and each gradient once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ligerbench.cases import DTYPES, Case, generator_for
from ligerbench.problems import Outcome, as_handed
from ligerbench.suites.common.rounding import SIXTEEN_BITS, grad_rounded_to, held_as_float32, model_logits
from ligerbench.suites.families import distill as semantics
from ligerbench.suites.families.distill import IGNORE, make_labels, make_upstream, run_loss, upcast
from ligerbench.suites.flkd.axes import TEACHER_WIDER
from ligerbench.suites.flp.spec import lay_out

TENSORS = ("student_hidden", "student_weight", "teacher_hidden", "teacher_weight")


@dataclass
class FLKDProblem:
    student_hidden: torch.Tensor  # as laid out for the case
    student_weight: torch.Tensor  # [V, H]
    teacher_hidden: torch.Tensor  # laid out as the student's, [.., H + TEACHER_WIDER] (self: H)
    teacher_weight: torch.Tensor  # [V, Ht]
    labels: torch.Tensor
    upstream: torch.Tensor
    options: dict
    zero_truth: bool = False  # a teacher equal to the student: the gradients' truth is exactly 0


def make_problem(case: Case, seed: int, device: torch.device) -> FLKDProblem:
    g = generator_for(case, seed)
    n, v, hs = case.n, case.v, case.h
    h = torch.randn(n, hs, generator=g)
    w = torch.randn(v, hs, generator=g) / hs**0.5  # logits ~ N(0, 1)
    if case.logits == "self":
        ht, wt = h.clone(), w.clone()
    else:
        width = hs + TEACHER_WIDER
        ht = torch.randn(n, width, generator=g)
        wt = torch.randn(v, width, generator=g) / width**0.5
        if case.logits == "confident":
            wt = wt * 8.0  # logits of std ~8: most rows' top token near probability 1
    dtype = DTYPES[case.dtype]

    sh, th = (upcast(lay_out(x, case.layout, g), dtype, device) for x in (h, ht))
    rows = tuple(sh.shape[:-1])
    labels = make_labels(rows, v, case.ignore_pattern, g)
    upstream = make_upstream(case.upstream, case.reduction, rows, g)
    options = dict(divergence=case.divergence, beta=case.beta, temperature=case.temperature, ignore_index=IGNORE,
                   reduction=case.reduction)  # fmt: skip
    return FLKDProblem(sh, w.to(dtype).to(device), th, wt.to(dtype).to(device), labels.to(device),
                       as_handed(upstream, device=device), options, zero_truth=case.logits == "self")  # fmt: skip


def run_flkd(fn, problem: FLKDProblem) -> Outcome:
    tensors = {name: getattr(problem, name) for name in TENSORS}
    teacher = ("teacher_hidden", "teacher_weight")
    return run_loss(fn, tensors, ("student_hidden", "student_weight"), teacher, {"labels": problem.labels},
                    problem.options, problem.upstream, tuple(problem.labels.shape))  # fmt: skip


def flkd_semantics(student_hidden, student_weight, teacher_hidden, teacher_weight, labels=None, *, round_to=None,
                   loss=semantics.reference, **options):  # fmt: skip
    """The semantics in PyTorch in the inputs' dtype; round_to: the student logits' gradient
    rounded once to that dtype on its way to the products (the careful yardstick); loss: what is
    taken of the two heads' logits (semantics.natural_magnitude_loss for a truth's scale)."""
    xs = student_hidden @ student_weight.t()
    if round_to is not None:
        xs = grad_rounded_to(xs, round_to)
    xt = teacher_hidden @ teacher_weight.t()
    return loss(xs, xt, labels, **options)


def _in(problem: FLKDProblem, dtype: torch.dtype, round_to=None, loss=semantics.reference, **extra) -> Outcome:
    p = dataclasses.replace(problem, **{name: upcast(getattr(problem, name), dtype) for name in TENSORS},
                            upstream=as_handed(problem.upstream, dtype=dtype),
                            options={**problem.options, **extra})  # fmt: skip

    def fn(*args, **kw):
        return flkd_semantics(*args, round_to=round_to, loss=loss, **kw)

    return run_flkd(fn, p)


def reference(problem: FLKDProblem) -> Outcome:
    """The float64 truth; a self-distilled teacher's gradients (exactly 0) judged against their
    natural magnitude (semantics.natural_magnitude_loss; ligerbench/tolerance.py)."""
    out = _in(problem, torch.float64)
    if problem.zero_truth:
        out.scales = semantics.natural_scales(_in(problem, torch.float64, loss=semantics.natural_magnitude_loss))
    return out


def eager_in_dtype(problem: FLKDProblem, **extra) -> Outcome:
    """The careful yardstick: float32 logits from the unrounded inputs, the student logits'
    gradient rounded once to a 16-bit dtype before the products, each gradient rounded once."""
    dtype = problem.student_weight.dtype
    out = _in(problem, torch.float32, round_to=dtype, **extra)
    for name in ("student_hidden", "student_weight"):
        out.values[f"grad_{name}"] = out.values[f"grad_{name}"].to(dtype)
    return out


def model_code(student_hidden, student_weight, teacher_hidden, teacher_weight, labels=None, **options):
    """Both heads as model code forms them (suites/common/rounding.py, model_logits: each lm_head in its
    inputs' dtype, then `.float()`), then the divergence in float32 as users write it."""
    xs, xt = model_logits(student_hidden, student_weight), model_logits(teacher_hidden, teacher_weight)
    return semantics.reference(xs, xt, labels, **options)


def textbook(problem: FLKDProblem) -> tuple[Outcome, ...]:
    """The default verdict's yardsticks: the semantics as users write them (F.kl_div on
    torch.log_softmax, TRL's generalized_jsd_loss), otherwise as eager_in_dtype; in 16-bit dtypes
    also the model code's form (model_code, on the case's own inputs), except for a provider
    that promises float32 logits (Provider.promises_float32_logits)."""
    forms = (eager_in_dtype(problem, textbook=True),)
    if problem.student_weight.dtype in SIXTEEN_BITS:
        as_written = dataclasses.replace(problem, options={**problem.options, "textbook": True})
        forms += (held_as_float32(run_flkd(model_code, as_written)),)
    return forms

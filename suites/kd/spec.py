"""The `kd` kernel as the harness sees it: its inputs, float64 reference, yardsticks and call.

Semantics: kernels/distill.py's docstring, in PyTorch in suites/families/distill.py. A provider
is `fn(student, teacher, *, labels, teacher_ids, divergence, beta, temperature, ignore_index,
reduction, teacher_grad) -> loss`; the case runner hands both logits exactly as laid out (a
column slice of a padded vocabulary, transposed storage, [B, T, V]), the teacher as a leaf that
requires grad (a gradient it was not asked for shows: `teacher_no_grad`), and runs backward
with the case's upstream.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ligerbench.cases import DTYPES, Case, generator_for
from ligerbench.problems import Outcome, as_handed
from ligerbench.suites.families import distill as semantics
from ligerbench.suites.families import sampler_masks
from ligerbench.suites.families.distill import (
    IGNORE,
    draw_teacher,
    make_labels,
    make_upstream,
    run_loss,
    top_k,
    upcast,
)
from ligerbench.suites.kd.axes import K
from ligerbench.suites.lp.spec import lay_out


@dataclass
class KDProblem:
    student: torch.Tensor  # as laid out for the case, in the case dtype
    teacher: torch.Tensor  # full: laid out as the student, case dtype; top-K: [rows..., K] float32 log-probs
    teacher_ids: torch.Tensor | None  # [rows..., K] int64, or None
    labels: torch.Tensor  # the rows' shape, int64
    upstream: torch.Tensor
    options: dict  # divergence, beta, temperature, ignore_index, reduction, teacher_grad
    zero_truth: bool = False  # a full teacher equal to the student: every gradient's truth is exactly 0


def options_of(case: Case) -> dict:
    return dict(divergence=case.divergence, beta=case.beta, temperature=case.temperature, ignore_index=IGNORE,
                reduction=case.reduction, teacher_grad=case.teacher_grad)  # fmt: skip


def _placed(x: torch.Tensor, layout: str, dtype: torch.dtype, device) -> torch.Tensor:
    return upcast(lay_out(x, layout), dtype, device)


def make_problem(case: Case, seed: int, device: torch.device) -> KDProblem:
    g = generator_for(case, seed)
    x = torch.randn(case.n, case.v, generator=g)
    sampled = case.logits == sampler_masks.KIND
    t = draw_teacher(x, "normal" if sampled else case.logits, g)
    dtype = DTYPES[case.dtype]
    rows = tuple(lay_out(x, case.layout).shape[:-1])
    labels = make_labels(rows, case.v, case.ignore_pattern, g) if sampled else None
    if sampled:  # the student's sampler masks both sides; its labels' tokens stay finite
        x = sampler_masks.masked(x, labels.reshape(case.n, -1), IGNORE, g)
        t = torch.where(torch.isinf(x), float("-inf"), t)
    student = _placed(x, case.layout, dtype, device)
    ids = None
    if case.teacher == "full":
        teacher = _placed(t, case.layout, dtype, device)
    else:
        logp, ids = top_k(t, K)
        teacher, ids = logp.reshape(*rows, -1).to(device), ids.reshape(*rows, -1).to(device)
    if labels is None:
        labels = make_labels(rows, case.v, case.ignore_pattern, g)
    upstream = make_upstream(case.upstream, case.reduction, rows, g)
    return KDProblem(student, teacher, ids, labels.to(device), as_handed(upstream, device=device), options_of(case),
                     zero_truth=case.logits == "self" and case.teacher == "full")  # fmt: skip


def run_kd(fn, problem: KDProblem) -> Outcome:
    grads = ("student", "teacher") if problem.options["teacher_grad"] else ("student",)
    return run_loss(fn, {"student": problem.student, "teacher": problem.teacher}, grads, ("teacher",),
                    {"labels": problem.labels, "teacher_ids": problem.teacher_ids}, problem.options,
                    problem.upstream, tuple(problem.labels.shape))  # fmt: skip


def _in(problem: KDProblem, dtype: torch.dtype, fn=semantics.reference) -> Outcome:
    p = dataclasses.replace(problem, student=upcast(problem.student, dtype), teacher=upcast(problem.teacher, dtype),
                            upstream=as_handed(problem.upstream, dtype=dtype))  # fmt: skip
    return run_kd(fn, p)


def reference(problem: KDProblem) -> Outcome:
    """The float64 truth; a self-distilled teacher's gradients (exactly 0) judged against their
    natural magnitude (semantics.natural_magnitude_loss; ligerbench/tolerance.py)."""
    out = _in(problem, torch.float64)
    if problem.zero_truth:
        out.scales = semantics.natural_scales(_in(problem, torch.float64, semantics.natural_magnitude_loss))
    return out


def eager_in_dtype(problem: KDProblem) -> Outcome:
    """The careful yardstick: the semantics in float32 from the unrounded logits, each gradient
    rounded once to its input's dtype."""
    out = _in(problem, torch.float32)
    for name, t in (("student", problem.student), ("teacher", problem.teacher)):
        key = f"grad_{name}"
        if key in out.values:
            out.values[key] = out.values[key].to(t.dtype)
    return out


def textbook(problem: KDProblem) -> Outcome:
    """The default verdict's yardstick: the semantics as users write them (F.kl_div on
    torch.log_softmax, TRL's generalized_jsd_loss), otherwise as eager_in_dtype."""
    return eager_in_dtype(dataclasses.replace(problem, options={**problem.options, "textbook": True}))

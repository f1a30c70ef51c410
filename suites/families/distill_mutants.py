"""Planted bugs of the distillation kernels (`kd`, `flkd`), one per real bug class (the table below,
with the public reports), each a PyTorch rendering of suites/families/distill.py with the bug in
it, on float32 logits: the verify grid must catch every one, and `ligerbench selftest` shows which
case does.

    bug                        what goes wrong
    jsd_mean_of_logs           the mixture's log taken as the mean of the logs, (1-b) log p + b log q
    temperature_student_only   the teacher left at T = 1 (TRL #5731: an objective silently changed)
    kl_direction_swapped       forward_kl computed as KL(p || q)
    batchmean_counted_rows     batchmean divided by the counted rows (TRL's meaning), not every row
    topk_not_renormalised      a top-K teacher's log-probs used as they come (mass < 1)
    topk_renormalised_twice    its log-normaliser subtracted twice
    teacher_gets_grad          the teacher not detached: it gets a gradient nobody asked for
    ignored_rows_counted       mean divided by every row, ignored ones included (Liger #974 kind)
"""

from __future__ import annotations

import math

import torch

from ligerbench.suites.families import distill as semantics


def buggy(bug: str):
    """fn(student, teacher, labels=None, *, teacher_ids, divergence, beta, temperature, ignore_index,
    reduction, teacher_grad) -> loss, with `bug` planted."""

    def fn(student, teacher, labels=None, *, teacher_ids=None, divergence="forward_kl", beta=0.5, temperature=1.0,
           ignore_index=-100, reduction="mean", teacher_grad=False):  # fmt: skip
        s, t = student.float(), teacher.float()
        if not teacher_grad and bug != "teacher_gets_grad":
            t = t.detach()
        t_temp = 1.0 if bug == "temperature_student_only" else temperature
        lp = semantics._log_softmax(s / temperature, False)
        if teacher_ids is None:
            lq = semantics._log_softmax(t / t_temp, False)
        else:
            z = t / t_temp
            lse = torch.logsumexp(z, dim=-1, keepdim=True)
            lq_k = {"topk_not_renormalised": z, "topk_renormalised_twice": z - 2 * lse}.get(bug, z - lse)
            lq = torch.full_like(lp, -math.inf).scatter(-1, teacher_ids, lq_k)
        if bug == "kl_direction_swapped" and semantics._mode(divergence, beta) == "forward_kl":
            rows = semantics.divergence_rows(lp, lq, "reverse_kl", beta)
        elif bug == "jsd_mean_of_logs" and semantics._mode(divergence, beta) == "jsd":
            p, q = lp.exp(), lq.exp()
            lm = (1.0 - beta) * lp + beta * lq
            rows = beta * (q * (lq - lm)).sum(-1) + (1.0 - beta) * (p * (lp - lm)).sum(-1)
        else:
            rows = semantics.divergence_rows(lp, lq, divergence, beta)
        counted = torch.ones_like(rows, dtype=torch.bool) if labels is None else labels != ignore_index
        rows = torch.where(counted, rows, 0.0)
        if bug == "batchmean_counted_rows" and reduction == "batchmean":
            return rows.sum() / counted.sum().clamp_min(1)
        if bug == "ignored_rows_counted" and reduction == "mean":
            return rows.sum() / max(rows.numel(), 1)
        return semantics.reduce(rows, counted, reduction)

    return fn


def on_head(bug: str):
    """The bug on the logits of two heads: fn(student_hidden, student_weight, teacher_hidden,
    teacher_weight, labels=None, **options) -> loss."""
    inner = buggy(bug)

    def fn(student_hidden, student_weight, teacher_hidden, teacher_weight, labels=None, **options):
        xs = student_hidden.float() @ student_weight.float().t()
        xt = teacher_hidden.float() @ teacher_weight.float().t()
        return inner(xs, xt, labels, **options)

    return fn


# bug -> (what it is, the case slices where it shows; fp32: selftest's time goes to the slices)
BUGS = {
    "jsd_mean_of_logs": ("the JSD mixture's log taken as the mean of the logs",
                         ({"divergence": "jsd", "beta": 0.5, "dtype": "fp32", "logits": "normal"},)),
    "temperature_student_only": ("temperature applied to the student only", ({"temperature": 2.0, "dtype": "fp32"},)),
    "kl_direction_swapped": ("forward KL computed as KL(p || q)",
                             ({"divergence": "forward_kl", "logits": "normal", "dtype": "fp32", "upstream": "ones"},)),
    "batchmean_counted_rows": ("batchmean divided by the counted rows, not every row",
                               ({"reduction": "batchmean", "ignore_pattern": "random"},)),
    "topk_not_renormalised": ("a top-K teacher's log-probs not renormalised over its K ids",
                              ({"teacher": "top8", "dtype": "fp32"},)),
    "topk_renormalised_twice": ("a top-K teacher's log-normaliser subtracted twice",
                                ({"teacher": "top8", "dtype": "fp32"},)),
    "teacher_gets_grad": ("the teacher not detached: a gradient it was not asked for",
                          ({"teacher_grad": False, "logits": "normal", "dtype": "fp32", "divergence": "forward_kl"},)),
    "ignored_rows_counted": ("mean divided by every row, ignored ones included",
                             ({"reduction": "mean", "ignore_pattern": "random", "upstream": "random"},)),
}  # fmt: skip
# the suite each bug must be killed by (tests/test_selftest.py's MUST_KILL reads it)
MUST_KILL = {bug: "contracts" if bug == "teacher_gets_grad" else "correctness" for bug in BUGS}

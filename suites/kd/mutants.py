"""Planted bugs of `kd`: suites/families/distill_mutants.py's bug classes, each on the slices of the grid
where it shows, and one of kd's own on a sampler's masks."""

from __future__ import annotations

import torch

from ligerbench.registry import Provider
from ligerbench.suites.families import sampler_masks
from ligerbench.suites.families.distill_mutants import BUGS, buggy


def _kl_zero_times_inf():
    """The KL divergences as written naively, sum q (log q - log p): a column both sides mask
    gives 0 * (-inf - -inf) = NaN, where the semantics count it 0."""
    from ligerbench.suites.families import distill as semantics

    def fn(student, teacher, labels=None, *, teacher_ids=None, divergence="forward_kl", beta=0.5, temperature=1.0,
           ignore_index=semantics.IGNORE, reduction="mean", teacher_grad=False):  # fmt: skip
        t = teacher if teacher_grad else teacher.detach()
        lp, lq = semantics.log_probs(student.float(), t.float(), teacher_ids, temperature)
        if divergence == "forward_kl":
            rows = (lq.exp() * (lq - lp)).sum(-1)
        elif divergence == "reverse_kl":
            rows = (lp.exp() * (lp - lq)).sum(-1)
        else:
            rows = semantics.divergence_rows(lp, lq, divergence, beta)
        counted = torch.ones_like(rows, dtype=torch.bool) if labels is None else labels != ignore_index
        return semantics.reduce(rows, counted, reduction)

    return fn


PROVIDERS = (
    *(Provider(name=f"mutant_kd_{bug}", kernel="kd", description=about, load=lambda bug=bug: buggy(bug), mutant=True,
               targets=slices) for bug, (about, slices) in BUGS.items()),
    Provider(name="mutant_kd_kl_zero_times_inf", kernel="kd", mutant=True, load=_kl_zero_times_inf,
             description="KL written as sum q (log q - log p): NaN on a column both sides mask (0 * -inf)",
             targets=({"logits": sampler_masks.KIND, "divergence": ("forward_kl", "reverse_kl")},)),
)  # fmt: skip

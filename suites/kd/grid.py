"""The case grid of `kd`, per preset: a core of the crossings the bug classes need, then an
all-pairs covering design (suites/common/covering.py) over every axis."""

from __future__ import annotations

from ligerbench.cases import Case
from ligerbench.suites.common.covering import all_pairs, shape_star, values_at
from ligerbench.suites.families import sampler_masks
from ligerbench.suites.families.distill import allowed
from ligerbench.suites.kd.axes import AXES, case

DTYPES = {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "bf16", "fp16")}
COVERED = ("divergence", "beta", "temperature", "teacher", "teacher_grad", "reduction", "upstream", "ignore_pattern",
           "logits", "layout")  # fmt: skip
DIVERGENCES = ("forward_kl", "reverse_kl", "jsd", "tvd")


def kd_cases(preset: str, device_type: str) -> list[Case]:
    (n0, v0), shapes = shape_star(AXES, preset, ("n", "v"))
    cases: list[Case] = []
    for dtype in DTYPES[device_type]:
        base = case(n=n0, v=v0, dtype=dtype)
        # core: every divergence against each teacher it allows, at a temperature, with a
        # teacher gradient, against itself and against a confident teacher
        for d in DIVERGENCES:
            for k in ("full", "top8"):
                cases += [base.replace(divergence=d, teacher=k, temperature=2.0, teacher_grad=True)]
            cases += [base.replace(divergence=d, logits=kind) for kind in ("self", "confident")]
        cases += [base.replace(divergence="jsd", beta=b, teacher_grad=True) for b in (0.1, 0.0, 1.0)]
        # the reductions where the counts differ (ignored rows), and one upstream each
        cases += [base.replace(reduction=r, upstream="random") for r in ("none", "sum", "mean", "batchmean")]
        cases += [base.replace(n=n, v=v, divergence="jsd") for n, v in dict.fromkeys(shapes)]
        # the sampler's masks on both sides: a few cases of their own, outside the covering (whose
        # design stays as it was); a full teacher (a top-K one of a row with one finite logit would
        # hand -inf log-probs)
        cases += [
            base.replace(
                divergence=d, logits=sampler_masks.KIND, reduction="none", upstream="random", teacher_grad=d != "tvd"
            )
            for d in DIVERGENCES
        ]
        rows = all_pairs(values_at(AXES, COVERED, preset, leave_out=(sampler_masks.KIND,)), allowed=allowed,
                         covered=[c.params for c in cases if c.logits != sampler_masks.KIND])  # fmt: skip
        cases += [base.replace(**row) for row in rows]
    return [c for c in dict.fromkeys(cases) if allowed(dict(c.params))]

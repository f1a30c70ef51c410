"""The case grid of `flkd`, per preset: a core of the crossings the bug classes need, then an
all-pairs covering design (suites/common/covering.py) over every axis."""

from __future__ import annotations

from ligerbench.cases import Case
from ligerbench.suites.common.covering import all_pairs, shape_star, values_at
from ligerbench.suites.families.distill import allowed
from ligerbench.suites.flkd.axes import AXES, case

DTYPES = {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "bf16", "fp16")}
COVERED = ("divergence", "beta", "temperature", "reduction", "upstream", "ignore_pattern", "logits", "layout")


def flkd_cases(preset: str, device_type: str) -> list[Case]:
    (n0, v0, h0), shapes = shape_star(AXES, preset, ("n", "v", "h"))
    cases: list[Case] = []
    for dtype in DTYPES[device_type]:
        base = case(n=n0, v=v0, h=h0, dtype=dtype)
        for d in ("forward_kl", "reverse_kl", "jsd", "tvd"):
            cases += [base.replace(divergence=d, temperature=2.0), base.replace(divergence=d, logits="self")]
        cases += [base.replace(reduction=r, upstream="random") for r in ("none", "sum", "mean", "batchmean")]
        cases += [base.replace(n=n, v=v, h=h, divergence="jsd") for n, v, h in sorted(set(shapes))]
        rows = all_pairs(values_at(AXES, COVERED, preset), allowed=allowed,
                         covered=[c.params for c in cases])  # fmt: skip
        cases += [base.replace(**row) for row in rows]
    return [c for c in dict.fromkeys(cases) if allowed(dict(c.params))]

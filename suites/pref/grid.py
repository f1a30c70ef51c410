"""The case grid of `pref`: every loss variant (sigmoid with and without label smoothing, ipo, kto
with even and skewed class weights) at two (vocabulary, beta) points in each dtype, and each loss
type split into two micro-batches. Label smoothing and class weights are crossed only with the
loss they belong to (the op refuses them elsewhere)."""

from __future__ import annotations

from ligerbench.cases import Case
from ligerbench.suites.pref.axes import AXES, case

DTYPES = {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "bf16")}
VARIANTS = (
    dict(loss_type="sigmoid"),
    dict(loss_type="sigmoid", label_smoothing=0.1),
    dict(loss_type="ipo"),
    dict(loss_type="kto"),
    dict(loss_type="kto", weights="skewed"),
)
SPLIT = (dict(loss_type="sigmoid", label_smoothing=0.1), dict(loss_type="ipo"), dict(loss_type="kto", weights="skewed"))


def pref_cases(preset: str, device_type: str) -> list[Case]:
    axes = {a.name: a for a in AXES}
    first = {name: axes[name].values_for(preset)[0] for name in ("b", "t", "h")}
    vs = axes["v"].values_for(preset)
    points = ((vs[0], 0.1), (vs[-1], 0.5))  # the odd vocabulary (quick) with the larger beta
    cases = []
    for dtype in DTYPES[device_type]:
        for v, beta in points:
            cases += [case(**first, v=v, beta=beta, dtype=dtype, **var) for var in VARIANTS]
        cases += [case(**first, v=vs[0], dtype=dtype, split="accum2", **var) for var in SPLIT]
    return list(dict.fromkeys(cases))

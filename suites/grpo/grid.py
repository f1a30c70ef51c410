"""The case grid of `grpo`: every loss type at each importance level and KL estimator, then an
all-pairs covering design (suites/covering.py) over the rest, so every pair of values of any two
axes meets in some case (each split with each loss type included)."""

from __future__ import annotations

from ligerbench.cases import Case
from ligerbench.suites.covering import all_pairs
from ligerbench.suites.grpo.axes import AXES, case

DTYPES = {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "bf16")}
COVERED = ("loss_type", "importance_level", "kl", "temperature", "eps", "split", "dtype", "v")


def grpo_cases(preset: str, device_type: str) -> list[Case]:
    axes = {a.name: a for a in AXES}
    first = {name: axes[name].values_for(preset)[0] for name in ("b", "t", "h", "v")}
    base = case(**first)
    cases = [base.replace(loss_type=lt, kl=kl) for lt in axes["loss_type"].values for kl in ("none", "k3")]
    cases += [base.replace(loss_type=lt, split=s) for lt in ("grpo", "dr_grpo", "dapo", "cispo")
              for s in ("accum2", "dp2")]  # fmt: skip
    values = {name: axes[name].values_for(preset) for name in COVERED}
    values["dtype"] = DTYPES[device_type]
    rows = all_pairs(values, covered=[c.params for c in cases])
    cases += [base.replace(**row) for row in rows]
    return list(dict.fromkeys(cases))

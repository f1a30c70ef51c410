"""The case grid of `grpo`: every loss type at each importance level and KL estimator, then an
all-pairs covering design (suites/common/covering.py) over the rest, so every pair of values of any two
axes meets in some case (each split of COVERED_SPLITS with each loss type included), then the
split step's spreads (SPREAD_CASES)."""

from __future__ import annotations

from ligerbench.cases import Case
from ligerbench.suites.common.covering import all_pairs, values_at
from ligerbench.suites.grpo.axes import AXES, case

DTYPES = {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "bf16")}
COVERED = ("loss_type", "importance_level", "kl", "temperature", "eps", "split", "dtype", "v")
# The splits the covering design pairs with every other axis value; the 4-piece splits and the
# spreads come in SPREAD_CASES alone (each pairing is seconds of Triton's interpreter in CI).
COVERED_SPLITS = ("none", "accum2", "dp2")
# The split step with uneven pieces, one token in the step and an empty piece
# (suites/common/split_step.py): each normaliser (per sequence: grpo, dr_grpo; per token: dapo, cispo)
# on the spread its local form shows on, 2 and 4 pieces, data parallel and accumulated, one in
# bf16; and an empty piece under the per-sequence mean (its empty completions still count in B).
# Five cases, ~2 s each through the interpreter: CI's budget.
SPREAD_CASES = (
    {"loss_type": "grpo", "split": "dp2", "spread": "uneven"},
    {"loss_type": "dr_grpo", "split": "accum2", "spread": "uneven", "dtype": "bf16"},
    {"loss_type": "dapo", "split": "dp4", "spread": "one_token"},
    {"loss_type": "cispo", "split": "accum4", "spread": "empty_piece"},
    {"loss_type": "grpo", "split": "dp4", "spread": "empty_piece", "kl": "k3"},
)


def grpo_cases(preset: str, device_type: str) -> list[Case]:
    axes = {a.name: a for a in AXES}
    first = {name: axes[name].values_for(preset)[0] for name in ("b", "t", "h", "v")}
    base = case(**first)
    cases = [base.replace(loss_type=lt, kl=kl) for lt in axes["loss_type"].values for kl in ("none", "k3")]
    cases += [base.replace(loss_type=lt, split=s) for lt in ("grpo", "dr_grpo", "dapo", "cispo")
              for s in ("accum2", "dp2")]  # fmt: skip
    values = values_at(AXES, COVERED, preset)
    values["dtype"] = DTYPES[device_type]
    values["split"] = COVERED_SPLITS
    rows = all_pairs(values, covered=[c.params for c in cases])
    cases += [base.replace(**row) for row in rows]
    cases += [base.replace(**params) for params in SPREAD_CASES]
    return list(dict.fromkeys(cases))

"""The case grid of `flp`, per preset: a core of the crossings the bug classes need, then an
all-pairs covering design (suites/common/covering.py) over every axis."""

from __future__ import annotations

from ligerbench.cases import Case
from ligerbench.suites.common.covering import all_pairs, shape_star, values_at
from ligerbench.suites.flp.axes import AXES, case

DTYPES = {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "bf16", "fp16")}
# A hidden size every peer's declared limits take (verl's fused head asserts H % 128 == 0): one
# plain case a dtype, so no dtype of a peer's domain is out of the audit's reach
PEER_HIDDEN = 128
COVERED = ("bias", "temperature", "softcap", "logit_scale", "targets", "upstream", "ignore_pattern", "logits",
           "layout")  # fmt: skip


def allowed(row: dict) -> bool:
    # 'shifted' logits come in through the bias
    return not (row.get("logits") == "shifted" and row.get("bias") is False)


def flp_cases(preset: str, device_type: str) -> list[Case]:
    (n0, v0, h0), shapes = shape_star(AXES, preset, ("n", "v", "h"))
    cases: list[Case] = []
    for dtype in DTYPES[device_type]:
        base = case(n=n0, v=v0, h=h0, dtype=dtype)
        cases += [base.replace(temperature=t, upstream=u) for t in (0.6, 1.5) for u in ("logp", "entropy")]
        cases += [base.replace(softcap=30.0, logit_scale=0.5, logits=k) for k in ("normal", "peaked")]
        cases += [base.replace(bias=True, logits="shifted", upstream=u) for u in ("both", "entropy")]
        cases += [base.replace(layout=lay, targets=k) for lay in ("column_major", "kept_slice") for k in (1, 3)]
        cases += [base.replace(n=n, v=v, h=h) for n, v, h in sorted(set(shapes))]
        cases.append(base.replace(h=PEER_HIDDEN))  # inside verl's fused head's limits, in every dtype
        rows = all_pairs(values_at(AXES, COVERED, preset), allowed=allowed,
                         covered=[c.params for c in cases])  # fmt: skip
        cases += [base.replace(**row) for row in rows]
    return list(dict.fromkeys(cases))

"""The case grid of `lp`, per preset: a core of the crossings the bug classes need, then an
all-pairs covering design (suites/common/covering.py) over every axis, so every pair of values of any
two axes meets in some case."""

from __future__ import annotations

from ligerbench.cases import Case
from ligerbench.suites.common.covering import all_pairs, shape_star, values_at
from ligerbench.suites.families import sampler_masks
from ligerbench.suites.lp.axes import AXES, case

DTYPES = {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "bf16", "fp16")}
COVERED = ("temperature", "softcap", "logit_scale", "targets", "upstream", "ignore_pattern", "logits", "layout")


# the last rows of 32768 x 128256 bf16 logits (4.2e9 elements, Llama-3's head) against the same rows
# alone (the past_int32 suite alone runs them: no float64 truth of that size is formed); GPU only
LAST_ROWS: dict[str, tuple[int, int]] = {"full": (32768, 128256)}


def last_rows_cases(preset: str, device_type: str) -> tuple[Case, ...]:
    if preset not in LAST_ROWS or device_type != "cuda":
        return ()
    n, v = LAST_ROWS[preset]
    return (case(n=n, v=v, dtype="bf16", upstream="both"),)


# the sampler's masks (suites/families/sampler_masks.py): a vocabulary of several blocks, so that the
# wholly -inf middle run holds whole blocks; with a softcap and temperature, with K targets, and the
# entropy's gradient alone (where 0 * -inf = 0 must hold in backward too)
MASKED_V = {"quick": 4099, "full": 151936}
SAMPLED = ({}, {"softcap": 30.0, "temperature": 0.6}, {"targets": 3, "upstream": "entropy"})


def lp_cases(preset: str, device_type: str) -> list[Case]:
    (n0, v0), shapes = shape_star(AXES, preset, ("n", "v"))
    cases: list[Case] = []
    for dtype in DTYPES[device_type]:
        base = case(n=n0, v=v0, dtype=dtype)
        # core: each bug class's slice, with the options it interacts with
        cases += [base.replace(temperature=t, upstream=u) for t in (0.6, 1.5) for u in ("logp", "entropy")]
        cases += [base.replace(softcap=30.0, logit_scale=0.5, logits=k) for k in ("normal", "shifted", "peaked")]
        cases += [base.replace(layout="padded_vocab", softcap=c, upstream="entropy") for c in (0.0, 30.0)]
        cases += [base.replace(logits="shifted", upstream=u) for u in ("both", "entropy")]
        cases += [base.replace(n=n, v=v, targets=k) for n, v in dict.fromkeys(shapes) for k in (1, 3)]
        # the sampler's masks: a few cases of their own, outside the covering (whose design stays as it was)
        cases += [base.replace(v=MASKED_V[preset], logits=sampler_masks.KIND, **o) for o in SAMPLED]
        rows = all_pairs(values_at(AXES, COVERED, preset, leave_out=(sampler_masks.KIND,)),
                         covered=[c.params for c in cases if c.logits != sampler_masks.KIND])  # fmt: skip
        cases += [base.replace(**row) for row in rows]
    cases += last_rows_cases(preset, device_type)
    return list(dict.fromkeys(cases))

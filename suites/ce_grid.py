"""The case grid of the `ce` kernel, per preset.

A full cross product (4 reductions x 7 ignore patterns x 8 options x 3 logits kinds x shapes x
dtypes) would be thousands of cases; the interpreter on CPU runs a few per second. Instead the
grid crosses, for every dtype, each axis with the ones it interacts with:
  A  reduction x ignore pattern        (docs/bugs.md, bug 1: a leading run with reduction none)
  B  reduction x option                 (each option's gradient under each reduction)
  C  logits kind x option x reduction   (confident and large logits: docs/bugs.md, bug 6, softcap saturation)
  D  shape x reduction, and shape x 'all' options (odd vocab sizes, one token)
Case order is stable and cases are unique.
"""

from __future__ import annotations

from ligerbench.cases import IGNORE_PATTERNS, OPTIONS, Case

# (reduction, upstream gradient): 'none' is checked with ones and with random per-row values
REDUCTION_VARIANTS = (("none", "ones"), ("none", "random"), ("mean", "ones"), ("sum", "random"))

SIZES = {
    # preset: (base tokens, base vocab, odd shapes (tokens, vocab))
    # quick: Triton's interpreter runs one program (row) at a time, so time grows with tokens
    "quick": (16, 1000, ((16, 1), (16, 3), (8, 4099), (1, 1000))),
    "full": (1024, 32000, ((512, 1), (512, 3), (512, 4099), (1, 32000), (1024, 128256), (256, 256000))),
}
DTYPES = {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "bf16", "fp16")}


def ce_cases(preset: str, device_type: str) -> list[Case]:
    if preset not in SIZES:
        raise ValueError(f"no ce grid for preset {preset!r}; expected one of {tuple(SIZES)}")
    n, v, shapes = SIZES[preset]
    cases: list[Case] = []
    for dtype in DTYPES[device_type]:
        base = Case(kernel="ce", n=n, v=v, dtype=dtype)
        for reduction, upstream in REDUCTION_VARIANTS:
            red = base.replace(reduction=reduction, upstream=upstream)
            cases += [red.replace(ignore_pattern=p) for p in IGNORE_PATTERNS]  # A
            cases += [red.replace(option=o) for o in OPTIONS]  # B
            # C: softcap saturates on large logits; z-loss and smoothing move confident rows most
            cases += [red.replace(logits="confident", option=o) for o in ("plain", "softcap", "z_loss", "all")]
            cases += [red.replace(logits="large", option=o) for o in ("plain", "softcap", "all")]
            for sn, sv in shapes:  # D
                cases += [red.replace(n=sn, v=sv), red.replace(n=sn, v=sv, option="all")]
    return list(dict.fromkeys(cases))

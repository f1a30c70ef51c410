"""The case grid of the `flce` kernel (fused linear + cross entropy), per preset.

The same axes as `ce` (suites/ce/grid.py), plus what only the fused kernel has: a bias or none,
hidden sizes that are not multiples of anything, and chunking. Chunking is exercised by the
provider `flce_ours_small_chunks` (5-token chunks, see suites/flce/providers.py) on every case: no
token count below is a multiple of 5, so the last chunk is always partial, and the
leading_run (first 60% ignored: rows 0-6 of 12 hold the whole first chunk) and all patterns leave whole
chunks ignored.

On GPU (`full`) the axes are crossed as in `ce`. On CPU (`quick`, Triton's interpreter, ~15 ms
per token row per call of ours, so 12 tokens) the grid keeps every value of every axis but pairs them sparsely:
  A  ignore pattern x {none with random upstream (docs/bugs.md, bug 1), mean}
  B  option x {sum with a random upstream scalar, none with random upstream}, half with bias
  C  logits kind (confident: docs/bugs.md, bug 6; large) x {plain, all} x {mean, none random}
  D  odd shapes (one token, odd hidden and vocab sizes), each with one reduction variant in
     turn, with bias and 'all' options and without
  E  chunk count (bf16, MANY_CHUNK_TOKENS tokens): the providers ours_{fp32,auto}_72_chunks
     (suites/flce/providers.py) cut these into 72 chunks, past the 64 where weight-gradient accumulation
     error shows, and ours_dtype_32_chunks into the 32 "dtype" is claimed for; ours (default
     budget) runs them as one chunk and ours_small_chunks with a partial last chunk. Chunking
     is a setting of the caller (chunk size, accumulation mode), not of the inputs, so it is a
     provider axis, not a case axis.
  S  (every preset, last) the split step at the base shape: data parallel and gradient
     accumulation, 2 and 4 pieces, uneven, one-token and empty pieces (split_cases).
  R  (every preset, last) backward twice through one forward (suites/common/retained_backward.py).
Then, in every preset, an all-pairs covering design (suites/common/covering.py) adds the cases needed
for every pair of values of any two axes to appear together in some case, over: dtype,
(reduction, upstream) (cases.UPSTREAMS), ignore pattern, option, logits kind, layout
(axes.py: 2-D, [B, T, H], a logits_to_keep slice), bias and shape. Not the full cross
product (thousands of cases per dtype).
Case order is stable and cases are unique.
"""

from __future__ import annotations

from ligerbench.cases import IGNORE_PATTERNS, OPTIONS, Case
from ligerbench.suites.ce.grid import loss_axes, loss_case, loss_row
from ligerbench.suites.common.covering import all_pairs
from ligerbench.suites.flce.axes import LAYOUT, case

REDUCTION_VARIANTS = (("none", "ones"), ("none", "random"), ("mean", "ones"), ("sum", "random"))
SIZES = {
    # preset: (tokens, vocab, hidden, odd shapes (tokens, vocab, hidden))
    "quick": (12, 256, 32, ((1, 256, 32), (11, 257, 17), (17, 100, 7))),
    "full": (4096, 32000, 1024, ((1, 32000, 1024), (4099, 32001, 1031), (1001, 128256, 576), (777, 256000, 257))),
}
DTYPES = {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "bf16", "fp16")}
# E: tokens of the many-chunk cases (72 chunks of 1 token on CPU; on GPU the chunk providers cut
# the base shape into 72 chunks too). 72 % 5 = 2: ours_small_chunks' last chunk is partial.
MANY_CHUNK_TOKENS = {"quick": 72, "full": 4096}
# none: backward recomputes every chunk with the per-row upstream (masked: exact-zero rows);
# sum with a random scalar: the gradients formed in forward, then scaled
MANY_CHUNK_VARIANTS = (("none", "masked"), ("sum", "random"))


def flce_cases(preset: str, device_type: str) -> list[Case]:
    if preset not in SIZES:
        raise ValueError(f"no flce grid for preset {preset!r}; expected one of {tuple(SIZES)}")
    n, v, h, shapes = SIZES[preset]
    dense = preset != "quick"
    cases: list[Case] = []
    for dtype in DTYPES[device_type]:
        base = case(n=n, v=v, h=h, dtype=dtype)
        reds = {rv: base.replace(reduction=rv[0], upstream=rv[1]) for rv in REDUCTION_VARIANTS}
        pair_a = tuple(reds.values()) if dense else (reds[("none", "random")], reds[("mean", "ones")])
        pair_b = tuple(reds.values()) if dense else (reds[("sum", "random")], reds[("none", "random")])
        for red in pair_a:  # A
            cases += [red.replace(ignore_pattern=p) for p in IGNORE_PATTERNS]
        for i, option in enumerate(OPTIONS):  # B
            for red in pair_b:
                cases.append(red.replace(option=option, bias=(i % 2 == 1)))
                if dense:
                    cases.append(red.replace(option=option, bias=(i % 2 == 0)))
        for kind in ("confident", "large"):  # C
            for option in ("plain", "all") if not dense else ("plain", "softcap", "z_loss", "all"):
                for red in (reds[("mean", "ones")], reds[("none", "random")]) if not dense else reds.values():
                    cases.append(red.replace(logits=kind, option=option, bias=(option == "all")))
        for i, (sn, sv, sh) in enumerate(shapes):  # D
            variants = tuple(reds.values())
            for red in variants if dense else (variants[(i + 1) % len(variants)],):
                cases += [red.replace(n=sn, v=sv, h=sh, bias=True, option="all"), red.replace(n=sn, v=sv, h=sh)]
    for reduction, upstream in MANY_CHUNK_VARIANTS:  # E
        many = case(n=MANY_CHUNK_TOKENS[preset], v=v, h=h, dtype="bf16", bias=True)
        cases.append(many.replace(reduction=reduction, upstream=upstream))
    cases += covering(n, v, h, shapes, DTYPES[device_type], cases)
    cases += split_cases(case(n=n, v=v, h=h, reduction="mean", upstream="ones"))
    cases += retained_cases(case(n=n, v=v, h=h))
    return list(dict.fromkeys(cases))


def retained_cases(base: Case) -> list[Case]:
    """R (module docstring): backward twice through one forward, as ce's (suites/ce/grid.py), the
    first upstream never 1: each reduction, both dtypes, a bias, every option at once on one."""
    base = base.replace(backward="retained")
    return [
        base.replace(reduction="mean", upstream="grad_scaler", bias=True),
        base.replace(reduction="none", upstream="random", dtype="bf16"),
        base.replace(reduction="sum", upstream="random", option="all"),
    ]


def split_cases(base: Case) -> list[Case]:
    """S (module docstring): the split step (suites/common/split_step.py), as ce's (suites/ce/grid.py):
    the mean under each split and spread at least once, with a bias and with every option (class
    weights: a weighted denominator), bf16, and the sum."""
    return [
        base.replace(split="dp2", spread="uneven", bias=True),
        base.replace(split="dp4", spread="one_token"),
        base.replace(split="accum2", spread="empty_piece", dtype="bf16"),
        base.replace(split="accum4", spread="uneven", option="all", bias=True, upstream="grad_scaler"),
        base.replace(split="dp2", spread="one_token", reduction="sum", upstream="random"),
    ]


def axes(n: int, v: int, h: int, shapes, dtypes) -> dict[str, tuple]:
    return loss_axes(LAYOUT.values, ((n, v, h), *shapes), dtypes, bias=(False, True))


def allowed(row: dict) -> bool:
    """Combinations no case may have."""
    # fp16 cannot hold 65536 x a sum's gradient: eager and ours overflow alike
    return not (row.get("dtype") == "fp16" and row.get("variant") == ("sum", "grad_scaler"))


def as_row(case: Case) -> dict:
    return loss_row(case, (case.n, case.v, case.h), "bias")


def covering(n: int, v: int, h: int, shapes, dtypes, core: list[Case]) -> list[Case]:
    """The cases an all-pairs design adds to `core` (see the module docstring)."""
    rows = all_pairs(axes(n, v, h, shapes, dtypes), allowed=allowed, covered=[as_row(c) for c in core])
    return [loss_case(case, r, ("n", "v", "h"), "bias") for r in rows]

"""The case grid of the `ce` kernel, per preset.

A full cross product (4 reductions x 7 ignore patterns x 8 options x 3 logits kinds x shapes x
dtypes) would be thousands of cases; the interpreter on CPU runs a few per second. Instead the
grid crosses, for every dtype, each axis with the ones it interacts with:
  A  reduction x ignore pattern        (docs/bugs.md, bug 1: a leading run with reduction none)
  B  reduction x option                 (each option's gradient under each reduction)
  C  logits kind x option x reduction   (confident and large logits: docs/bugs.md, bug 6, softcap saturation)
  D  shape x reduction, and shape x 'all' options (odd vocab sizes, one token)
  T  (quick only, added after the covering so that it leaves the design as it was) the
     triggering pairs of planted bugs the covering alone crossed thinly (measured: label smoothing
     with a class as ignore_index met in 2 of 298 cases, fp32 only; exact-zero upstream rows in 5;
     the padded-vocabulary stride in 8), each in both dtypes and every reduction it applies to: at
     least 4 cases per dtype each.
  S  (every preset) the split step (suites/common/split_step.py): data parallel and gradient
     accumulation, 2 and 4 pieces, with uneven, one-token and empty pieces (split_cases).
  R  (every preset) backward twice through one forward (suites/common/retained_backward.py).
  F  (every preset, last) every logit below -1e4: the softmax's shift invariance far from 0.
These are the cases for the known bugs' interactions, all in the 2-D layout with the upstream
gradients of REDUCTION_VARIANTS. Then, in every preset, an all-pairs covering design
(suites/common/covering.py) adds the cases needed for every pair of values of any two axes to appear
together in some case, over: dtype, (reduction, upstream) (cases.UPSTREAMS: ones, random,
masked rows; 1/8 and 65536 scalars), ignore pattern, option, logits kind, layout (axes.py:
2-D, [B, T, V], a padded-vocabulary column slice, transposed storage) and shape. Not the full
cross product (~30 000 cases per dtype): a bug that needs three axis values at once is found only
if the core above, or a mutant's targeted slice, holds that triple.
Case order is stable and cases are unique.
"""

from __future__ import annotations

from ligerbench.cases import IGNORE_PATTERNS, LOGITS_KINDS, OPTIONS, UPSTREAMS, Case
from ligerbench.suites.ce.axes import LAYOUT, case
from ligerbench.suites.common.covering import all_pairs

# (reduction, upstream gradient): 'none' is checked with ones and with random per-row values
REDUCTION_VARIANTS = (("none", "ones"), ("none", "random"), ("mean", "ones"), ("sum", "random"))

SIZES = {
    # preset: (base tokens, base vocab, odd shapes (tokens, vocab))
    # quick: Triton's interpreter runs one program (row) at a time, so time grows with tokens
    "quick": (16, 1000, ((16, 1), (16, 3), (8, 4099), (1, 1000))),
    "full": (1024, 32000, ((512, 1), (512, 3), (512, 4099), (1, 32000), (1024, 128256), (256, 256000))),
}
DTYPES = {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "bf16", "fp16")}
THIN = ("quick",)  # the presets that get T (CI's; on a GPU the full grid's time is the budget)
# E: logits of more than 2**31 elements, where a 32-bit row offset overflows: 16385 x 131072 in bf16
# on a GPU (4.3 GB of logits). Its float64 truth and its yardstick are formed a block of rows at a
# time and compared a block at a time (suites/ce/spec.py rowwise, ligerbench/tolerance.py): whole,
# they ran out of an H100's memory (17 GB per float64 copy).
PAST_INT32: dict[str, tuple[int, int]] = {"full": (16385, 131072)}
# F: the last rows of 32768 x 128256 bf16 logits (4.2e9 elements, Llama-3's head) against the same
# rows alone (the past_int32 suite alone runs them: no float64 truth of that size is formed); GPU only
LAST_ROWS: dict[str, tuple[int, int]] = {"full": (32768, 128256)}


def last_rows_cases(preset: str, device_type: str) -> tuple[Case, ...]:
    if preset not in LAST_ROWS or device_type != "cuda":
        return ()
    n, v = LAST_ROWS[preset]
    return (case(n=n, v=v, dtype="bf16", reduction="none", upstream="random"),)


def ce_cases(preset: str, device_type: str) -> list[Case]:
    if preset not in SIZES:
        raise ValueError(f"no ce grid for preset {preset!r}; expected one of {tuple(SIZES)}")
    n, v, shapes = SIZES[preset]
    cases: list[Case] = []
    for dtype in DTYPES[device_type]:
        base = case(n=n, v=v, dtype=dtype)
        for reduction, upstream in REDUCTION_VARIANTS:
            red = base.replace(reduction=reduction, upstream=upstream)
            cases += [red.replace(ignore_pattern=p) for p in IGNORE_PATTERNS]  # A
            cases += [red.replace(option=o) for o in OPTIONS]  # B
            # C: softcap saturates on large logits; z-loss and smoothing move confident rows most
            cases += [red.replace(logits="confident", option=o) for o in ("plain", "softcap", "z_loss", "all")]
            cases += [red.replace(logits="large", option=o) for o in ("plain", "softcap", "all")]
            for sn, sv in shapes:  # D
                cases += [red.replace(n=sn, v=sv), red.replace(n=sn, v=sv, option="all")]
    cases += covering(n, v, shapes, DTYPES[device_type], cases)
    if preset in THIN:
        cases += thin(n, v, DTYPES[device_type])
    cases += split_cases(n, SPLIT_VOCAB.get(preset, v))
    cases += retained_cases(n, SPLIT_VOCAB.get(preset, v))
    cases += far_below_cases(n, SPLIT_VOCAB.get(preset, v))
    if preset in PAST_INT32:
        big_n, big_v = PAST_INT32[preset]
        cases.append(case(n=big_n, v=big_v, dtype="bf16", reduction="mean", upstream="ones"))
    cases += last_rows_cases(preset, device_type)
    return list(dict.fromkeys(cases))


def thin(n: int, v: int, dtypes) -> list[Case]:
    """T (module docstring): after the covering, so the design's own cases stay as they were."""
    out = []
    for dtype in dtypes:
        base = case(n=n, v=v, dtype=dtype)
        for reduction, upstream in REDUCTION_VARIANTS:
            red = base.replace(reduction=reduction, upstream=upstream)
            out += [red.replace(option=o, ignore_pattern="index_is_class") for o in ("label_smoothing", "all")]
            out.append(red.replace(layout="padded_vocab"))
        none = base.replace(reduction="none", upstream="masked")
        out += [none.replace(option=o) for o in ("plain", "label_smoothing", "token_weight", "all")]
    return out


# S on CPU: a tiny head (Triton's interpreter pays per block of the vocabulary); a split's
# normaliser does not depend on it. On a GPU the preset's own shape.
SPLIT_VOCAB = {"quick": 256}


def split_cases(n: int, v: int) -> list[Case]:
    """S (module docstring): after the rest, so the cases before keep their order. Each split with
    the spreads the field's normaliser bugs show on (suites/common/split_step.py): the mean under each
    split and spread at least once, a weighted mean (class weights: its denominator a weight sum),
    bf16, and the sum (no normaliser: an empty or one-token piece must still add its share)."""
    base = case(n=n, v=v, reduction="mean", upstream="ones")
    return [
        base.replace(split="dp2", spread="uneven"),
        base.replace(split="dp4", spread="one_token"),
        base.replace(split="accum4", spread="empty_piece", upstream="grad_scaler"),
        base.replace(split="accum2", spread="uneven", option="all"),
        base.replace(split="dp2", spread="empty_piece", dtype="bf16"),
        base.replace(split="accum4", spread="one_token", reduction="sum", upstream="random"),
    ]


def retained_cases(n: int, v: int) -> list[Case]:
    """R (module docstring): backward twice through one forward (suites/common/retained_backward.py),
    the first upstream never 1 (scaled in place by 1 a buffer is unchanged): each reduction, both
    dtypes, every option at once on one."""
    base = case(n=n, v=v, backward="retained")
    return [
        base.replace(reduction="mean", upstream="grad_scaler"),
        base.replace(reduction="none", upstream="random", dtype="bf16"),
        base.replace(reduction="sum", upstream="random", option="all"),
    ]


def far_below_cases(n: int, v: int) -> list[Case]:
    """F (module docstring): every logit below -1e4, where a running max started at 0 underflows
    every exponential (verl #7439): each reduction, both dtypes, a z-loss on one (its lse squared
    is 1e8 there). No softcap: it saturates every logit this far out, and the gradient's truth is
    then 0 (a tanh one ulp from -1, which a device may give, leaves 2**-23 of slope)."""
    base = case(n=n, v=v, logits="far_below")
    return [
        base.replace(reduction="mean", upstream="ones"),
        base.replace(reduction="none", upstream="random", dtype="bf16"),
        base.replace(reduction="sum", upstream="random", option="z_loss"),
    ]


def loss_axes(layouts: tuple, shapes: tuple, dtypes, **extra: tuple) -> dict[str, tuple]:
    """The axes of a cross entropy all-pairs design (ce's, flce's), in the order it pairs them:
    the loss's own, the kernel's layouts, `extra` (flce's bias), then the shapes."""
    return {
        "dtype": tuple(dtypes),
        "variant": tuple((r, u) for r, ups in UPSTREAMS.items() for u in ups),
        "layout": layouts,
        "option": tuple(OPTIONS),
        "ignore_pattern": tuple(IGNORE_PATTERNS),
        "logits": LOGITS_KINDS,
        **extra,
        "shape": shapes,
    }


def loss_row(case: Case, shape: tuple, *extra: str) -> dict:
    """A cross entropy case as a row of loss_axes (its `extra` axes by name)."""
    return {
        "dtype": case.dtype,
        "variant": (case.reduction, case.upstream),
        "layout": case.layout,
        "option": case.option,
        "ignore_pattern": case.ignore_pattern,
        "logits": case.logits,
        **{k: getattr(case, k) for k in extra},
        "shape": shape,
    }


def loss_case(make, row: dict, shape: tuple[str, ...], *extra: str) -> Case:
    """The case `make` (an axes module's case()) builds from a row of loss_axes, its shape's sizes
    named by `shape`."""
    variant = {"reduction": row["variant"][0], "upstream": row["variant"][1]}
    same = ("dtype", "layout", "option", "ignore_pattern", "logits", *extra)
    return make(**dict(zip(shape, row["shape"], strict=True)), **variant, **{k: row[k] for k in same})


def axes(n: int, v: int, shapes, dtypes) -> dict[str, tuple]:
    return loss_axes(LAYOUT.values, ((n, v), *shapes), dtypes)


def allowed(row: dict) -> bool:
    """Combinations no case may have."""
    variant, shape = row.get("variant"), row.get("shape")
    # confident logits need a class besides the target's
    if row.get("logits") == "confident" and shape is not None and shape[1] < 2:
        return False
    # fp16 cannot hold 65536 x a sum's gradient (|p - 1| near 1): eager and ours overflow alike
    if row.get("dtype") == "fp16" and variant == ("sum", "grad_scaler"):
        return False
    return True


def as_row(case: Case) -> dict:
    return loss_row(case, (case.n, case.v))


def covering(n: int, v: int, shapes, dtypes, core: list[Case]) -> list[Case]:
    """The cases an all-pairs design adds to `core` (see the module docstring)."""
    rows = all_pairs(axes(n, v, shapes, dtypes), allowed=allowed, covered=[as_row(c) for c in core])
    return [loss_case(case, r, ("n", "v")) for r in rows]

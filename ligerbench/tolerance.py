"""The tolerance rule, written once, and the error metric it applies to.

Two verdicts share one rule. A provider passes a quantity (loss, gradient, ...) when its error
against the float64 truth is at most

    default:  limit = FACTOR * max(careful_error, textbook_error) + FLOOR[dtype]
    strict:   limit = FACTOR * careful_error + FLOOR[dtype]

Both yardsticks run on the same inputs as the provider:

- careful (`yardstick`): a careful PyTorch computation. In float32 it is PyTorch in float32 with
  the formulas that keep their digits (a stable softcap slope 1 / cosh^2, a log1p log-softmax,
  entropy as log s + u / s). In 16-bit dtypes it is the same in float32 from the same 16-bit
  inputs, each output rounded once to the dtype: what a careful kernel does (float32 math, one
  rounding at the store; a fused kernel's logits' gradient is rounded once too, before the
  16-bit products every such kernel must take).
- textbook (KernelSpec.textbook): the kernel's semantics written in plain PyTorch as users write
  them (`F.log_softmax`, autograd through `softcap * torch.tanh(x / softcap)`, entropy as
  `-(p * logp).sum(-1)`): float32 math for float32 inputs; for 16-bit inputs float32 math from
  the same inputs, each output rounded once. PyTorch's own 16-bit path is not a yardstick: on
  confident rows its bf16 true-class gradient is ~100% wrong (docs/bugs.md, bug 6), and a limit
  twice that passed a kernel with the same bug (Liger <= 0.4.0); the textbook one rounds once,
  so 16-bit bugs stay caught under both verdicts.
  Where users write the semantics in more than one way, the kernel declares each (a tuple of
  outcomes) and the largest error counts: log-probabilities as `log_softmax` or
  `x_t - logsumexp(x)`, a cross entropy as `F.cross_entropy` or `logsumexp(x) - x_t` (by hand,
  and every online-softmax kernel's closing formula), and a softcap (in both) with a device's
  tanh, one ulp off (suites/common/device_tanh.py: where the slope 1 - tanh^2 cancels, an ulp of tanh is
  many of the slope; tests/test_ce_textbook_forms.py, tests/test_lp_textbook_forms.py). One run
  of one formula is one draw of its roundings, and on confident float32 rows those are few and
  coarse (the sum of exponentials rounded next to 1): F.cross_entropy over the vocabulary in
  another order landed up to 12x farther from the truth than in the given order
  (tests/test_ce_textbook_forms.py), and torch.compile of the same code 1.56x over the limit
  that one draw set (H100; docs/peers.md, "Every failing check, classified").

The default verdict fails a provider only where it is worse than the formula PyTorch users run
(a harness that fails correct code cannot accuse anyone); `--strict` holds it to the careful
one (our own kernels are held there: Provider.strict). Where the textbook formula cancels
(a softcap slope far from 0, the entropy of a peaked row) the two limits differ by 10x-100x in
float32; elsewhere they agree within a rounding. Records keep both yardsticks' errors, so a
check's precision stays visible whichever verdict it was judged by.

FACTOR = 2 leaves room for a second rounding (a bf16 gradient formed in forward is rounded once
there and once more when a non-unit upstream gradient scales it: about 1.4x a single rounding on
average, though a case whose few large elements all land a step off can pass 2x, as `ce` with
reduction="none" did at one seed before it formed that gradient in backward), not for a bug:
the bugs this harness exists for give errors of 10% to 100%.

FLOOR covers the roundings no implementation avoids, for cases where a yardstick happens to land
(almost) exactly on the truth: in float32 a reduced loss passes through about four roundings of
2**-24 each (sum, divide, z-loss, token weight), so 4 * 2**-24; in 16-bit dtypes the output is
rounded once to the dtype (one unit roundoff; float32 accumulation error is negligible next to
it).

Four roundings of the output are not enough where the computation's own roundings cancel less
than that: a reverse KL sums terms of both signs, and in float32 its loss lands 1 to 3 ulps
from the truth depending on the roundings alone (docs/bugs.md, bug 12: confident rows at T = 2; the
careful yardstick landed 8.5e-10 from the truth on an H200 and 2.4e-7 on CPU, and the floor alone
failed our kernel at 1.015x there). One yardstick run is one draw of those roundings, and it can be
a lucky one. So for float32 cases the careful yardstick also runs on NUDGES copies of the inputs
with every finite nonzero value moved one ulp (`nudged`: a random direction per value, seeds 0,
1, 2: one rounding of each input, which re-draws every rounding downstream), and its error is
the largest of these runs, up to NUDGE_COUNTS_UP_TO (2**-16, 256 ulps): one ulp that moves an
output further has crossed a branch, not re-drawn a rounding (TVD's |p - q| where p == q, a
clip's edge: there the nudged gradient is 30% off), and is not counted. Measured on that case
(CPU): four draws gave 8.1e-8, 8.5e-10, 8.5e-10 and 8.2e-8 against 2.4e-7 as given; moved 16
ulps the loss moves 1.5e-8 an ulp, so the spread is the roundings', not the inputs' conditioning.
The bugs this harness exists for are 10% to 100%, out of reach of one ulp of the inputs.
A device's float32 roundings are not the CPU's either (exp, log, the reductions' orders), and
where the device's careful run lands on the truth every time the CPU's may land ulps away: on an
H200 the case above landed 8.5e-10 from the truth as given and under every nudge, while our
kernel there, like careful PyTorch on CPU, landed 2.4e-7 from it (1.015x the strict limit). So
on a GPU the careful yardstick also runs once on a CPU copy of the inputs (`on_cpu`; problems of
up to CPU_DRAW_ELEMENTS elements, never under torch.distributed, and not where that copy cannot
run), counted like a nudge. On an H100 that check passes under it (2.437e-7 against a limit of
7.26e-7; results/runs/verify-flkd-quick-h100-99d129c/, kernels/NOTES.md).

Error metric: relative L2, ||out - ref|| / ||ref|| (0 when both are exactly zero, inf when only
the reference is). Non-finite values must match the reference exactly, element by element:
NaN where the truth is NaN (a mean over no target), never where it is finite.

A truth that is exactly 0 mathematically (the student's gradient against a teacher equal to the
student: p == q) has no digits to be relative to: float64 leaves 1e-17 of noise, and ||ref||
then measures float64's noise, not the quantity. There the reference names a scale S, the norm
the quantity has at its natural magnitude, and every error (the provider's and both yardsticks')
is ||out - ref|| / S, under the same rule: at most FACTOR x a yardstick's plus FLOOR[dtype], that
is, no more than one rounding of the quantity's natural size. For the distillation kernels S is,
for a gradient, the norm of the gradient whose logits' part is p * w / T (w the row's weight in
the reduction: upstream / count), which bounds every divergence's (forward and reverse KL, JSD
and TVD all form that part as p or q times a factor of order 1); an implementation that forms p
and q apart (two products, a 16-bit output) leaves noise of a rounding of it, and 16-bit
gradients are subnormal there. For the loss, S is the reduced entropy sum p |log p|: the size of
the terms a divergence sums (a logaddexp mixture, TRL's JSD, leaves -2e-9 of a loss near 6).
Holding such noise to "2x the yardstick's" failed correct fp16 code by 1e8 (docs/peers.md,
"Distillation (kd, flkd)"), because the careful yardstick's fp16 gradient rounds to exact zeros. A
bug that leaves a gradient of the natural size (a temperature on one side, a teacher rounded where
the student is not) is 1e3-1e7 times over this limit; one that is exactly 0 at p == q (a swapped KL
direction) cannot be seen there by any rule, and is caught on the other teachers.
"""

from __future__ import annotations

import math

import torch

FACTOR = 2.0
NUDGES = 3
NUDGE_COUNTS_UP_TO = 2.0**-16
FLOOR = {
    torch.float32: 4 * 2.0**-24,
    torch.float16: 2.0**-11,
    torch.bfloat16: 2.0**-9,
}


# Tensors of more elements are compared a block at a time, never as whole float64 copies (a
# 2**31-element gradient is 17 GB per float64 copy: the full ce grid's case past 2**31 logits,
# suites/ce/grid.py).
BLOCK_ELEMENTS = 2**26


def rel_error(out: torch.Tensor | None, ref: torch.Tensor, scale: float | None = None) -> float:
    """Relative L2 error of `out` against `ref` (compared in float64, on ref's device); relative to
    `scale` instead of ||ref|| where the truth is exactly 0 (module docstring)."""
    if out is None:
        return math.inf
    out = out.detach().to(device=ref.device).reshape(ref.shape)
    ref = ref.detach()
    if ref.numel() <= BLOCK_ELEMENTS:
        parts = [(out, ref)]
    else:
        o, r = out.reshape(-1), ref.reshape(-1)
        parts = [(o[i : i + BLOCK_ELEMENTS], r[i : i + BLOCK_ELEMENTS]) for i in range(0, r.numel(), BLOCK_ELEMENTS)]
    norms = [_norms(o.to(torch.float64), r.to(torch.float64)) for o, r in parts]
    if any(n is None for n in norms):
        return math.inf
    diff, norm = math.hypot(*(d for d, _ in norms)), math.hypot(*(m for _, m in norms))  # one block: as is
    if scale is not None:
        norm = scale
    if norm == 0.0:
        return 0.0 if diff == 0.0 else math.inf
    return diff / norm


def _norms(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float] | None:
    """(||out - ref||, ||ref||) over the finite elements; None where the non-finite values differ
    (a NaN or inf where the truth has none, or the other way round)."""
    ref_finite = torch.isfinite(ref)
    out_finite = torch.isfinite(out)
    if not torch.equal(ref_finite, out_finite):
        return None
    if not ref_finite.all():
        # inf must match in sign; NaN only needs to be NaN
        same = (out == ref) | (torch.isnan(out) & torch.isnan(ref)) | ref_finite
        if not same.all():
            return None
        out, ref = out[ref_finite], ref[ref_finite]
    return torch.linalg.vector_norm(out - ref).item(), torch.linalg.vector_norm(ref).item()


def yardstick(run, problem, upcast: dict[str, torch.Tensor | None]):
    """The yardstick's outcome (module docstring): `run(problem)` as it is for float32 inputs;
    for 16-bit ones `run` on a copy of the problem whose `upcast` fields (name -> tensor) are
    float32, then every output value rounded once to the 16-bit dtype (and held as float32)."""
    import dataclasses

    dtypes = {t.dtype for t in upcast.values() if t is not None and t.is_floating_point()}
    low = dtypes & {torch.float16, torch.bfloat16}
    if not low:
        return run(problem)
    (dtype,) = low
    wide = dataclasses.replace(problem, **{k: None if t is None else t.detach().float() for k, t in upcast.items()})
    out = run(wide)
    values = {k: None if v is None else v.to(dtype).float() for k, v in out.values.items()}
    return dataclasses.replace(out, values=values)


def _tensor_fields(problem, wanted) -> dict[str, torch.Tensor]:
    """problem's (a dataclass) tensor fields that `wanted` accepts, by name."""
    import dataclasses

    fields = {f.name: getattr(problem, f.name) for f in dataclasses.fields(problem)}
    return {k: t for k, t in fields.items() if isinstance(t, torch.Tensor) and wanted(t)}


def _replace_tensors(problem, tensors: dict[str, torch.Tensor], make):
    """A copy of `problem` with each of `tensors` replaced by make(tensor); one tensor in two
    fields (a teacher that is the student) is made once and stays one."""
    import dataclasses

    done = {}
    for t in tensors.values():
        if id(t) not in done:
            done[id(t)] = make(t)
    return dataclasses.replace(problem, **{name: done[id(t)] for name, t in tensors.items()})


def nudged(problem, seed: int = 0):
    """A copy of `problem` (a dataclass) whose float32 tensors have each finite nonzero element
    moved one ulp up or down (a random direction, a fixed seed): the inputs after one rounding
    (module docstring). Other fields, and zeros, infinities and NaNs, are kept as they are (a
    mask, a -inf padding column); requires_grad is kept."""
    gen = torch.Generator().manual_seed(seed)

    def nudge(t):
        x = t.detach()
        up = torch.rand(x.shape, generator=gen).to(x.device) < 0.5
        step = torch.nextafter(x, torch.where(up, math.inf, -math.inf).to(x.dtype))
        keep = ~torch.isfinite(x) | (x == 0) | ~torch.isfinite(step)
        return torch.where(keep, x, step).requires_grad_(t.requires_grad)

    return _replace_tensors(problem, _tensor_fields(problem, lambda t: t.dtype == torch.float32 and t.numel()), nudge)


CPU_DRAW_ELEMENTS = 2**20  # inputs; the yardstick's intermediates ([N, V] logits) are larger: keep the CPU draw cheap


def on_cpu(problem):
    """A copy of `problem` (a dataclass) with its tensors on the CPU (requires_grad kept; one
    tensor in two fields stays one), or None when its tensors hold more than CPU_DRAW_ELEMENTS
    elements in all (module docstring)."""
    tensors = _tensor_fields(problem, lambda t: True)
    if sum(t.numel() for t in {id(t): t for t in tensors.values()}.values()) > CPU_DRAW_ELEMENTS:
        return None
    return _replace_tensors(problem, tensors, lambda t: t.detach().cpu().requires_grad_(t.requires_grad))


RULES = ("default", "strict")


def limit_for(careful_error: float, dtype: torch.dtype, textbook_error: float | None = None, *,
              strict: bool = False) -> float:  # fmt: skip
    """The most error a provider may have on a quantity (module docstring): from the careful
    yardstick's error alone under the strict verdict (or where the kernel has no textbook
    yardstick), from the larger of the two otherwise."""
    worst = careful_error
    # a textbook formula that breaks down (NaN or inf) never widens the limit
    if not strict and textbook_error is not None and math.isfinite(textbook_error):
        worst = max(careful_error, textbook_error)
    return FACTOR * worst + FLOOR[dtype]


def verdict(error: float, limit: float) -> str:
    return "pass" if error <= limit else "fail"

"""The `ce` kernel as the harness sees it: its inputs, its float64 reference, and how a
provider is called on one case.

Semantics (those of kernels/cross_entropy.py, which match torch.nn.functional.cross_entropy
where they overlap):
    x_j      = softcap * tanh(logit_j / softcap)           (if softcap)
    ce_i     = F.cross_entropy(x_i, y_i, weight, label_smoothing, reduction="none")
    loss_i   = token_weight_i * (ce_i + z_loss_scale * lse(x_i)**2)   (0 for ignored rows)
    none: loss_i;  sum: sum_i loss_i;  mean: sum_i loss_i / D,
    D = number of counted rows, or the sum of their class weights (PyTorch's denominator).
The float64 reference evaluates exactly this with PyTorch ops in float64; PyTorch eager
evaluates it in the case's dtype, which sets the tolerance (ligerbench/tolerance.py).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ligerbench.cases import (
    DTYPES,
    IGNORE_PATTERNS,
    OPTIONS,
    VOCAB_PAD,
    Case,
    batch_split,
    device_generator,
    draw_ignored,
    draw_logits,
    draw_upstream,
    generator_for,
)
from ligerbench.problems import (
    Outcome,
    Spy,
    as_handed,
    copies_of,
    fresh_view,
    layout_of,
    same_bits,
    upstream_for,
    written,
)
from ligerbench.suites.ce.axes import LAYOUT
from ligerbench.suites.common import retained_backward as retained
from ligerbench.suites.common import split_step
from ligerbench.suites.common.device_tanh import forms_on, tanh_one_ulp_low
from ligerbench.tolerance import yardstick


class LossOptions:
    """The options of a cross entropy problem's loss (`ce`'s and `flce`'s: flce's loss is ce's on
    the logits it forms). Each problem declares its own fields: their order is the order
    tolerance.nudged draws its ulps in, so a field moved would move every nudge."""

    def loss_options(self) -> dict:
        """The options of the loss itself, without the class weights (each kernel names its own)."""
        return dict(ignore_index=self.ignore_index, reduction=self.reduction, label_smoothing=self.label_smoothing,
                    softcap=self.softcap, z_loss_scale=self.z_loss_scale, token_weight=self.token_weight)  # fmt: skip


@dataclass
class CEProblem(LossOptions):
    """The inputs of one `ce` case, on the case's device."""

    logits: torch.Tensor  # [N, V] in the case dtype
    target: torch.Tensor  # [N] int64
    ignore_index: int
    reduction: str
    upstream: torch.Tensor  # the gradient handed to backward: a scalar, or [N]
    weight: torch.Tensor | None  # [V] float32 class weights
    token_weight: torch.Tensor | None  # [N] float32
    label_smoothing: float = 0.0
    softcap: float | None = None
    z_loss_scale: float = 0.0
    split: str = "none"  # the step split into pieces (suites/common/split_step.py), or "none"
    backward: str = "once"  # or "retained": backward twice through one forward (suites/common/retained_backward.py)

    def options(self) -> dict:
        """Keyword arguments every `ce` provider takes."""
        return dict(weight=self.weight, **self.loss_options())


def drawn_targets(case: Case, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(targets [N], mask of ignored rows, ignore_index) of a cross entropy case, drawn first from
    the case's generator: ignore_index at the rows the ignore pattern (or the split) leaves out."""
    ignore_index, _ = IGNORE_PATTERNS[case.ignore_pattern]
    target = torch.randint(0, case.v, (case.n,), generator=g)
    ignored = split_step.ignored_of(case, draw_ignored(case, case.n, g, target), target, ignore_index)
    return torch.where(ignored, torch.full_like(target, ignore_index), target), ignored, ignore_index


def drawn_loss_fields(case: Case, g: torch.Generator, target: torch.Tensor, ignore_index: int, rows: tuple[int, ...],
                 device: torch.device) -> tuple[dict, torch.Tensor | None]:  # fmt: skip
    """LossOptions' fields of a case (the upstream and token weights drawn from `g`, the per-token
    tensors shaped `rows`, on the device), and its class weights [V] (float32 on the CPU, or None),
    drawn between them: the order every cross entropy problem draws them in."""
    opts = OPTIONS[case.option]
    up = draw_upstream(case, (case.n,), g)
    class_weight = torch.rand(case.v, generator=g) * 1.8 + 0.2 if opts.get("class_weight") else None
    token_weight = torch.rand(case.n, generator=g) * 2.9 + 0.1 if opts.get("token_weight") else None
    fields = dict(
        target=target.reshape(rows).to(device),
        ignore_index=ignore_index,
        reduction=case.reduction,
        upstream=as_handed(up.reshape(rows) if case.reduction == "none" else up, device=device),
        token_weight=None if token_weight is None else token_weight.reshape(rows).to(device),
        label_smoothing=opts.get("label_smoothing", 0.0),
        softcap=opts.get("softcap"),
        z_loss_scale=opts.get("z_loss_scale", 0.0),
        split=case.get("split", "none"),
        backward=case.get("backward", "once"),
    )
    return fields, class_weight


def make_problem(case: Case, seed: int, device: torch.device) -> CEProblem:
    g = generator_for(case, seed)
    target, ignored, ignore_index = drawn_targets(case, g)
    big = device_generator(g, device)  # the [N, V] draws: on a GPU, drawn there
    logits = draw_logits(case.logits, case.n, case.v, torch.where(ignored, 0, target), big)
    fields, weight = drawn_loss_fields(case, g, target, ignore_index, token_shape(case), device)
    return CEProblem(logits=_placed(case, logits, big, device), weight=None if weight is None else weight.to(device),
                     **fields)  # fmt: skip


def token_shape(case: Case) -> tuple[int, ...]:
    """The shape of the targets (and of per-token tensors): [B, T] in a 3-D layout, else [N]."""
    return batch_split(case.n) if case.layout in ("3d", "padded_vocab") else (case.n,)


def _placed(case: Case, logits: torch.Tensor, g: torch.Generator, device: torch.device) -> torch.Tensor:
    """The float32 logits [N, V] laid out as the case says (suites/ce/axes.py), in the case dtype, on
    the device: a view into a storage of its own, as a real caller would hand it over."""
    n, v = logits.shape
    dt = DTYPES[case.dtype]
    if case.layout == "2d":
        return logits.to(dt).to(device)
    if case.layout == "3d":
        return logits.to(dt).reshape(*batch_split(n), v).to(device)
    if case.layout == "padded_vocab":
        vp = (v // VOCAB_PAD + 1) * VOCAB_PAD  # always some padding, up to a multiple of VOCAB_PAD
        # padding columns hold real-looking logits, larger than the rest: reading one moves the loss
        wide = torch.cat([logits, 3.0 + torch.randn(n, vp - v, generator=g, device=g.device)], dim=1)
        return wide.to(dt).reshape(*batch_split(n), vp).to(device)[..., :v]
    if case.layout == "transposed":
        return logits.t().contiguous().to(dt).to(device).t()
    raise ValueError(f"unknown ce layout {case.layout!r}; expected one of {LAYOUT.values}")


class _StableTanh(torch.autograd.Function):
    """tanh whose derivative is 1 / cosh^2, not autograd's 1 - tanh^2: that difference loses its
    digits where |tanh| is near 1 (a softcapped confident logit), which made PyTorch's own slope
    as wrong as a kernel that computes it the same way (docs/bugs.md, "What the careful yardstick
    found in our own kernels")."""

    @staticmethod
    def forward(ctx, u):
        ctx.save_for_backward(u)
        return torch.tanh(u)

    @staticmethod
    def backward(ctx, grad):
        (u,) = ctx.saved_tensors
        return grad / torch.cosh(u) ** 2  # cosh overflows to inf far out: slope 0, as it should


def capped(x: torch.Tensor, softcap: float) -> torch.Tensor:
    """softcap * tanh(x / softcap) with a stable slope (_StableTanh)."""
    return softcap * _StableTanh.apply(x / softcap)


# the ways users write it, each a textbook yardstick: F.cross_entropy; logsumexp(x) - x_t; the same
# with the float32 lse one ulp low (_rows_by_logsumexp says why); the softcap's tanh one ulp off
TEXTBOOK_FORMS = (True, "logsumexp", "logsumexp_ulp", "tanh_ulp")


def textbook_forms(softcap: float | None) -> tuple:
    """TEXTBOOK_FORMS that differ on a case: "tanh_ulp" only where there is a softcap."""
    return forms_on(TEXTBOOK_FORMS, softcap)


def _rows_by_logsumexp(x, target, w, ignore_index, label_smoothing, *, lse_ulp_low=False):
    """F.cross_entropy(reduction="none")'s rows with each log-probability formed as
    x_j - logsumexp(x): the same semantics, the closing formula's roundings (its lse rounded
    where the logits sit, not where log-softmax keeps x_t - max exact).

    lse_ulp_low: each float32 row's lse one ulp lower (the gradient unchanged). Where a row is
    confident its loss is far smaller than its lse, and that one rounding of the lse is most of
    the loss's error; where it lands is a draw of the summation's order (a sum of exponentials
    next to 1 drops the small terms' low bits, so a float32 lse lands low rather than high).
    PyTorch's own F.cross_entropy with the vocabulary in another order landed 2-4x farther from
    the truth than either form above on this CPU, on confident float32 rows, and the
    same code in the given order is a draw that differs by machine (tests/test_ce_textbook_forms.py).
    Elsewhere an ulp of the lse is an ulp of the loss."""
    lse = torch.logsumexp(x, dim=-1, keepdim=True)
    if lse_ulp_low and lse.dtype == torch.float32:
        lse = lse + (torch.nextafter(lse.detach(), torch.full_like(lse, -torch.inf)) - lse.detach())
    logp = x - lse
    rows = F.nll_loss(logp, target, weight=w, ignore_index=ignore_index, reduction="none")
    if not label_smoothing:
        return rows
    smooth = -(logp * w if w is not None else logp).sum(-1) / x.shape[-1]
    smooth = torch.where(target != ignore_index, smooth, 0.0)
    return (1.0 - label_smoothing) * rows + label_smoothing * smooth


def ce_torch(
    logits: torch.Tensor,
    target: torch.Tensor,
    *,
    weight=None,
    ignore_index=-100,
    reduction="mean",
    label_smoothing=0.0,
    softcap=None,
    z_loss_scale=0.0,
    token_weight=None,
    textbook=False,
):
    """The semantics above in plain PyTorch ops, in the dtype of `logits`.
    Returns (loss, z_loss). Used in float64 as the truth and in the case dtype as 'eager'.
    textbook: the default verdict's yardsticks (ligerbench/tolerance.py), the softcap as users
    write it, its slope through autograd's tanh (1 - tanh^2, which cancels where |tanh| -> 1):
    True, F.cross_entropy; "logsumexp", each row's loss as logsumexp(x) - x_t (by hand, and every
    online-softmax kernel's closing formula); "logsumexp_ulp", that with a float32 lse one ulp
    low (_rows_by_logsumexp); "tanh_ulp", F.cross_entropy with the softcap's
    tanh one ulp nearer 0, as a device's may be (suites/common/device_tanh.py): TEXTBOOK_FORMS."""
    shape = target.shape
    if logits.dim() != 2:  # [B, T, V]: flattened row-major, as torch.nn.functional would see [B*T, V]
        logits, target = logits.reshape(-1, logits.shape[-1]), target.reshape(-1)
        token_weight = None if token_weight is None else token_weight.reshape(-1)
    x = logits
    dt = x.dtype
    if softcap:
        tanh = tanh_one_ulp_low if textbook == "tanh_ulp" else torch.tanh
        x = softcap * tanh(x / softcap) if textbook else capped(x, softcap)
    w = weight.to(dt) if weight is not None else None
    counted = target != ignore_index
    if textbook in ("logsumexp", "logsumexp_ulp"):
        rows = _rows_by_logsumexp(x, target, w, ignore_index, label_smoothing, lse_ulp_low=textbook == "logsumexp_ulp")
    elif reduction == "mean" and z_loss_scale == 0.0 and token_weight is None:
        # exactly what transformers and most users run
        loss = F.cross_entropy(x, target, weight=w, ignore_index=ignore_index, label_smoothing=label_smoothing)
        return loss, torch.zeros((), dtype=dt, device=x.device)
    else:
        rows = F.cross_entropy(
            x, target, weight=w, ignore_index=ignore_index, reduction="none", label_smoothing=label_smoothing
        )
    z_rows = torch.zeros_like(rows)
    if z_loss_scale:
        z_rows = torch.where(counted, z_loss_scale * torch.logsumexp(x, dim=-1) ** 2, 0.0).to(dt)
        rows = rows + z_rows
    if token_weight is not None:
        tw = token_weight.to(dt)
        rows, z_rows = rows * tw, z_rows * tw
    if reduction == "none":
        return rows.view(shape), z_rows.view(shape)
    if reduction == "sum":
        return rows.sum(), z_rows.sum()
    if w is None:
        denom = counted.sum().to(dt)
    else:
        denom = (w[torch.where(counted, target, 0).clamp(0, x.shape[-1] - 1)] * counted).sum()
    return rows.sum() / denom, z_rows.sum() / denom


def run_ce(fn, problem: CEProblem, *, need_grad: bool = True) -> Outcome:
    """Call `fn(logits, target, **options) -> loss | (loss, z_loss)` on a fresh copy of the
    logits laid out exactly as the case built them (same shape, strides and storage offset: a
    leaf view into a copy of their whole storage), run backward with the case's upstream
    gradient, and report what came out, the layout the callable received, and whether the
    provider wrote anywhere in that storage (padding included)."""
    flat, x = fresh_view(problem.logits, requires_grad=need_grad)
    before = flat.clone()
    opts = problem.options()
    side = {"target": problem.target, "weight": opts["weight"], "token_weight": opts["token_weight"]}
    handed = copies_of(side)
    spy = Spy(fn, ("logits", "target"))
    out = spy(x, handed["target"], **{**opts, "weight": handed["weight"], "token_weight": handed["token_weight"]})
    values, refusals = loss_values(out, problem, {"logits": x}, need_grad)
    if need_grad and problem.split != "none":
        values["split_grad_logits"] = _split_grad(fn, problem)
    built = {"logits": layout_of(problem.logits), "target": layout_of(problem.target)}
    mutated = ([] if same_bits(flat, before) else ["logits"]) + written(side, handed)
    return Outcome(values=values, input_mutated=bool(mutated), built=built, received=spy.seen,
                   mutated_inputs=tuple(mutated), refusals=refusals)  # fmt: skip


def loss_values(out, problem, leaves: dict, need_grad: bool) -> tuple[dict, dict[str, str]]:
    """(values, refusals) of a provider's `out` (loss | (loss, z_loss)) on a cross entropy problem:
    the loss and z-loss, then, with need_grad, backward with the case's upstream (twice for a
    retained case) and the gradients of `leaves`, or the provider's refusal of the second call."""
    loss, z_loss = out if isinstance(out, tuple) else (out, None)
    values = {"loss": loss.detach().clone()}
    if z_loss is not None:
        values["z_loss"] = z_loss.detach().clone()
    refusals: dict[str, str] = {}
    if need_grad:
        up = upstream_for(loss, problem.upstream, problem.reduction, tuple(problem.target.shape))
        retained.backward(loss, up, leaves, problem.backward == "retained", values, refusals)
    return values, refusals


def flat_token_side(problem) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A cross entropy problem's targets and token weights flattened to [N]: what a split step cuts."""
    tw = problem.token_weight
    return problem.target.reshape(-1), None if tw is None else tw.reshape(-1)


def _split_grad(fn, problem: CEProblem) -> torch.Tensor:
    """The gradient of the logits the split step leaves (suites/common/split_step.py): each piece its
    own rows [n, V] of the flattened logits, the class weights whole, the step's denominator."""
    v = problem.logits.shape[-1]
    t, tw = flat_token_side(problem)
    opts = problem.options()

    def call(rows, mine, _whole, reduction):
        piece_tw = None if tw is None else tw[rows].clone()
        return fn(mine[0], t[rows].clone(), **{**opts, "reduction": reduction, "token_weight": piece_tw})

    denom = split_step.step_denominator(t, problem.weight, problem.ignore_index, v)
    (grad,) = split_step.token_split_grads(fn, problem.split, problem.reduction, problem.upstream, denom,
                                           [problem.logits.detach().reshape(-1, v)], [], call)  # fmt: skip
    return grad.view(problem.logits.shape)


# From this many logits on, the truth and the yardstick are formed a block of rows at a time
# (rowwise): a case past 2**31 elements (suites/ce/grid.py, E) is 17 GB per float64 copy, and the
# whole-tensor path holds several (the copy, log-softmax, the gradient, run_ce's copies).
CHUNKED_FROM = 2**28
CHUNK_ELEMENTS = 2**26


def rowwise(problem: CEProblem, dtype: torch.dtype, *, chunk_elements: int = CHUNK_ELEMENTS,
            textbook: bool | str = False) -> Outcome:  # fmt: skip
    """ce_torch's loss, z-loss and logits gradient in `dtype`, a block of rows at a time: each
    block's rows by reduction="none", reduced as ce_torch reduces them, then each block's
    gradient by backward through its rows weighted by what the reduction and the upstream give
    each row. Only the [N, V] gradient is held whole."""
    shape = problem.logits.shape
    x_all = problem.logits.detach().reshape(-1, shape[-1])
    t_all = problem.target.reshape(-1)
    n, v = x_all.shape
    tw_all = None if problem.token_weight is None else problem.token_weight.reshape(-1).to(dtype)
    w = None if problem.weight is None else problem.weight.to(dtype)
    opts = dict(weight=w, ignore_index=problem.ignore_index, label_smoothing=problem.label_smoothing,
                softcap=problem.softcap, z_loss_scale=problem.z_loss_scale, reduction="none",
                textbook=textbook)  # fmt: skip
    step = max(1, chunk_elements // max(v, 1))
    blocks = [slice(r0, r0 + step) for r0 in range(0, n, step)]

    def rows_of(b: slice, x: torch.Tensor):
        return ce_torch(x, t_all[b], token_weight=None if tw_all is None else tw_all[b], **opts)

    with torch.no_grad():
        parts = [rows_of(b, x_all[b].to(dtype)) for b in blocks]
    rows = torch.cat([r for r, _ in parts]) if parts else x_all.new_zeros(0, dtype=dtype)
    z_rows = torch.cat([z for _, z in parts]) if parts else rows
    up = problem.upstream.to(dtype)
    if problem.reduction == "none":
        loss, z, coef = rows.view(problem.target.shape), z_rows.view(problem.target.shape), up.reshape(-1)
    elif problem.reduction == "sum":
        loss, z, coef = rows.sum(), z_rows.sum(), up.expand(n)
    else:
        counted = t_all != problem.ignore_index
        if w is None:
            denom = counted.sum().to(dtype)
        else:
            denom = (w[torch.where(counted, t_all, 0).clamp(0, v - 1)] * counted).sum()
        loss, z, coef = rows.sum() / denom, z_rows.sum() / denom, (up / denom).expand(n)
        if problem.z_loss_scale == 0.0 and tw_all is None:  # as ce_torch's plain mean: a z-loss of 0
            z = torch.zeros((), dtype=dtype, device=x_all.device)
    grad = torch.empty((n, v), dtype=dtype, device=x_all.device)
    for b in blocks:
        xb = x_all[b].to(dtype).requires_grad_(True)
        r, _ = rows_of(b, xb)
        (r * coef[b]).sum().backward()
        grad[b] = xb.grad
    return Outcome(values={"loss": loss, "z_loss": z, "grad_logits": grad.view(shape)})


def reference(problem: CEProblem) -> Outcome:
    """The float64 truth, on the problem's device."""
    if problem.logits.numel() >= CHUNKED_FROM:
        return split_step.aliased(rowwise(problem, torch.float64), problem.split)
    x64 = problem.logits.detach().double()
    p64 = CEProblem(**{**problem.__dict__, "logits": x64, "split": "none", "backward": "once"})
    p64.weight = problem.weight.double() if problem.weight is not None else None
    p64.token_weight = problem.token_weight.double() if problem.token_weight is not None else None
    p64.upstream = problem.upstream.double()
    out = run_ce(ce_torch, p64)
    out.scales.update(_one_class_scales(p64))
    return as_stepped(out, problem)


def _one_class_scales(problem: CEProblem) -> dict[str, float]:
    """With one class every counted row's cross entropy is exactly 0 (the log-softmax of a single
    logit), smoothing and class weights included: without a z-loss the truth is 0 and has no
    digits to be relative to (ligerbench/tolerance.py, "A truth that is exactly 0"). Its natural
    magnitude: the loss with each counted row's term |x_t| (what logsumexp(x) - x_t cancels),
    weighted and reduced as the loss is. {} elsewhere."""
    x = problem.logits.detach()
    if x.shape[-1] != 1 or problem.z_loss_scale:
        return {}
    x, t = x.reshape(-1), problem.target.reshape(-1)
    if problem.softcap:
        x = problem.softcap * torch.tanh(x / problem.softcap)
    counted = t != problem.ignore_index
    w = torch.ones_like(x) if problem.weight is None else problem.weight.to(x)[t.clamp(0, 0)]
    rows = torch.where(counted, x.abs() * w, 0.0)
    if problem.token_weight is not None:
        rows = rows * problem.token_weight.reshape(-1).to(x)
    if problem.reduction == "none":
        size = torch.linalg.vector_norm(rows)
    elif problem.reduction == "sum":
        size = rows.sum().abs()
    else:
        size = rows.sum().abs() / torch.where(counted, w, 0.0).sum()
    size = float(size)
    return {"loss": size} if math.isfinite(size) and size > 0 else {}


def eager_in_dtype(problem: CEProblem) -> Outcome:
    """The yardstick of the tolerance rule (ligerbench/tolerance.py): PyTorch in float32, each
    output rounded once to a 16-bit case dtype."""
    if problem.logits.numel() >= CHUNKED_FROM:
        out = yardstick(lambda p: rowwise(p, p.logits.dtype), problem, {"logits": problem.logits})
    else:
        out = yardstick(lambda p: run_ce(ce_torch, p), one_step(problem), {"logits": problem.logits})
    return as_stepped(out, problem)


def textbook(problem: CEProblem) -> tuple[Outcome, ...]:
    """The default verdict's yardsticks (ligerbench/tolerance.py): ce_torch in each way users
    write it (textbook_forms: F.cross_entropy, or logsumexp(x) - x_t; the softcap's slope through
    autograd, its tanh as PyTorch's or one ulp off), otherwise as eager_in_dtype; a provider fails
    only where it is worse than all."""

    def written(form):
        if problem.logits.numel() >= CHUNKED_FROM:
            return lambda p: rowwise(p, p.logits.dtype, textbook=form)
        return lambda p: run_ce(functools.partial(ce_torch, textbook=form), p)

    one = one_step(problem)
    outs = [yardstick(written(form), one, {"logits": problem.logits}) for form in textbook_forms(problem.softcap)]
    return tuple(as_stepped(out, problem) for out in outs)


def one_step(problem):
    """A cross entropy problem (ce's or flce's) as one batch, one backward: what the truth and the
    yardsticks of a split or retained case run."""
    return retained.whole(split_step.whole(problem))


def as_stepped(out: Outcome, problem) -> Outcome:
    """The one step's outcome as the case's: the split step's and the second backward's gradients
    its own (suites/common/split_step.py, suites/common/retained_backward.py)."""
    return retained.aliased(split_step.aliased(out, problem.split), problem.backward)

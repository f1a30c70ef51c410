"""What `kd` and `flkd` share: the semantics of kernels/distill.py in PyTorch (in float64 the
truth; in float32 the careful yardstick; `textbook=True` as users write it), the case axes both
kernels have, how a case's labels and upstream gradient are drawn, and how a provider's loss and
gradients are collected.

    p = softmax(student / T);  q = softmax(teacher / T), or a top-K teacher's log-probs
    renormalised over its K ids at T (0 elsewhere)
    forward_kl KL(q || p); reverse_kl KL(p || q); jsd beta KL(q || m) + (1 - beta) KL(p || m),
    m = beta q + (1 - beta) p, beta = 0 / 1 exactly the forward / reverse KL (TRL's GKD and
    DistillationTrainer, Liger's LigerJSD); tvd |p - q|_1 / 2
    reductions: none, sum, mean (over counted rows; 0 when none), batchmean (over all rows)

The careful form keeps its digits where the textbook one loses them: log-softmax with log1p (a
confident teacher's q near 1), and log m taken as log p exactly where p == q (a self-distilled
teacher: divergence and gradient exactly 0, where logaddexp leaves rounding noise).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ligerbench.axes import Axis
from ligerbench.problems import Outcome, Spy, as_handed, fresh_view, layout_of, same_bits, upstream_for
from ligerbench.suites.families.log_prob import ignore_pattern_axis, make_target

IGNORE = -100


def _log_softmax(z: torch.Tensor, textbook: bool) -> torch.Tensor:
    if textbook:
        return torch.log_softmax(z, dim=-1)
    # log s = log1p(sum over all but one copy of the max): a confident row keeps its digits
    m, at = z.max(-1, keepdim=True)
    zm = z - m
    return zm - torch.log1p(torch.exp(zm).scatter(-1, at, 0.0).sum(-1, keepdim=True))


def log_probs(student, teacher, teacher_ids, temperature: float, textbook: bool = False):
    """(log p [.., V], log q [.., V]): q is -inf off a top-K teacher's ids."""
    lp = _log_softmax(student / temperature, textbook)
    if teacher_ids is None:
        return lp, _log_softmax(teacher / temperature, textbook)
    lq_k = _log_softmax(teacher / temperature, textbook)
    return lp, torch.full_like(lp, -math.inf).scatter(-1, teacher_ids, lq_k)


def _mode(divergence: str, beta: float) -> str:
    if divergence == "jsd" and beta == 0.0:
        return "forward_kl"
    if divergence == "jsd" and beta == 1.0:
        return "reverse_kl"
    return divergence


def divergence_rows(lp, lq, divergence: str, beta: float, textbook: bool = False) -> torch.Tensor:
    """The divergence per row from log p and log q (the careful form: no 0 * -inf anywhere,
    in forward or backward)."""
    mode = _mode(divergence, beta)
    p, q = lp.exp(), lq.exp()
    if (
        textbook
        and mode in ("forward_kl", "reverse_kl", "jsd")
        and bool(torch.isfinite(lq).all() & torch.isfinite(lp).all())
    ):
        return _textbook_rows(lp, lq, mode, beta)

    def kl(w, lw, lother):  # sum w (lw - lother), a zero w's term 0 with a zero gradient (never NaN)
        live = w > 0
        return (w * (torch.where(live, lw, 0.0) - torch.where(live, lother, 0.0))).sum(-1)

    if mode == "forward_kl":
        return kl(q, lq, lp)
    if mode == "reverse_kl":
        return kl(p, lp, lq)
    if mode == "tvd":
        return 0.5 * (p - q).abs().sum(-1)
    same = (
        lp == lq
    )  # there log m = log p exactly (-inf where both are: no logaddexp(-inf, -inf), whose gradient is NaN)
    lm = torch.logaddexp(torch.where(same, 0.0, lp) + math.log1p(-beta), torch.where(same, 0.0, lq) + math.log(beta))
    lm = torch.where(same, lp, lm)
    return beta * kl(q, lq, lm) + (1.0 - beta) * kl(p, lp, lm)


def _textbook_rows(lp, lq, mode: str, beta: float) -> torch.Tensor:
    """As users write it (TRL's generalized_jsd_loss): F.kl_div on log-softmaxes; the mixture's
    log by logsumexp of a stack. A top-K teacher (-inf off its ids) has no such form: the
    careful one stands in there."""
    if mode == "forward_kl":
        return F.kl_div(lp, lq, reduction="none", log_target=True).sum(-1)
    if mode == "reverse_kl":
        return F.kl_div(lq, lp, reduction="none", log_target=True).sum(-1)
    b = torch.tensor(beta, dtype=lp.dtype, device=lp.device)
    lm = torch.logsumexp(torch.stack([lp + torch.log1p(-b), lq + torch.log(b)]), dim=0)
    kl_q = F.kl_div(lm, lq, reduction="none", log_target=True).sum(-1)
    kl_p = F.kl_div(lm, lp, reduction="none", log_target=True).sum(-1)
    return beta * kl_q + (1.0 - beta) * kl_p


def reduce(rows: torch.Tensor, counted: torch.Tensor, reduction: str) -> torch.Tensor:
    rows = torch.where(counted, rows, 0.0)
    if reduction == "none":
        return rows
    if reduction == "sum":
        return rows.sum()
    if reduction == "mean":
        return rows.sum() / counted.sum().clamp_min(1)
    if reduction == "batchmean":
        return rows.sum() / max(rows.numel(), 1)
    raise ValueError(f"unknown reduction {reduction!r}")


def reference(student, teacher, labels=None, *, teacher_ids=None, divergence="forward_kl", beta=0.5,
              temperature=1.0, ignore_index=IGNORE, reduction="mean", teacher_grad=False,
              textbook=False):  # fmt: skip
    """kernels/distill.py's semantics in PyTorch, in the inputs' dtype (a provider too)."""
    if not teacher_grad:
        teacher = teacher.detach()
    lp, lq = log_probs(student, teacher, teacher_ids, temperature, textbook)
    rows = divergence_rows(lp, lq, divergence, beta, textbook)
    counted = torch.ones_like(rows, dtype=torch.bool) if labels is None else labels != ignore_index
    return reduce(rows, counted, reduction)


def natural_magnitude_loss(student, teacher, labels=None, *, temperature=1.0, ignore_index=IGNORE,
                           reduction="mean", teacher_grad=False, **_):  # fmt: skip
    """A loss of the natural magnitude of the divergences, for a truth that is exactly 0 (a
    self-distilled teacher; ligerbench/tolerance.py). Its value per row is the entropy
    sum_v p_v |log p_v| at T: the size of the terms a divergence sums, whose rounding noise is a
    few eps of it (TRL's JSD leaves -2e-9 there). Its gradient in the logits is p * w / T, w the
    row's weight (upstream / count): every divergence's gradient is p or q times a factor of
    order 1. (The teacher's part too when it is asked for a gradient.) Masked and reduced as the
    loss."""

    def part(x):
        lw = torch.log_softmax(x.detach() / temperature, dim=-1)
        w = lw.exp()
        linear = torch.where(w > 0, w * x, 0.0).sum(-1) / temperature  # -inf columns: 0, no NaN
        entropy = torch.where(w > 0, -w * lw, 0.0).sum(-1)
        return linear - linear.detach() + entropy

    rows = part(student) + (part(teacher) - part(teacher).detach() if teacher_grad else 0.0)
    counted = torch.ones_like(rows, dtype=torch.bool) if labels is None else labels != ignore_index
    return reduce(rows, counted, reduction)


def natural_scales(natural: Outcome) -> dict[str, float]:
    """quantity -> S, the norm of each value of natural_magnitude_loss's outcome (its loss and
    gradients: the scales a truth that is exactly 0 is judged against); a zero norm (no counted
    row) is left out."""
    norms = {k: float(torch.linalg.vector_norm(v.double())) for k, v in natural.values.items()
             if k == "loss" or k.startswith("grad_")}  # fmt: skip
    return {k: n for k, n in norms.items() if n > 0}


# ----------------------------------------------------------------------------- drawing a case


def make_labels(rows: tuple[int, ...], v: int, pattern: str, gen) -> torch.Tensor:
    """Labels [*rows] with an ignore pattern (suites/families/log_prob.py's make_target)."""
    return make_target(rows, None, v, pattern, gen)


def make_upstream(kind: str, reduction: str, rows: tuple[int, ...], gen) -> torch.Tensor:
    """The upstream gradient: ones (loss.backward(): a scalar 1, or for none a 1 expanded over
    the rows, stride 0), random (rows in [-0.5, 1.5), or a scalar in [0.5, 1.5] away from 1),
    masked (none: random rows with exact zeros on about half of them: (loss * mask).sum())."""
    if kind == "ones":
        return torch.ones(()).expand(rows) if reduction == "none" else torch.tensor(1.0)
    if reduction != "none":
        u = torch.rand((), generator=gen) + 0.5
        return torch.where((u - 1.0).abs() < 0.1, u + 0.3, u)
    up = torch.rand(rows, generator=gen) * 2.0 - 0.5
    if kind == "masked":
        up = torch.where(torch.rand(rows, generator=gen) < 0.5, 0.0, up)
    return up


def draw_teacher(student: torch.Tensor, kind: str, gen) -> torch.Tensor:
    """float32 teacher logits [N, V] for a student's: random normal (another model), confident
    (one logit per row 12-20 above the rest: a trained teacher, q near 1), or the student's own
    (self-distillation at step 0: divergence 0, gradient 0)."""
    if kind == "self":
        return student.clone()
    t = torch.randn(student.shape, generator=gen)
    if kind == "confident":
        at = torch.randint(0, t.shape[1], (t.shape[0],), generator=gen)
        t[torch.arange(t.shape[0]), at] += 12.0 + 8.0 * torch.rand(t.shape[0], generator=gen)
    elif kind != "normal":
        raise ValueError(f"unknown teacher kind {kind!r}")
    return t


def top_k(teacher_logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A top-K teacher as a server hands it (vLLM's logprobs): its K largest log-probs at T = 1
    and their ids."""
    logp = torch.log_softmax(teacher_logits.double(), dim=-1)
    values, ids = logp.topk(min(k, logp.shape[-1]), dim=-1)
    return values.float(), ids


# ----------------------------------------------------------------------------- the call


def run_loss(fn, tensors: dict, grads: tuple[str, ...], teacher_names: tuple[str, ...], side: dict, options: dict,
             upstream: torch.Tensor, row_shape: tuple[int, ...]) -> Outcome:  # fmt: skip
    """Call `fn(*tensors.values(), **side, **options) -> loss` on fresh copies laid out exactly
    as the case built them (every floating input a leaf that requires grad: a teacher too, so
    that a gradient it should not get shows), run backward with the case's upstream, and report
    the loss, the gradients named in `grads`, whether the teacher's inputs got any gradient
    (teacher_no_grad: 1 when none did), the layouts received and whether an input was written."""
    flats, views = {}, {}
    for name, t in tensors.items():
        flats[name], views[name] = fresh_view(t, requires_grad=t.is_floating_point())
    before = {name: f.clone() for name, f in flats.items()}
    handed = {k: None if t is None else fresh_view(t, requires_grad=False)[1] for k, t in side.items()}
    spy = Spy(fn, tuple(tensors))
    loss = spy(*views.values(), **handed, **options)
    up = upstream_for(loss, upstream, options.get("reduction", "mean"), row_shape)
    if loss.requires_grad:
        loss.backward(up)
    values = {"loss": loss.detach().clone()}
    for name in grads:
        g = views[name].grad
        values[f"grad_{name}"] = torch.zeros_like(views[name]) if g is None else g.detach().clone()
    leaked = any(views[n].grad is not None and bool(views[n].grad.ne(0).any()) for n in teacher_names)
    values["teacher_no_grad"] = torch.tensor(0.0 if leaked else 1.0, dtype=torch.float64)
    built = {name: layout_of(t) for name, t in tensors.items()}
    mutated = [n for n in tensors if not same_bits(flats[n], before[n])]
    mutated += [k for k, t in side.items() if t is not None and not same_bits(handed[k], t)]
    return Outcome(values=values, input_mutated=bool(mutated), built=built, received=spy.seen,
                   mutated_inputs=tuple(mutated))  # fmt: skip


def upcast(t: torch.Tensor | None, dtype: torch.dtype, device=None) -> torch.Tensor | None:
    """t in `dtype` (on `device`, if given) with the same layout: its whole storage converted and
    moved, then viewed as t is. Never `t.to(...)` on the view itself: a view that is not dense (a
    kept slice's rows, a padded vocabulary) comes back as a dense copy, and re-striding that copy
    reads past its end (flkd's kept_slice layout on an H200: tests/test_distill_cases.py). None
    stays None."""
    if t is None or not t.is_floating_point():
        return t if t is None or device is None else t.to(device)
    n = t.untyped_storage().nbytes() // t.element_size()
    flat = t.as_strided((n,), (1,), 0).to(dtype=dtype, device=device)
    return flat.as_strided(t.shape, t.stride(), t.storage_offset())


def as_upstream(u: torch.Tensor, device, dtype=None) -> torch.Tensor:
    return as_handed(u, device=device, dtype=dtype)


# ----------------------------------------------------------------------------- shared axes
DIVERGENCE = Axis("divergence", "what is minimised between the student p and the teacher q",
                  ("forward_kl", "reverse_kl", "jsd", "tvd"), default="forward_kl", tag="", means={
    "forward_kl": "KL(q || p): classic KD (Hinton), TRL GKD beta=0, F.kl_div(log p, q)",
    "reverse_kl": "KL(p || q): on-policy distillation (MiniLLM, TRL beta=1)",
    "jsd": "generalized JSD at beta: TRL GKD / DistillationTrainer, Liger's LigerJSD",
    "tvd": "total variation |p - q| / 2: Liger's LigerTVDLoss (DistiLLM)",
})  # fmt: skip
BETA = Axis("beta", "jsd's interpolation (0: forward KL, 1: reverse KL; other divergences: 0.5, unused)",
            (0.5, 0.1, 0.0, 1.0), default=0.5, tag="b", hidden=(0.5,), means={
    0.5: "the symmetric JSD (TRL's GKD default)",
    0.1: "near the forward end: the mixture is mostly the student (GKD's sweeps)",
    0.0: "the forward-KL end, taken exactly",
    1.0: "the reverse-KL end, taken exactly (TRL DistillationTrainer's default)",
})  # fmt: skip
TEMPERATURE = Axis("temperature", "the temperature both sides' logits are divided by", (1.0, 2.0, 0.7), tag="t",
                   default=1.0, means={1.0: "no temperature", 2.0: "Hinton-style softened targets (TRL #5731: "
                   "applied to both)", 0.7: "a rollout temperature (on-policy distillation)"})  # fmt: skip
TEACHER_GRAD = Axis("teacher_grad", "whether the teacher is asked for a gradient", (False, True), default=False,
                    label=lambda b: "tgrad" if b else None, means={
    False: "a frozen teacher (the default): it must get no gradient, even when it requires grad",
    True: "a teacher trained too (co-distillation): its gradient is checked",
})  # fmt: skip
REDUCTION = Axis("reduction", "how the per-token divergences are reduced", ("none", "sum", "mean", "batchmean"),
                 default="mean", tag="", means={
    "none": "per token, masked or weighted by the caller",
    "sum": "a summed loss (the caller normalises: num_items_in_batch)",
    "mean": "over counted tokens (TRL's 'batchmean' with labels)",
    "batchmean": "over every row, counted or not (PyTorch's F.kl_div 'batchmean' on [N, V])",
})  # fmt: skip
UPSTREAM = Axis("upstream", "the gradient backward receives", ("ones", "random", "masked"), tag="up-",
                default="ones", means={
    "ones": "loss.backward() (for none: a 1 expanded over the rows, stride 0)",
    "random": "a weighted loss: random rows (none) or a random scalar",
    "masked": "none only: (loss * mask).sum(), exact zeros on half the rows",
})  # fmt: skip
IGNORE_PATTERN = ignore_pattern_axis("labels")  # leading_run: TRL GKD's labels mask the prompt so
TEACHER_KIND = Axis("logits", "the kind of teacher drawn for random normal student logits",
                    ("normal", "confident", "self"), default="normal", means={
    "normal": "another (untrained) model",
    "confident": "a trained teacher: one logit per row 12-20 above the rest (q near 1)",
    "self": "the student itself (self-distillation at step 0: divergence 0, gradient 0)",
})  # fmt: skip
DTYPE = Axis("dtype", "the logits' dtype", ("fp32", "bf16", "fp16"), default="fp32", means={
    "fp32": "full precision: the tightest limits",
    "bf16": "mixed precision (the logits must not be rounded further)",
    "fp16": "fp16 (GPU grids only)",
})  # fmt: skip


def allowed(row: dict) -> bool:
    """Crossings no case may have: beta other than 0.5 outside jsd; a top-K teacher with a
    reverse KL (infinite: q = 0 off its ids); a masked upstream outside reduction none."""
    if row.get("beta", 0.5) != 0.5 and row.get("divergence", "jsd") != "jsd":
        return False
    topk = row.get("teacher", "full") != "full"
    if topk and (row.get("divergence") == "reverse_kl" or row.get("beta") == 1.0):
        return False
    return not (row.get("upstream") == "masked" and row.get("reduction", "none") != "none")

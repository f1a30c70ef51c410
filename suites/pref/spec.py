"""The `pref` kernel as the harness sees it: a preference step's inputs, the float64 truth written
from the published formulas (kernels/preference_loss.py's docstring names them; restated here,
not imported, so a wrong formula in the op cannot agree with itself), the yardstick and the call,
once whole and once split as the case says.

A provider is `fn(hidden, weight, ids, mask, ref_logps, *, loss_type, beta, label_smoothing,
desirable, kl_ref, desirable_weight, undesirable_weight) -> loss` (docs/providers.md).

The regime: completions sampled from the policy itself (their log-probs those of likely tokens);
ragged completion masks (one row full); reference sums placed so each row's log-ratio r_i is
u_i / beta, u_i ~ N(0, 1): the DPO margin beta * (r_c - r_r) is of order 1, where the sigmoid
is neither flat nor saturated (asserted per case); for kto every other row desirable and the
log-ratios shifted by 0.5 / beta, so the KL reference point is positive (not clamped to 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ligerbench.cases import Case, generator_for
from ligerbench.problems import Outcome
from ligerbench.suites.grpo.spec import sampled_completions
from ligerbench.suites.pref.axes import KTO_WEIGHTS
from ligerbench.tolerance import yardstick

WORLD = 2  # the split axis' micro-batches


@dataclass
class PrefProblem:
    hidden: torch.Tensor  # [B, T, H], case dtype
    weight: torch.Tensor  # [V, H], case dtype
    ids: torch.Tensor  # [B, T] int64
    mask: torch.Tensor  # [B, T] int64, 1 for a completion token
    ref_logps: torch.Tensor  # [B] float32, the reference's per-sequence sums
    options: dict  # loss_type, beta, label_smoothing, desirable, kl_ref, desirable_weight, undesirable_weight
    split: str


def make_problem(case: Case, seed: int, device: torch.device) -> PrefProblem:
    g = generator_for(case, seed)
    b, t = case.b, case.t
    hidden, weight, logits, ids = sampled_completions(case, g)  # logits / 1.0: the same bits
    lengths = torch.randint(2, t + 1, (b,), generator=g)
    lengths[-1] = t
    mask = (torch.arange(t)[None, :] < lengths[:, None]).long()
    logp = torch.log_softmax(logits, -1).gather(-1, ids[..., None]).squeeze(-1)
    pi = (logp * mask).sum(-1)
    u = torch.randn(b, generator=g)
    kto = case.loss_type == "kto"
    ref = pi - (u + (0.5 if kto else 0.0)) / case.beta
    if case.loss_type == "sigmoid":
        margin = (u[: b // 2] - u[b // 2 :]).abs()
        assert (margin < 6.0).all(), f"{case.id}: a DPO margin of {margin.max():.1f}: the sigmoid is saturated"
    desirable = (torch.arange(b) % 2 == 0) if kto else None
    kl_ref = None
    if kto and case.split != "none":  # the step's reference point, handed to every piece
        kl_ref = float((pi - ref).mean())
    dw, uw = KTO_WEIGHTS[case.weights]
    opts = dict(loss_type=case.loss_type, beta=case.beta, label_smoothing=case.label_smoothing,
                desirable=None if desirable is None else desirable.to(device), kl_ref=kl_ref,
                desirable_weight=dw, undesirable_weight=uw)  # fmt: skip
    return PrefProblem(hidden.to(device), weight.to(device), ids.to(device), mask.to(device),
                       ref.float().to(device), opts, case.split)  # fmt: skip


def truth_loss(hidden, weight, ids, mask, ref_logps, *, loss_type, beta, label_smoothing, desirable, kl_ref,
               desirable_weight, undesirable_weight):  # fmt: skip
    """The published formulas in PyTorch, in the inputs' dtype (float64: the truth; float32: the
    yardstick). Full logits; nothing shared with kernels/preference_loss.py."""
    dt = hidden.dtype
    z = torch.log_softmax(hidden @ weight.T, dim=-1)
    m = mask.to(dt)
    pi = (z.gather(-1, ids[..., None]).squeeze(-1) * m).sum(1)
    r = pi - ref_logps.to(dt)
    if loss_type == "kto":
        point = r.detach().mean() if kl_ref is None else torch.tensor(kl_ref, dtype=dt, device=r.device)
        point = torch.clamp(point, min=0.0)
        good = 1.0 - torch.sigmoid(beta * (r - point))
        bad = 1.0 - torch.sigmoid(beta * (point - r))
        return torch.where(desirable.bool(), desirable_weight * good, undesirable_weight * bad).mean()
    half = r.shape[0] // 2
    if loss_type == "ipo":
        avg = r / m.sum(1)
        return ((avg[:half] - avg[half:] - 1.0 / (2.0 * beta)) ** 2).mean()
    logits = beta * (r[:half] - r[half:])
    # -log sigmoid(x) = softplus(-x), exact in both tails
    return ((1.0 - label_smoothing) * torch.nn.functional.softplus(-logits)
            + label_smoothing * torch.nn.functional.softplus(logits)).mean()  # fmt: skip


def _pieces(problem: PrefProblem) -> list[torch.Tensor]:
    """Row indices of each micro-batch: whole pairs (chosen row i with rejected row i) for the
    paired losses, halves of the batch for kto."""
    b = problem.hidden.shape[0]
    rows = torch.arange(b, device=problem.hidden.device)
    if problem.options["loss_type"] == "kto":
        return list(rows.chunk(WORLD))
    half = b // 2
    return [torch.cat([p, p + half]) for p in rows[:half].chunk(WORLD)]


def _call(fn, problem: PrefProblem, rows, leaves):
    p, opts = problem, dict(problem.options)
    if opts["desirable"] is not None and rows is not None:
        opts["desirable"] = opts["desirable"][rows]
    if rows is None:
        return fn(leaves[0], leaves[1], p.ids, p.mask, p.ref_logps, **opts)
    return fn(leaves[0][rows], leaves[1], p.ids[rows], p.mask[rows], p.ref_logps[rows], **opts)


def run_pref(fn, problem: PrefProblem) -> Outcome:
    """The loss and gradients of the whole batch; and, when the case splits it, the gradients of
    the micro-batches' losses averaged (each piece on its own leaves' copy)."""
    leaves = (
        problem.hidden.detach().clone().requires_grad_(True),
        problem.weight.detach().clone().requires_grad_(True),
    )
    desirable = problem.options["desirable"]
    before = (problem.ref_logps.clone(), None if desirable is None else desirable.clone())
    loss = _call(fn, problem, None, leaves)
    loss.backward()
    values = {"loss": loss.detach().float().reshape(()), "grad_hidden": leaves[0].grad, "grad_weight": leaves[1].grad}
    if problem.split != "none":
        grads = [torch.zeros_like(leaves[0], dtype=torch.float64), torch.zeros_like(leaves[1], dtype=torch.float64)]
        for rows in _pieces(problem):
            piece = (problem.hidden.detach().clone().requires_grad_(True),
                     problem.weight.detach().clone().requires_grad_(True))  # fmt: skip
            (_call(fn, problem, rows, piece) / WORLD).backward()
            for acc, leaf in zip(grads, piece, strict=True):
                if leaf.grad is not None:
                    acc += leaf.grad.double()
        values["split_grad_hidden"], values["split_grad_weight"] = grads
    mutated = not torch.equal(before[0], problem.ref_logps) or (
        desirable is not None and not torch.equal(before[1], problem.options["desirable"])
    )
    return Outcome(values=values, input_mutated=mutated)


def _whole(problem: PrefProblem) -> PrefProblem:
    return PrefProblem(**{**problem.__dict__, "split": "none"})


def reference(problem: PrefProblem) -> Outcome:
    """The float64 truth of the whole batch; the split quantities' truth is the same gradients."""
    p = PrefProblem(**{**problem.__dict__, "hidden": problem.hidden.double(), "weight": problem.weight.double()})
    out = run_pref(truth_loss, _whole(p))
    out.values["split_grad_hidden"] = out.values["grad_hidden"]
    out.values["split_grad_weight"] = out.values["grad_weight"]
    return out


def eager_in_dtype(problem: PrefProblem) -> Outcome:
    """The yardstick (ligerbench/tolerance.py): the formulas in float32 from the same inputs,
    each output rounded once to a 16-bit case dtype."""
    out = yardstick(lambda p: run_pref(truth_loss, _whole(p)), problem,
                    {"hidden": problem.hidden, "weight": problem.weight})  # fmt: skip
    out.values["split_grad_hidden"] = out.values["grad_hidden"]
    out.values["split_grad_weight"] = out.values["grad_weight"]
    return out

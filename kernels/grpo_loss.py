"""The GRPO family of policy losses on our fused log-probs (kernels/fused_linear_log_probs.py):
the completion's per-token log-probs from the lm_head without the logits, then the loss in
PyTorch on [B, T] tensors.

    from ligerbench.kernels.grpo_loss import grpo_loss
    loss = grpo_loss(hidden, lm_head.weight, completion_ids, old_logp, ref_logp, advantages, mask,
                     loss_type="dapo", beta=0.04, temperature=0.7, num_items=tokens_in_the_whole_step)
    loss.backward()

Per token (logp: the policy's log-prob of completion_ids at `temperature`; A: the sequence's
advantage; r = exp(logp - old_logp), or under importance_level="sequence" (GSPO, Zheng et al.
2025) r = exp of the masked mean of (logp - old_logp) over the sequence, the same for its tokens):
  clipped losses (grpo, bnpo, dr_grpo, dapo):  l = -min(r * A, clip(r, 1 - eps_low, 1 + eps_high) * A)
                                               (PPO's pessimistic bound: for A < 0 the clip binds above)
  cispo (MiniMax-M1, 2025):                    l = -sg[min(r, 1 + eps_high)] * A * logp
plus, when beta > 0, beta * KL per token against the reference policy, with d = ref_logp - logp:
  k1: -d (= logp - ref_logp)      k3: exp(d) - d - 1 (Schulman's unbiased, >= 0 estimator)
The tokens are then reduced (m: the mask, 1 for a completion token, 0 for padding):
  grpo     mean over sequences of each sequence's token mean   (Shao et al. 2024, DeepSeekMath)
  bnpo     sum over the batch's tokens / their count            (a token mean of this batch)
  dr_grpo  sum / (B * max_completion_length)                    (Liu et al. 2025, "Dr. GRPO": a constant)
  dapo     sum / num_items                                      (Yu et al. 2025: a token mean over the
  cispo    sum / num_items                                       whole step; num_items None: this batch's)
Splitting a step: with gradient accumulation over k equal micro-batches or data parallelism over k
ranks, the one-batch gradient is the SUM of the micro-batches' (ranks') gradients when dapo/cispo
get num_items = the step's token count, and their MEAN for grpo and dr_grpo (equal micro-batch
sizes; dr_grpo's max_completion_length the step's). bnpo is a token mean of each micro-batch and
does not split exactly: that is its definition, not something num_items fixes.

Shapes: hidden [B, T, H] (any strides), weight [V, H], completion_ids / old_logp / ref_logp / mask
[B, T], advantages [B]; old_logp, ref_logp and advantages are data (no gradient). Returns the
float32 scalar loss; gradients reach hidden, weight and bias. No host sync.
"""

from __future__ import annotations

import torch

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo")
IMPORTANCE_LEVELS = ("token", "sequence")
KL_ESTIMATORS = ("k1", "k3")


def _check(loss_type, importance_level, kl_estimator, eps_low, eps_high, beta, temperature, shapes) -> None:
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    if importance_level not in IMPORTANCE_LEVELS:
        raise ValueError(f"importance_level must be one of {IMPORTANCE_LEVELS}, got {importance_level!r}")
    if kl_estimator not in KL_ESTIMATORS:
        raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {kl_estimator!r}")
    if not (eps_low >= 0 and eps_high >= 0):
        raise ValueError(f"eps_low and eps_high must be >= 0, got {eps_low}, {eps_high}")
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    rows = shapes["completion_ids"]
    for name in ("old_logp", "ref_logp", "mask"):
        if shapes[name] is not None and shapes[name] != rows:
            raise ValueError(f"{name} must be shaped like completion_ids {tuple(rows)}, got {tuple(shapes[name])}")
    if shapes["advantages"] != rows[:1]:
        raise ValueError(f"advantages must be [B] = {tuple(rows[:1])}, got {tuple(shapes['advantages'])}")


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    loss_type: str = "grpo",
    importance_level: str = "token",
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    beta: float = 0.0,
    kl_estimator: str = "k3",
    num_items=None,
    max_completion_length: int | None = None,
) -> torch.Tensor:
    """The loss (module docstring) from per-token log-probs logp [B, T] (float32, with gradient):
    the part of grpo_loss after the log-probs, for a caller that has them already."""
    m = mask.to(torch.float32)
    a = advantages.to(torch.float32)[:, None]
    log_ratio = logp - old_logp.to(torch.float32)
    if importance_level == "sequence":
        log_ratio = (log_ratio * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1.0)
    ratio = torch.exp(log_ratio)
    if loss_type == "cispo":
        per_token = -torch.clamp(ratio, max=1.0 + eps_high).detach() * a * logp
    else:
        per_token = -torch.minimum(ratio * a, torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * a)
    if beta > 0.0:
        d = ref_logp.to(torch.float32) - logp
        per_token = per_token + beta * (-d if kl_estimator == "k1" else torch.exp(d) - d - 1.0)
    per_token = per_token * m
    if loss_type == "grpo":
        return (per_token.sum(-1) / m.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return per_token.sum() / m.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        return per_token.sum() / (m.shape[0] * (max_completion_length or m.shape[1]))
    return per_token.sum() / (m.sum().clamp(min=1.0) if num_items is None else num_items)


def grpo_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    completion_ids: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    loss_type: str = "grpo",
    importance_level: str = "token",
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    beta: float = 0.0,
    kl_estimator: str = "k3",
    temperature: float = 1.0,
    num_items=None,
    max_completion_length: int | None = None,
) -> torch.Tensor:
    """The policy loss of the module docstring, the log-probs from our fused op."""
    shapes = {"completion_ids": tuple(completion_ids.shape), "old_logp": tuple(old_logp.shape),
              "ref_logp": None if ref_logp is None else tuple(ref_logp.shape), "mask": tuple(mask.shape),
              "advantages": tuple(advantages.shape)}  # fmt: skip
    _check(loss_type, importance_level, kl_estimator, eps_low, eps_high, beta, temperature, shapes)
    if beta > 0.0 and ref_logp is None:
        raise ValueError("beta > 0 needs ref_logp (the reference policy's log-probs)")
    from .fused_linear_log_probs import fused_linear_log_probs

    target = torch.where(mask.bool(), completion_ids, -100)
    logp, _ = fused_linear_log_probs(hidden, weight, target, bias=bias, temperature=temperature)
    return policy_loss(
        logp, old_logp, ref_logp, advantages, mask, loss_type=loss_type, importance_level=importance_level,
        eps_low=eps_low, eps_high=eps_high, beta=beta, kl_estimator=kl_estimator, num_items=num_items,
        max_completion_length=max_completion_length,
    )  # fmt: skip

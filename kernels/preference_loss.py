"""Preference losses (DPO, IPO, KTO) on per-sequence log-probs from flp's fused op: no [B, T, V]
logits are stored.

    from ligerbench.kernels.preference_loss import preference_loss
    # rows 0..B/2-1 chosen, B/2..B-1 rejected (sigmoid, ipo); any rows for kto
    loss = preference_loss(hidden, lm_head.weight, ids, mask, ref_logps, loss_type="sigmoid", beta=0.1)

`hidden` [B, T, H] predicts `ids` [B, T]; `mask` [B, T] marks the completion tokens; `ref_logps`
[B] is the reference model's per-sequence sum of log-probs over the same tokens (float32). With
pi_i the policy's sum over row i's completion tokens (temperature 1), r_i = pi_i - ref_i:

- sigmoid (DPO, Rafailov et al. 2023; cDPO label smoothing eps, TRL's `sigmoid`):
  h = beta * (r_chosen - r_rejected), loss = mean over pairs of
  -(1 - eps) * log sigmoid(h) - eps * log sigmoid(-h);
- ipo (Azar et al. 2023; TRL averages each sequence's log-probs over its tokens for IPO):
  h = (pi_c - ref_c) / L_c - (pi_r - ref_r) / L_r, loss = mean over pairs of (h - 1 / (2 beta))^2;
- kto (Ethayarajh et al. 2024): `desirable` [B] bool; z = max(0, kl_ref) with kl_ref the
  reference point (a detached estimate of KL(policy || reference); default: the batch's own
  mean of r_i, detached), loss = mean over rows of w_i * (1 - sigmoid(beta * s_i * (r_i - z))),
  s_i = +1 and w_i = desirable_weight for desirable rows, s_i = -1 and w_i = undesirable_weight
  for the others.

Splitting a step (gradient accumulation, data parallelism) into equal pieces: each piece's loss
is its mean, so pieces are averaged; for kto pass the step's `kl_ref` to every piece (a batch
estimate differs per piece).
"""

from __future__ import annotations

import torch

LOSS_TYPES = ("sigmoid", "ipo", "kto")


def sequence_log_probs(hidden, weight, ids, mask) -> torch.Tensor:
    """[B] float32: each row's sum of log-probs over its completion tokens (flp, temperature 1)."""
    from .fused_linear_log_probs import fused_linear_log_probs

    logp, _ = fused_linear_log_probs(hidden, weight, torch.where(mask.bool(), ids, -100))
    return (logp * mask.to(logp.dtype)).sum(-1)


def _check(loss_type, beta, label_smoothing, hidden, ids, mask, ref_logps, desirable) -> None:
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must be in [0, 0.5), got {label_smoothing}")
    if hidden.dim() != 3 or tuple(ids.shape) != tuple(hidden.shape[:2]) or tuple(mask.shape) != tuple(ids.shape):
        raise ValueError(
            f"hidden must be [B, T, H] with ids and mask [B, T], got {tuple(hidden.shape)}, {tuple(ids.shape)}, "
            f"{tuple(mask.shape)}"
        )
    if tuple(ref_logps.shape) != (hidden.shape[0],):
        raise ValueError(f"ref_logps must be [B] = ({hidden.shape[0]},), got {tuple(ref_logps.shape)}")
    if loss_type != "kto" and hidden.shape[0] % 2:
        raise ValueError(f"{loss_type} takes chosen rows then rejected rows: B must be even, got {hidden.shape[0]}")
    if loss_type == "kto" and (desirable is None or tuple(desirable.shape) != (hidden.shape[0],)):
        raise ValueError("kto needs desirable [B] (True for a desirable completion)")
    if loss_type != "sigmoid" and label_smoothing:
        raise ValueError(f"label_smoothing applies to the sigmoid loss only, got it with {loss_type}")


def preference_from_log_probs(
    logps: torch.Tensor,
    ref_logps: torch.Tensor,
    lengths: torch.Tensor,
    *,
    loss_type: str = "sigmoid",
    beta: float = 0.1,
    label_smoothing: float = 0.0,
    desirable: torch.Tensor | None = None,
    kl_ref=None,
    desirable_weight: float = 1.0,
    undesirable_weight: float = 1.0,
) -> torch.Tensor:
    """The loss (module docstring) from per-sequence sums `logps` [B] (with gradient), the
    reference's `ref_logps` [B] and the completion `lengths` [B]."""
    r = logps - ref_logps.to(logps.dtype)
    if loss_type == "kto":
        z = r.detach().mean() if kl_ref is None else torch.as_tensor(kl_ref, dtype=r.dtype, device=r.device)
        z = z.clamp(min=0.0)
        d = desirable.bool()
        margin = torch.where(d, r - z, z - r)
        weights = torch.where(d, desirable_weight, undesirable_weight).to(r.dtype)
        return (weights * (1.0 - torch.sigmoid(beta * margin))).mean()
    half = r.shape[0] // 2
    if loss_type == "ipo":
        per = r / lengths.to(r.dtype).clamp(min=1.0)
        h = per[:half] - per[half:]
        return ((h - 1.0 / (2.0 * beta)) ** 2).mean()
    h = beta * (r[:half] - r[half:])
    nll = -(1.0 - label_smoothing) * torch.nn.functional.logsigmoid(h)
    if label_smoothing:
        nll = nll - label_smoothing * torch.nn.functional.logsigmoid(-h)
    return nll.mean()


# preference_from_log_probs' options, passed through: the public function names them for its callers
def preference_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    ids: torch.Tensor,
    mask: torch.Tensor,
    ref_logps: torch.Tensor,
    *,
    loss_type: str = "sigmoid",
    beta: float = 0.1,
    label_smoothing: float = 0.0,
    desirable: torch.Tensor | None = None,
    kl_ref=None,
    desirable_weight: float = 1.0,
    undesirable_weight: float = 1.0,
) -> torch.Tensor:
    """The preference loss of the module docstring, the log-probs from our fused op."""
    _check(loss_type, beta, label_smoothing, hidden, ids, mask, ref_logps, desirable)
    logps = sequence_log_probs(hidden, weight, ids, mask)
    return preference_from_log_probs(
        logps, ref_logps, mask.sum(-1), loss_type=loss_type, beta=beta, label_smoothing=label_smoothing,
        desirable=desirable, kl_ref=kl_ref, desirable_weight=desirable_weight,
        undesirable_weight=undesirable_weight,
    )  # fmt: skip

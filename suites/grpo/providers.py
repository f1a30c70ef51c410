"""Providers of `grpo`: ours (flp's fused log-probs, then the loss) and eager (full float32 logits
from upcast operands, then the same loss in PyTorch)."""

from __future__ import annotations

import torch

from ligerbench.registry import OURS, Provider


def _ours():
    from ligerbench.kernels.grpo_loss import grpo_loss

    return grpo_loss


def eager(hidden, weight, completion_ids, old_logp, ref_logp, advantages, mask, *, temperature=1.0, **options):
    """Full float32 logits (operands upcast), log_softmax, then kernels/grpo_loss.py's policy_loss."""
    from ligerbench.kernels.grpo_loss import policy_loss

    z = torch.log_softmax((hidden.float() @ weight.float().T) / temperature, dim=-1)
    logp = z.gather(-1, completion_ids[..., None]).squeeze(-1)
    return policy_loss(logp, old_logp, ref_logp, advantages, mask, **options)


PROVIDERS = (
    Provider(name="ours", **OURS, kernel="grpo", load=_ours,
             description="kernels/grpo_loss.py: flp's fused log-probs (no [B, T, V] stored), the loss in PyTorch"),
    Provider(name="eager", kernel="grpo", load=lambda: eager,
             description="PyTorch: full float32 logits from upcast operands, the same loss"),
)  # fmt: skip

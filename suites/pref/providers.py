"""Providers of `pref`: ours (flp's fused per-sequence log-probs, then the loss) and eager (full
float32 logits from upcast operands, then the same loss in PyTorch)."""

from __future__ import annotations

import torch

from ligerbench.registry import OURS, Provider


def _ours():
    from ligerbench.kernels.preference_loss import preference_loss

    return preference_loss


def eager(hidden, weight, ids, mask, ref_logps, **options):
    """Full float32 logits (operands upcast), log_softmax, per-sequence sums, then
    kernels/preference_loss.py's preference_from_log_probs."""
    from ligerbench.kernels.preference_loss import preference_from_log_probs

    z = torch.log_softmax(hidden.float() @ weight.float().T, dim=-1)
    logps = (z.gather(-1, ids[..., None]).squeeze(-1) * mask).sum(-1)
    return preference_from_log_probs(logps, ref_logps, mask.sum(-1), **options)


PROVIDERS = (
    Provider(name="ours", **OURS, kernel="pref", load=_ours,
             description="kernels/preference_loss.py: flp's fused log-probs summed per sequence, the loss in PyTorch"),
    Provider(name="eager", kernel="pref", load=lambda: eager,
             description="PyTorch: full float32 logits from upcast operands, the same loss"),
)  # fmt: skip

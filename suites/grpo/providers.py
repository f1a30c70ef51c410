"""Providers of `grpo`: ours (flp's fused log-probs, then the loss), two settings of it (small row
chunks; the recompute path), and eager (full float32 logits from upcast operands, then the same
loss in PyTorch)."""

from __future__ import annotations

import functools

import torch

from ligerbench.registry import OURS, Provider


def _ours(**fixed):
    from ligerbench.kernels.grpo_loss import grpo_loss

    return functools.partial(grpo_loss, **fixed) if fixed else grpo_loss


def small_chunks(hidden, weight, completion_ids, *args, **options):
    """Ours with row chunks of a quarter of the batch's tokens less one (5 of 24): several chunks
    of the eager path (kernels/grpo_loss.py), the last one partial, at any size (the budget is
    sized from the call's shapes); the recompute path (sequence-level cases) gets several
    vocabulary slices from the same budget."""
    from ligerbench.kernels.fp32_products import SHARED_LOGIT_BYTES
    from ligerbench.kernels.grpo_loss import grpo_loss

    rows = max(1, completion_ids.numel() // 4 - 1)
    chunk_bytes = rows * weight.shape[0] * SHARED_LOGIT_BYTES
    return grpo_loss(hidden, weight, completion_ids, *args, chunk_bytes=chunk_bytes, **options)


def eager(hidden, weight, completion_ids, old_logp, ref_logp, advantages, mask, *, temperature=1.0, **options):
    """Full float32 logits (operands upcast), log_softmax, then kernels/grpo_loss.py's policy_loss."""
    from ligerbench.kernels.grpo_loss import policy_loss

    z = torch.log_softmax((hidden.float() @ weight.float().T) / temperature, dim=-1)
    logp = z.gather(-1, completion_ids[..., None]).squeeze(-1)
    return policy_loss(logp, old_logp, ref_logp, advantages, mask, **options)


PROVIDERS = (
    Provider(name="ours", **OURS, kernel="grpo", load=_ours,
             description="kernels/grpo_loss.py: the gradients formed in forward by row chunks for token-level "
             "ratios, flp's fused log-probs for sequence-level ones (no [B, T, V] stored), the loss in PyTorch"),
    Provider(name="ours_small_chunks", **OURS, kernel="grpo", load=lambda: small_chunks,
             settings={"chunk_rows": "tokens // 4 - 1"},
             description="ours with row chunks of a quarter of the tokens less one: several chunks, the last partial"),
    Provider(name="ours_recompute", **OURS, kernel="grpo", load=lambda: _ours(path="recompute"),
             settings={"path": "recompute"},
             description="ours, path='recompute' everywhere: flp's fused log-probs, backward recomputes the logits"),
    Provider(name="eager", kernel="grpo", load=lambda: eager,
             description="PyTorch: full float32 logits from upcast operands, the same loss"),
)  # fmt: skip

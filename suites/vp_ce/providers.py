"""Providers of the `vp_ce` kernel (vocab-parallel cross entropy), each called once per rank on
that rank's shard (suites/vp_ce/spec.py gives the signature):
  ours          kernels/vocab_parallel_cross_entropy.py;
  ours_inplace  the same, gradient written into the shard (declared);
  gathered      the yardstick: the shards all-gathered, our single-GPU kernel on the full logits,
                the gradient of this rank's slice handed back.
Kernels are imported in `load()`, after the command has chosen Triton's mode.
"""

from __future__ import annotations

import functools

import torch

from ligerbench.registry import OURS_RANKS, Provider


def _load_ours(inplace: bool):
    from ligerbench.kernels.vocab_parallel_cross_entropy import vocab_parallel_cross_entropy

    return functools.partial(vocab_parallel_cross_entropy, return_z_loss=True, inplace_backward=inplace)


class _GatherShards(torch.autograd.Function):
    """Full [N, V] logits from every rank's shard; backward hands back this rank's slice (every
    rank computes the same global loss, so no reduction is needed)."""

    @staticmethod
    def forward(ctx, shard, group, widths, lo):
        from ligerbench.kernels.vocab_parallel_cross_entropy import all_gather

        n = shard.shape[0]
        padded = shard.new_zeros(n, max(widths))
        padded[:, : shard.shape[1]] = shard
        parts = all_gather(padded, group)
        ctx.lo, ctx.hi = lo, lo + shard.shape[1]
        return torch.cat([parts[r, :, :w] for r, w in enumerate(widths)], dim=1)

    @staticmethod
    def backward(ctx, grad):
        return grad[:, ctx.lo : ctx.hi], None, None, None


def _gathered(logits_shard, target, *, group, vocab_start, class_weight_shard, **opts):
    from ligerbench.kernels.cross_entropy import cross_entropy
    from ligerbench.kernels.vocab_parallel_cross_entropy import all_gather

    dev = logits_shard.device
    widths = all_gather(torch.tensor([logits_shard.shape[1]], device=dev), group).reshape(-1).tolist()
    full = _GatherShards.apply(logits_shard, group, widths, vocab_start)
    weight = None
    if class_weight_shard is not None:
        weight = _GatherShards.apply(class_weight_shard[None, :].float(), group, widths, vocab_start)[0]
    return cross_entropy(full, target, weight=weight, return_z_loss=True, **opts)


PROVIDERS = (
    Provider(
        name="ours",
        **OURS_RANKS,
        kernel="vp_ce",
        description="kernels/vocab_parallel_cross_entropy.py (one all_gather of [N+1, 6] statistics per call)",
        load=lambda: _load_ours(inplace=False),
    ),
    Provider(
        name="ours_inplace",
        **OURS_RANKS,
        kernel="vp_ce",
        description="the same with inplace_backward=True (gradient written into the logits shard)",
        load=lambda: _load_ours(inplace=True),
        mutates_input=True,
    ),
    Provider(
        name="gathered",
        kernel="vp_ce",
        description="shards all-gathered, then our single-GPU cross_entropy on the full logits (yardstick)",
        load=lambda: _gathered,
        # on CPU our single-GPU kernel runs through Triton's interpreter, ~0.5 s a case: a GPU peer only
        devices=("cuda",),
    ),
)

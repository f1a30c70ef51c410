"""Providers of the `vp_flce` kernel (vocab-parallel fused linear + cross entropy), each called
once per rank with that rank's weight shard (suites/vp_flce/spec.py gives the signature):
  ours               kernels/vocab_parallel_fused_linear_cross_entropy.py, default chunk budget;
  ours_3_chunks      the same in 3 chunks, the last one partial (chunk_tokens = N // 3 + 1),
                     a statistics gather each (at the quick grid's 12 tokens: 5, 5, 2);
  ours_fp32_accum    the same in 3 chunks, the weight gradient accumulated in fp32;
  gathered           the yardstick: the weight (and bias, class weight) shards all-gathered, our
                     single-GPU fused kernel on the whole head, this rank's slice of the weight
                     gradient handed back.
Kernels are imported in `load()`, after the command has chosen Triton's mode.
"""

from __future__ import annotations

import functools

from ligerbench.registry import OURS_RANKS, Provider
from ligerbench.suites.vp_ce.providers import _GatherShards

CHUNKS = 3


def three_chunks(n_tokens: int) -> int:
    """Tokens per chunk that cut n_tokens into 3 chunks (fewer below 4 tokens), the last partial."""
    return n_tokens // CHUNKS + 1


def _load_ours(chunked: bool = False, **fixed):
    from ligerbench.kernels.vocab_parallel_fused_linear_cross_entropy import (
        vocab_parallel_fused_linear_cross_entropy,
    )

    if not chunked:
        return functools.partial(vocab_parallel_fused_linear_cross_entropy, return_z_loss=True, **fixed)

    def call(hidden, weight_shard, target, **opts):
        tokens = hidden.numel() // max(hidden.shape[-1], 1)
        return vocab_parallel_fused_linear_cross_entropy(
            hidden, weight_shard, target, return_z_loss=True, chunk_tokens=three_chunks(tokens), **fixed, **opts
        )

    return call


def _gathered(hidden, weight_shard, target, *, group, vocab_start, bias_shard, class_weight_shard, **opts):
    import torch

    from ligerbench.kernels.fused_linear_cross_entropy import fused_linear_cross_entropy
    from ligerbench.kernels.vocab_parallel_cross_entropy import all_gather

    dev = weight_shard.device
    widths = all_gather(torch.tensor([weight_shard.shape[0]], device=dev), group).reshape(-1).tolist()

    def whole(shard_rows):  # [V_local, k] -> [V, k], backward hands back this rank's rows
        return _GatherShards.apply(shard_rows.t(), group, widths, vocab_start).t()

    weight = whole(weight_shard)
    bias = None if bias_shard is None else whole(bias_shard[:, None])[:, 0]
    cw = None if class_weight_shard is None else whole(class_weight_shard[:, None].float())[:, 0]
    return fused_linear_cross_entropy(hidden, weight, target, bias=bias, class_weight=cw, return_z_loss=True, **opts)


PROVIDERS = (
    Provider(
        name="ours",
        **OURS_RANKS,
        kernel="vp_flce",
        description="kernels/vocab_parallel_fused_linear_cross_entropy.py (a stats all_gather per chunk, "
        "one dh all_reduce)",
        load=_load_ours,
    ),
    Provider(
        name="ours_3_chunks",
        **OURS_RANKS,
        kernel="vp_flce",
        description=f"the same in {CHUNKS} chunks, the last one partial (a statistics gather each)",
        load=lambda: _load_ours(chunked=True),
    ),
    Provider(
        name="ours_fp32_accum",
        **OURS_RANKS,
        kernel="vp_flce",
        description=f"the same in {CHUNKS} chunks with the weight gradient accumulated in fp32",
        load=lambda: _load_ours(chunked=True, grad_weight_accum="fp32"),
    ),
    Provider(
        name="gathered",
        kernel="vp_flce",
        description="weight shards all-gathered, then our single-GPU fused_linear_cross_entropy (yardstick)",
        load=lambda: _gathered,
        # on CPU our single-GPU kernel runs through Triton's interpreter: a GPU peer only
        devices=("cuda",),
    ),
)

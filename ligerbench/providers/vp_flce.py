"""Providers of the `vp_flce` kernel (vocab-parallel fused linear + cross entropy), each called
once per rank with that rank's weight shard (ligerbench/specs/vp_flce.py gives the signature):
  ours               kernels/vocab_parallel_fused_linear_cross_entropy.py, default chunk budget;
  ours_small_chunks  the same in 5-token chunks: many chunks (a statistics gather each), the
                     last one partial (no token count of the grids is a multiple of 5);
  ours_fp32_accum    the same with the weight gradient accumulated in fp32;
  gathered           the yardstick: the weight (and bias, class weight) shards all-gathered, our
                     single-GPU fused kernel on the whole head, this rank's slice of the weight
                     gradient handed back.
Kernels are imported in `load()`, after the command has chosen Triton's mode.
"""

from __future__ import annotations

import functools

from ligerbench.providers.vp_ce import _GatherShards
from ligerbench.registry import Provider

SMALL_CHUNK_TOKENS = 5


def _load_ours(**fixed):
    from ligerbench.kernels.vocab_parallel_fused_linear_cross_entropy import (
        vocab_parallel_fused_linear_cross_entropy,
    )

    return functools.partial(vocab_parallel_fused_linear_cross_entropy, return_z_loss=True, **fixed)


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
        kernel="vp_flce",
        description="kernels/vocab_parallel_fused_linear_cross_entropy.py (a stats all_gather per chunk, "
        "one dh all_reduce)",
        load=_load_ours,
    ),
    Provider(
        name="ours_small_chunks",
        kernel="vp_flce",
        description=f"the same in {SMALL_CHUNK_TOKENS}-token chunks (many gathers, a partial last chunk)",
        load=lambda: _load_ours(chunk_tokens=SMALL_CHUNK_TOKENS),
    ),
    Provider(
        name="ours_fp32_accum",
        kernel="vp_flce",
        description="the same in 5-token chunks with the weight gradient accumulated in fp32",
        load=lambda: _load_ours(chunk_tokens=SMALL_CHUNK_TOKENS, grad_weight_accum="fp32"),
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

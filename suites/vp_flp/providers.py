"""Providers of the `vp_flp` kernel (vocab-parallel log-probs and entropy from the lm_head), each
called once per rank with that rank's weight shard (suites/vp_flp/spec.py gives the signature):
  ours           kernels/vocab_parallel_fused_linear_log_probs.py, default budget (at the quick
                 grid's shapes one vocabulary slice per shard);
  ours_3_slices  the same with every shard cut into 3 vocabulary slices, the last one partial
                 (chunk_cols = V_local // 3 + 1): the row's softmax carried between slices
                 before the merge across ranks;
  gathered       the yardstick: the weight (and bias) shards all-gathered, the float32 PyTorch
                 semantics (flp's `eager` provider) on the whole head, this rank's rows of the
                 weight gradient handed back. PyTorch only: it runs on simulated and real ranks
                 alike, on any device, and checks the harness's collectives apart from our op.
Kernels are imported in `load()`, after the command has chosen Triton's mode.
"""

from __future__ import annotations

import functools

from ligerbench.registry import OURS_RANKS, Provider
from ligerbench.suites.flp.providers import eager_fp32
from ligerbench.suites.vp_ce.providers import _GatherShards

SLICES = 3


def three_slices(v_local: int) -> int:
    """Vocabulary columns per slice that cut a shard of v_local classes into 3 slices (fewer
    below 4 classes), the last one partial."""
    return v_local // SLICES + 1


def _load_ours(sliced: bool = False):
    from ligerbench.kernels.vocab_parallel_fused_linear_log_probs import vocab_parallel_fused_linear_log_probs

    if not sliced:
        return vocab_parallel_fused_linear_log_probs

    def call(hidden, weight_shard, target, **opts):
        return vocab_parallel_fused_linear_log_probs(
            hidden, weight_shard, target, chunk_cols=three_slices(weight_shard.shape[0]), **opts
        )

    return call


def gathered_head(weight_shard, bias, group, vocab_start):
    """(weight [V, H], bias [V] or None): every rank's shard all-gathered; backward hands back
    this rank's rows."""
    import torch

    from ligerbench.kernels.vocab_parallel_cross_entropy import all_gather

    dev = weight_shard.device
    widths = all_gather(torch.tensor([weight_shard.shape[0]], device=dev), group).reshape(-1).tolist()

    def whole(shard_rows):  # [V_local, k] -> [V, k]
        return _GatherShards.apply(shard_rows.t(), group, widths, vocab_start).t()

    return whole(weight_shard), None if bias is None else whole(bias[:, None])[:, 0]


def gathered(hidden, weight_shard, target, *, bias, group, vocab_start, **options):
    weight, full_bias = gathered_head(weight_shard, bias, group, vocab_start)
    return eager_fp32(hidden, weight, target, bias=full_bias, **options)


PROVIDERS = (
    Provider(
        name="ours",
        **OURS_RANKS,
        kernel="vp_flp",
        description="kernels/vocab_parallel_fused_linear_log_probs.py (one stats all_gather, one dh all_reduce)",
        load=_load_ours,
    ),
    Provider(
        name="ours_3_slices",
        **OURS_RANKS,
        kernel="vp_flp",
        description=f"the same with every shard cut into {SLICES} vocabulary slices, the last one partial",
        load=functools.partial(_load_ours, sliced=True),
    ),
    Provider(
        name="gathered",
        kernel="vp_flp",
        description="weight shards all-gathered, then the float32 PyTorch semantics on the whole head (yardstick)",
        load=lambda: gathered,
    ),
)

"""Ad-hoc `vp_ce` providers for tests/test_vp_ce_bench.py, named as PATH.py:FUNCTION (every rank
loads this file): each plants one thing the distributed bench must report."""

from __future__ import annotations

import time

import torch.distributed as dist

from ligerbench.kernels.vocab_parallel_cross_entropy import vocab_parallel_cross_entropy

SLOW_RANK_S = 0.25  # far above a smoke call (milliseconds), so the slowest rank is unmistakable


def last_rank_slow(logits_shard, target, *, group, vocab_start, ignore_index, reduction):
    """Ours, then the last rank sleeps: the step's time is that rank's, not rank 0's."""
    loss = vocab_parallel_cross_entropy(
        logits_shard, target, group=group, vocab_start=vocab_start, ignore_index=ignore_index, reduction=reduction
    )
    if dist.get_rank() == dist.get_world_size() - 1:
        time.sleep(SLOW_RANK_S)
    return loss


def fails_everywhere(logits_shard, target):
    raise ValueError("planted: this provider fails on every rank")

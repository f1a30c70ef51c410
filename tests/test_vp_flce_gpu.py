"""The vocab-parallel fused linear cross entropy compiled on a GPU, on simulated ranks (threads
sharing one device): every config of tests/vp_flce_checks.py, and a vocabulary of many blocks a
row in bf16, where the finishing kernel's gradient lies under the float32 logits and each
block's store waits on a barrier (kernels/vocab_parallel_passes.py: without it a warp ahead
stores over logits a warp behind has yet to load). Held to the float64 truth by the rule of
tests/test_vp_flce_op.py. Real NCCL ranks: `ligerbench verify --kernel vp_flce --nproc 2`."""

from __future__ import annotations

import pytest
import torch
from vp_flce_checks import CONFIGS, check_rank

from ligerbench.distributed.simulated import run_ranks

pytestmark = pytest.mark.gpu

# 20011 classes (not a multiple of a block) over 2 ranks: 5 blocks of 2048-4096 columns a row per
# shard; 300 tokens in 128-token chunks (a partial last one); every option in the "all" case
WIDE = {
    "wide_mean": dict(v=20011, n=300, h=64, reduction="mean", dtype=torch.bfloat16, chunk_tokens=128),
    "wide_all_none": dict(v=20011, n=300, h=64, reduction="none", dtype=torch.bfloat16, chunk_tokens=128,
                          label_smoothing=0.1, softcap=20.0, z_loss_scale=0.01, class_weight=True,
                          token_weight=True, bias=True),
}  # fmt: skip


def _worlds(configs: dict) -> list[tuple[str, int]]:
    """Every config at one rank; at 2 and 3 ranks those formed in forward. Reduction "none" forms
    its gradients in backward, which autograd runs on its CUDA worker thread, where simulated
    ranks cannot meet for the hidden gradient's all_reduce (vp_flce's spec refuses simulated ranks
    on a GPU for that reason); real ranks check it: `verify --kernel vp_flce --nproc 2`."""
    return [(name, world) for name, cfg in configs.items() for world in (1, 2, 3)
            if world == 1 or cfg["reduction"] != "none"]  # fmt: skip


@pytest.mark.parametrize("name, world", _worlds(CONFIGS))
def test_every_config_on_simulated_ranks_on_a_gpu(world, name):
    run_ranks(world, lambda rank, group: check_rank(rank, group, world, name, device="cuda"))


@pytest.mark.parametrize("name, world", _worlds(WIDE))
def test_a_wide_vocabulary_in_bf16_on_a_gpu(world, name):
    run_ranks(world, lambda rank, group: check_rank(rank, group, world, name, device="cuda", cfg=WIDE[name]))

"""Liger-Kernel 0.8.5 (docs/peers.md, "Every failing check, classified"): its GRPO losses' dapo and
cispo normaliser (the Triton loss's `_compute_dapo_normalizer` and the fused linear loss's copy of
it, `LigerFusedLinearPPOBase._compute_dapo_normalizer`) divides the step's token count
(`num_items_in_batch`, TRL's total over every process) by the world size and then clamps it to at
least 1; TRL clamps the count first and then divides. With fewer valid tokens in the step than
ranks the two differ: one valid token over four data-parallel ranks gives each rank a normaliser
of 1 where TRL's is 1/4, and the gradient DDP averages is a quarter of the global token mean's
(the one-token pattern of Megatron-LM #7452).

Four gloo ranks on CPU, each with its shard of a step whose only completion token is on rank 3;
a rank's loss is its token sum over the normaliser, and DDP averages the ranks' gradients:

    pip install liger-kernel==0.8.5
    python docs/repro/liger_grpo_normaliser_clamped.py
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 4


def rank(r: int, port: int, out) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=r, world_size=WORLD)
    from liger_kernel.chunked_loss.fused_linear_ppo import LigerFusedLinearPPOBase
    from liger_kernel.ops.grpo_loss import _compute_dapo_normalizer

    mask = torch.zeros(1, 6)
    if r == WORLD - 1:
        mask[0, 0] = 1.0  # the step's one completion token
    total = torch.tensor(1.0)  # num_items_in_batch: the step's valid tokens, over every rank
    liger = float(_compute_dapo_normalizer(mask, num_items_in_batch=total))
    fused = float(LigerFusedLinearPPOBase._compute_dapo_normalizer(mask, num_items_in_batch=total))
    trl = float(total.clamp(min=1.0) / WORLD)  # TRL 1.16's GRPOTrainer (dapo, cispo)
    token_grad = 1.0  # d(loss)/d(the token's loss term) on its rank is 1 / normaliser; DDP divides by WORLD
    if r == WORLD - 1:
        out.put((liger, fused, trl, token_grad / liger / WORLD, token_grad / trl / WORLD))
    dist.destroy_process_group()


if __name__ == "__main__":
    queue = mp.get_context("spawn").SimpleQueue()
    mp.spawn(rank, args=(29517, queue), nprocs=WORLD)
    liger, fused, trl, liger_grad, trl_grad = queue.get()
    print(f"normaliser on each rank: Liger's Triton loss {liger}, its fused linear loss {fused}, TRL {trl}")
    print(f"the token's gradient after DDP's average (the global mean's is 1.0): Liger {liger_grad}, TRL {trl_grad}")

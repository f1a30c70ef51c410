"""verl 0.9.1's fused `linear_cross_entropy` over a vocab-parallel group (a tensor-parallel
lm_head: each rank holds rows [r * V/world, (r+1) * V/world) of the weight, the hidden states and
the labels whole), against float64 on the whole head. Prints each rank's log-prob and entropy
errors and the gradients' (the hidden's summed over ranks, as a TP layer's backward does).

    pip install --no-deps verl==0.9.1   # needs 2 CUDA GPUs
    torchrun --nproc-per-node 2 docs/repro/verl_fused_vocab_parallel.py
"""

import importlib
import importlib.metadata
import sys
import types
from pathlib import Path

import torch
import torch.distributed as dist

root = Path(str(importlib.metadata.distribution("verl").locate_file(""))) / "verl"
for name, folder in (("verl", root), ("verl.utils", root / "utils")):
    sys.modules.setdefault(name, types.ModuleType(name)).__path__ = [str(folder)]
fused = importlib.import_module("verl.utils.kernel.linear_cross_entropy")

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(rank)
torch.manual_seed(0)  # the same inputs on every rank
n, h, v = 2048, 1024, 128256
hidden = torch.randn(n, h).bfloat16().cuda()
weight = (torch.randn(v, h) * h**-0.5).bfloat16().cuda()
target = torch.randint(0, v, (n,)).cuda()
up_logp, up_ent = torch.randn(n).cuda(), torch.randn(n).cuda()

shard = v // world
hs = hidden.clone().requires_grad_(True)
ws = weight[rank * shard : (rank + 1) * shard].clone().requires_grad_(True)
logp, entropy = fused.linear_cross_entropy(hs, ws, target, 1.0, "none", dist.group.WORLD)
((logp * up_logp).sum() + (entropy * up_ent).sum()).backward()
grad_hidden = hs.grad.float().clone()
dist.all_reduce(grad_hidden)

hd, wd = hidden.double().requires_grad_(True), weight.double().requires_grad_(True)
lp_all = torch.log_softmax(hd @ wd.t(), -1)
ref_logp = lp_all.gather(-1, target[:, None]).squeeze(-1)
ref_ent = -(lp_all.exp() * lp_all).sum(-1)
((ref_logp * up_logp.double()).sum() + (ref_ent * up_ent.double()).sum()).backward()


def rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


print(
    f"rank {rank}: logp NaN {logp.isnan().sum().item()} of {n}; logp error {rel(logp.nan_to_num(), ref_logp):.3e}; "
    f"entropy error {rel(entropy, ref_ent):.3e}; grad_hidden (summed) error {rel(grad_hidden, hd.grad):.3e}; "
    f"grad_weight shard error {rel(ws.grad.float(), wd.grad[rank * shard : (rank + 1) * shard]):.3e}",
    flush=True,
)
dist.destroy_process_group()

"""`bench` of the `vp_flce` kernel (vocab-parallel fused linear + cross entropy) on real ranks:

    ligerbench bench --kernel vp_flce --nproc 2            # 2 GPUs, NCCL; the Llama-3-8B head
    ligerbench bench --kernel vp_flce --nproc 2 --smoke    # 2 gloo ranks on CPU, NOT a measurement

Each rank holds the hidden states [N, H] (the same on every rank: drawn from the case alone) and
its shard [V_local, H] of the head's weight (vp_ce's `vocab_slice`: the same rows whatever the
split, scaled by 1/sqrt(H) so the logits are about unit normal); the targets are the same on
every rank. Timing as for vp_ce
(ligerbench/bench/engine.py: every rank times the same provider at once, the slowest counts).

Work model, per rank: FLOPs = 6 * N * H * V_local (the local logits, then dh and dW_shard); the
collectives move N * H elements (dh's all_reduce) and a few floats per row.

Peers (per rank): `gathered` (the weight shards all-gathered, our single-GPU fused kernel on the
whole head) and, bench only: `single_gpu`, our single-GPU fused kernel on a whole head held by
this rank, no collective, the yardstick of the time target below; `loss_parallel`, PyTorch's
tensor-parallel head as a user writes it (the logits shard `hidden @ weight_shard.T` behind a
column-parallel layer's input, which sums dL/dh over the group in backward, then vp_ce's
loss_parallel cross entropy on it: the [N, V_local] logits made whole in memory); and Liger's
`liger_tp` (suites/peers/liger.py).
"""

from __future__ import annotations

import functools
import math

import torch

from ligerbench.bench.ceilings import MATMUL
from ligerbench.bench.spec import (
    BenchInputs,
    BenchSpec,
    Target,
    at_point,
    design_target,
    drawn_targets,
    element_bytes,
    ignored_rows,
)
from ligerbench.bench.spec import device_generator as case_generator
from ligerbench.cases import DTYPES
from ligerbench.suites.ce.bench import plain_options
from ligerbench.suites.common import bench_shapes
from ligerbench.suites.flce.bench import MATMULS
from ligerbench.suites.peers.tensor_parallel import summed_over_group
from ligerbench.suites.vp_ce.bench import (
    even_shards_peer,
    loss_parallel_shard,
    rank_shard,
    tiled_head,
    unsplit,
    vocab_slice,
    widest_shard,
)
from ligerbench.suites.vp_flce.axes import case as vp_flce_case

HEAD = "llama3-8b"  # the design target's head (docs/performance.md)
AT_TARGET = at_point(n=8192, v=128256, h=4096, dtype="bf16", world=2)


def flops(case, mode: str) -> float:
    """The fused head's matmuls (flce's) over this rank's widest vocabulary shard."""
    return MATMULS[mode] * case.n * case.h * widest_shard(case)


def gradients_mib(case) -> float:
    """A rank's gradients: dh [N, H] and dW_shard [V_local, H] in the inputs' dtype."""
    return (case.n + widest_shard(case)) * case.h * element_bytes(case) / 2**20


def rank_head(case, seed: int, device: torch.device):
    """This rank's share of a vocab-parallel head's bench point (vp_flce's and vp_flp's): (its first
    class, the point's generator, the hidden states [N, H], the same on every rank, and its shard
    [V_local, H] of the weight, scaled by 1/sqrt(H)), both leaves. Every draw is keyed by the point
    before the split: one global problem at every rank count."""
    lo, hi = rank_shard(case)
    dtype = DTYPES[case.dtype]
    g = case_generator(unsplit(case), seed, device)
    hidden = torch.randn(case.n, case.h, generator=g, device=device, dtype=dtype).requires_grad_(True)
    weight = vocab_slice(case, seed, lo, hi, case.h, dim=0, device=device, dtype=torch.float32)
    return lo, g, hidden, (weight / math.sqrt(case.h)).to(dtype).requires_grad_(True)


def make_inputs(case, seed: int, device: torch.device) -> BenchInputs:
    lo, g, hidden, weight = rank_head(case, seed, device)
    ignore_index, ignored = ignored_rows(unsplit(case), seed, device)
    target = drawn_targets(case, g, ignore_index, ignored)
    # group None: the default group, every rank of the run
    options = plain_options(ignore_index, case.reduction, group=None, vocab_start=lo, bias_shard=None,
                            class_weight_shard=None)  # fmt: skip
    return BenchInputs(positional=[hidden, weight, target], leaves=[hidden, weight], options=options)


def _load_single_gpu():
    from ligerbench.kernels.fused_linear_cross_entropy import fused_linear_cross_entropy

    held: dict = {}

    def single_gpu(hidden, weight_shard, target, *, ignore_index, reduction):
        weight = tiled_head(held, weight_shard)
        return fused_linear_cross_entropy(hidden, weight, target, ignore_index=ignore_index, reduction=reduction)

    return single_gpu


def _load_loss_parallel_head():
    from torch.distributed.tensor.parallel import loss_parallel  # noqa: F401 -- unavailable: skipped

    cross_entropy = loss_parallel_shard

    def loss_parallel_head(hidden, weight_shard, target, *, group, ignore_index, reduction, label_smoothing):
        logits_shard = summed_over_group(hidden, group) @ weight_shard.t()
        return cross_entropy(logits_shard, target, group=group, ignore_index=ignore_index, reduction=reduction,
                             label_smoothing=label_smoothing)  # fmt: skip

    return loss_parallel_head


VARIANTS = (
    even_shards_peer(
        "single_gpu",
        "vp_flce",
        "our single-GPU fused kernel on a whole head held by each rank (no collective): the time yardstick; the "
        "head is this rank's shard tiled, so its loss is not the others'",
        _load_single_gpu,
    ),
    even_shards_peer(
        "loss_parallel",
        "vp_flce",
        "PyTorch: the logits shard hidden @ W_shard.T (dL/dh summed over the group), then loss_parallel() "
        "F.cross_entropy on it as a DTensor",
        _load_loss_parallel_head,
    ),
)

SOURCE = f"{design_target('vp_flce')}: vocab-parallel FLCE, Llama-3-8B head, N=8192, bf16, 2 ranks"
# the kernel's bench, spelled out as data: alike in shape across kernels, its own in every value
SPEC = BenchSpec(
    kernel="vp_flce",
    make_inputs=make_inputs,
    work=flops, rate=MATMUL,
    work_formula="FLOPs per rank = k * N * H * V_local, V_local = ceil(V / ranks); k: full 6, forward 2, backward 4",
    sweeps={
        "heads": functools.partial(bench_shapes.heads_points, vp_flce_case, (HEAD,)),
        "tokens": functools.partial(bench_shapes.sweep_points, vp_flce_case, "tokens", fused=True),
    },
    targets=(
        Target(
            ("ours",),
            metric="time_ms",
            applies=AT_TARGET,
            peers=("single_gpu",),
            factor=0.55,
            source=f"{SOURCE}: time per rank <= 0.55x our single-GPU kernel's at the same N",
        ),
        Target(
            ("ours",),
            metric="extra_mib",
            applies=AT_TARGET,
            limit=lambda case: gradients_mib(case) + 256,
            source=f"{SOURCE}: memory per rank <= its gradients (dh, dW shard) + 256 MiB",
        ),
    ),
    distributed=True,
)  # fmt: skip

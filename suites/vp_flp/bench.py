"""`bench` of the `vp_flp` kernel (vocab-parallel log-probs and entropy from a column-parallel
lm_head) on real ranks, beside the peers' tensor-parallel heads:

    ligerbench bench --kernel vp_flp --nproc 2              # 2 GPUs, NCCL; Llama-3-8B and Qwen2.5-7B heads
    ligerbench bench --kernel vp_flp --nproc 1,2,4          # the same heads at 1, 2 and 4 ranks
    ligerbench bench --kernel vp_flp --nproc 2 --smoke      # 2 gloo ranks on CPU, NOT a measurement

Each rank holds the hidden states [N, H] (the same on every rank) and its shard [V_local, H] of
the head's weight (vp_ce's `vocab_slice`: the same rows whatever the split, scaled by 1/sqrt(H));
the targets (~10% ignored) and the upstream gradients on logp and entropy (what a policy loss
with an entropy bonus hands backward, as flp's bench draws them) are the same on every rank, at
flp's rollout temperature 0.7. Timing as for vp_ce (every rank times the same call at once, the
slowest counts).

Work model, per rank: FLOPs = 6 * N * H * V_local (the local logits, then dh and dW_shard), the
least any design does (ours recomputes the logits in backward, as flp's kernel does); the
collectives move a few floats per row forward and N * H (dh's all-reduce) backward.

Peers (per rank): verl's `verl_fused_tp` and Liger's `liger_tp` (suites/peers/, CUDA only), and
the bench-only `single_gpu`: our single-GPU flp kernel on a whole head held by this rank, no
collective: what one GPU costs, the line a scaling run's ranks are read against.
"""

from __future__ import annotations

import torch

from ligerbench.bench.ceilings import MATMUL
from ligerbench.bench.spec import BenchInputs, BenchSpec, SweepPoint
from ligerbench.suites.common.bench_peers import verification_setting
from ligerbench.suites.vp_ce.bench import even_shards_peer, tiled_head
from ligerbench.suites.vp_flce.bench import flops, rank_head  # the same sharded head
from ligerbench.suites.vp_flp.axes import case as vp_flp_case

TEMPERATURE = 0.7  # flp's bench: a rollout temperature
HEADS = {"llama3-8b": (4096, 128256), "qwen2.5-7b": (3584, 152064)}  # H % 128 == 0: verl's head runs
SMOKE_HEADS = {"llama3-8b": (16, 96)}
TOKENS = 8192


def make_inputs(case, seed: int, device: torch.device) -> BenchInputs:
    lo, g, hidden, weight = rank_head(case, seed, device)
    ignore_index = -100
    target = torch.randint(0, case.v, (case.n,), generator=g, device=device)
    target = torch.where(torch.rand(case.n, generator=g, device=device) < 0.1, ignore_index, target)  # as flp's
    u_logp = torch.randn(case.n, generator=g, device=device)
    u_ent = 0.5 * torch.randn(case.n, generator=g, device=device)
    options = dict(bias=None, temperature=case.temperature, softcap=None, logit_scale=1.0, ignore_index=ignore_index,
                   group=None, vocab_start=lo)  # fmt: skip
    return BenchInputs(positional=[hidden, weight, target], leaves=[hidden, weight], options=options,
                       objective=lambda out: (out[0] * u_logp).sum() + (out[1] * u_ent).sum())  # fmt: skip


def heads(dtype: str, tokens: int | None, smoke: bool) -> list[SweepPoint]:
    """world is left 0 here: `bench --nproc N` splits every point over N ranks (spec.on_ranks)."""
    n = 8 if smoke else (tokens or TOKENS)
    table = SMOKE_HEADS if smoke else HEADS
    return [
        SweepPoint(
            name, float(i), vp_flp_case(n=n, v=v, h=h, dtype=dtype, temperature=TEMPERATURE, ignore_pattern="random")
        )  # fmt: skip
        for i, (name, (h, v)) in enumerate(table.items())
    ]


def _load_single_gpu():
    from ligerbench.kernels.fused_linear_log_probs import fused_linear_log_probs

    held: dict = {}

    # apart from vp_flce's on purpose: the bench hands a callable only the options it names (bench.spec.call)
    def single_gpu(hidden, weight_shard, target, *, temperature, ignore_index):
        weight = tiled_head(held, weight_shard)
        return fused_linear_log_probs(hidden, weight, target, temperature=temperature, ignore_index=ignore_index)

    return single_gpu


VARIANTS = (
    even_shards_peer(
        "single_gpu",
        "vp_flp",
        "our single-GPU flp kernel on a whole head held by each rank (no collective): what one GPU costs; the "
        "head is this rank's shard tiled, so its log-probs are not the others'",
        _load_single_gpu,
    ),
)

# the kernel's bench, spelled out as data: alike in shape across kernels, its own in every value
SPEC = BenchSpec(
    kernel="vp_flp",
    make_inputs=make_inputs,
    work=flops, rate=MATMUL,
    work_formula="FLOPs per rank = k * N * H * V_local, V_local = ceil(V / ranks); k: full 6, forward 2, backward 4",
    sweeps={"heads": heads},
    excluded={
        "gathered": "the verification yardstick (the whole head in float32 PyTorch on every rank); single_gpu is "
        "the one-GPU line",
        "ours_3_slices": verification_setting("3 slices a shard"),
    },
    inputs="random normal, ~10% of targets ignored, T=0.7, random upstream gradients on logp and entropy",
    distributed=True,
)  # fmt: skip

"""`bench` of `grpo`: one DAPO step's loss and its gradients of hidden and weight (k3 KL, beta 0.04,
T=0.7), fwd+bwd, beside the peers (8 x 1024 tokens at the Llama-3-8B head; the design targets:
docs/performance.md).

FLOP model (matrix products only), as for flp: 6 * B * T * H * V for a full step (forward 2,
backward 4). Ours does that, forming the gradients in forward (kernels/grpo_loss.py, path="eager");
ours_recompute (path="recompute") recomputes the logits in backward, 8 * B * T * H * V, and is
credited with 6, as every provider is. ours_liger_memory is ours at a budget that brings its extra
memory to about Liger's Triton GRPO's.

    ligerbench bench --kernel grpo                   # B=8, T=1024, H=4096, V=128256, bf16
    ligerbench bench --kernel grpo --tokens 4096     # B*T = 4096 (B=4)
"""

from __future__ import annotations

import functools

import torch

from ligerbench.bench.ceilings import MATMUL
from ligerbench.bench.spec import (
    BenchInputs,
    BenchSpec,
    SweepPoint,
    Target,
    design_target,
    device_generator,
    no_slower_at_its_memory,
)
from ligerbench.cases import DTYPES, Case
from ligerbench.registry import Provider
from ligerbench.suites.common.bench_peers import plain_peers, verification_setting, yardsticks_left_out
from ligerbench.suites.grpo.axes import BETA
from ligerbench.suites.grpo.axes import case as grpo_case

TEMPERATURE = 0.7
T = 1024  # tokens per completion
HEAD = (4096, 128256)  # Llama-3-8B
SMOKE = (2, 8, 16, 96)  # b, t, h, v
LOSS = dict(loss_type="dapo", importance_level="token", eps_low=0.2, eps_high=0.28, beta=BETA, kl_estimator="k3",
            temperature=TEMPERATURE)  # fmt: skip


def flops(case: Case, mode: str) -> float:
    return {"full": 6, "forward": 2, "backward": 4}[mode] * case.b * case.t * case.h * case.v


def make_inputs(case: Case, seed: int, device: torch.device) -> BenchInputs:
    """hidden ~ N(0, 1), W ~ N(0, 1/H); completion ids drawn uniformly (the timing does not depend on
    which ids); old = current log-probs + N(0, 0.05) and ref = current + N(0, 0.02), the current
    ones computed once here (no gradient) so the ratios sit near 1 as in a real step; advantages
    N(0, 1); the last quarter of every other completion masked (ragged lengths)."""
    from ligerbench.kernels.fused_linear_log_probs import fused_linear_log_probs

    g = device_generator(case, seed, device)
    b, t, h, v = case.b, case.t, case.h, case.v
    dtype = DTYPES[case.dtype]
    hidden = torch.randn(b, t, h, generator=g, device=device, dtype=dtype).requires_grad_(True)
    weight = (torch.randn(v, h, generator=g, device=device, dtype=dtype) * h**-0.5).requires_grad_(True)
    ids = torch.randint(0, v, (b, t), generator=g, device=device)
    with torch.no_grad():
        logp, _ = fused_linear_log_probs(hidden, weight, ids, temperature=TEMPERATURE)
    old = logp + 0.05 * torch.randn(b, t, generator=g, device=device)
    ref = logp + 0.02 * torch.randn(b, t, generator=g, device=device)
    adv = torch.randn(b, generator=g, device=device)
    mask = torch.ones(b, t, dtype=torch.int64, device=device)
    mask[1::2, (3 * t) // 4 :] = 0
    return BenchInputs(positional=[hidden, weight, ids, old, ref, adv, mask], leaves=[hidden, weight],
                       options=dict(LOSS))  # fmt: skip


def _point(b: int, t: int, h: int, v: int, dtype: str) -> Case:
    return grpo_case(b=b, t=t, h=h, v=v, dtype=dtype, loss_type="dapo", kl="k3", temperature=TEMPERATURE, eps="asym")


def heads(dtype: str, tokens: int | None, smoke: bool) -> list[SweepPoint]:
    if smoke:
        b, t, h, v = SMOKE
        return [SweepPoint("llama3-8b", 0.0, _point(b, t, h, v, dtype))]
    b = max(1, (tokens or 8 * T) // T)
    return [SweepPoint("llama3-8b", 0.0, _point(b, T, *HEAD, dtype))]


def eager_bf16_product(hidden, weight, completion_ids, old_logp, ref_logp, advantages, mask, *, temperature=1.0,
                       **options):  # fmt: skip
    """Plain PyTorch as a trainer writes it: the product in the inputs' dtype, float32 logits,
    log_softmax over [B, T, V], then kernels/grpo_loss.py's policy_loss."""
    from ligerbench.kernels.grpo_loss import policy_loss

    z = torch.log_softmax((hidden @ weight.t()).float() / temperature, dim=-1)
    logp = z.gather(-1, completion_ids[..., None]).squeeze(-1)
    return policy_loss(logp, old_logp, ref_logp, advantages, mask, **options)


# Liger's Triton GRPO took 3136 MiB beyond the inputs at the Llama-3-8B head, N=8192, bf16 (H100,
# docs/peers.md); the gradients alone are 1066 MiB there. A 2004 MiB budget holds the float32
# logits of 4096 tokens there (4 bytes a logit, the gradient in the same storage): 2 row chunks,
# 2 passes of the weight-gradient accumulation (22 at the default), ~3070 MiB extra, under
# Liger's. (1.5 GiB ran 3 chunks of 3136 tokens, 2601 MiB, 42.38 ms on an H100:
# results/runs/bench-grpo-heads-h100-3b12f4e/.)
LIGER_MEMORY_CHUNK_BYTES = 2004 * 2**20


def _ours_liger_memory():
    from ligerbench.kernels.grpo_loss import grpo_loss

    return functools.partial(grpo_loss, chunk_bytes=LIGER_MEMORY_CHUNK_BYTES)


PLAIN = plain_peers(
    "grpo", eager_bf16_product, "PyTorch: bf16 product, float32 logits, log_softmax, the same loss (plain PyTorch)"
)

VARIANTS = (
    *PLAIN,
    Provider(name="ours_liger_memory", kernel="grpo", bench_only=True, load=_ours_liger_memory,
             settings={"chunk_mib": LIGER_MEMORY_CHUNK_BYTES // 2**20},
             description="ours with chunk_bytes = 2004 MiB: two chunks at the Llama-3-8B head, extra memory just under "
             "Liger's Triton GRPO's"),
)  # fmt: skip

EXCLUDED = {
    **yardsticks_left_out(PLAIN, "fp32 operands, no tensor cores"),
    "ours_small_chunks": verification_setting("a quarter of the tokens a chunk"),
}

SOURCE = design_target("grpo")
# the kernel's bench, spelled out as data: alike in shape across kernels, its own in every value
SPEC = BenchSpec(
    kernel="grpo",
    make_inputs=make_inputs,
    work=flops, rate=MATMUL,
    work_formula="FLOPs = k * B * T * H * V; k: full 6 (2 forward + 4 backward), forward 2, backward 4",
    inputs="one DAPO step (k3 KL, beta 0.04, clip 0.2/0.28): old and reference log-probs near the current "
    "ones, advantages N(0, 1), every other completion a quarter shorter",
    sweeps={"heads": heads},
    excluded=EXCLUDED,
    targets=(
        Target(("ours",), metric="time_ms", peers=("eager_bf16_product",), factor=1.0,
               source=f"{SOURCE}: time <= PyTorch eager's in the same run"),
        Target(("ours",), metric="extra_mib", peers=("eager_bf16_product",), factor=0.25,
               source=f"{SOURCE}: extra memory <= 1/4 of PyTorch eager's in the same run"),
        # At the memory Liger's Triton GRPO uses or less, no slower than it (ours at a
        # budget that brings its extra memory to about Liger's: both figures judged)
        *no_slower_at_its_memory(
            "ours_liger_memory", "liger_triton",
            time_source=f"{SOURCE}: at Liger's Triton GRPO's memory or less, no slower than it",
            memory_source=f"{SOURCE}: ours_liger_memory's extra memory <= Liger's Triton GRPO's"),
    ),
)  # fmt: skip

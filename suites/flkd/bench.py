"""`bench` of `flkd`: distillation from both lm_heads, fwd+bwd (the student's hidden and weight
gradients), beside the peers.

FLOP model (matrix products only): forward 2*N*V*(Hs + Ht) (both heads' logits), backward
4*N*Hs*V (grad of the student's hidden and weight): the least any design does, and what ours
does for a scalar loss (the gradients formed in forward). ours_recompute forms them in backward,
recomputing both heads' logits: 2*N*V*(Hs + Ht) more; it is credited with the least, as every
provider is. ours_large_groups is ours at 376 rows a product and a group: the time the memory
target costs (kernels/fused_linear_distill.py: at 128 rows a float32 logits product reads the
whole weight for 2 * 128 FLOPs a byte, under an H100/H200's balance of ~180-300).

    ligerbench bench --kernel flkd                   # N=8192, Qwen2.5-7B-sized heads (teacher = student size), bf16
"""

from __future__ import annotations

import functools

import torch

from ligerbench.bench.ceilings import MATMUL
from ligerbench.bench.spec import BenchInputs, BenchSpec, SweepPoint, Target, design_target, device_generator
from ligerbench.cases import DTYPES, Case
from ligerbench.registry import Provider
from ligerbench.suites.common.bench_peers import plain_peers, verification_setting, yardsticks_left_out
from ligerbench.suites.flce.bench import gradient_mib  # the student's head: its weight's and hidden states' gradients
from ligerbench.suites.flkd.axes import case as flkd_case

HEADS = {"qwen2.5-7b": (3584, 152064), "llama3-8b": (4096, 128256)}
SMOKE_HEADS = {"qwen2.5-7b": (16, 96)}


def flops(case: Case, mode: str) -> float:
    ht = case.h  # the bench's teacher is the student's size
    fwd = 2 * case.n * case.v * (case.h + ht)
    return {"full": fwd + 4 * case.n * case.h * case.v, "forward": fwd, "backward": 4 * case.n * case.h * case.v}[mode]


def make_inputs(case: Case, seed: int, device: torch.device) -> BenchInputs:
    """Both heads N(0, 1/H) on hidden N(0, 1) (logits of std ~1), the teacher the student's size,
    ~10% of labels ignored, reduction mean."""
    g = device_generator(case, seed, device)
    dtype = DTYPES[case.dtype]

    def randn(*shape, scale=1.0):
        return torch.randn(*shape, generator=g, device=device, dtype=dtype) * scale

    hs = randn(case.n, case.h).requires_grad_(True)
    ws = randn(case.v, case.h, scale=case.h**-0.5).requires_grad_(True)
    ht, wt = randn(case.n, case.h), randn(case.v, case.h, scale=case.h**-0.5)
    labels = torch.randint(0, case.v, (case.n,), generator=g, device=device)
    labels = torch.where(torch.rand(case.n, generator=g, device=device) < 0.1, -100, labels)
    options = dict(labels=labels, divergence=case.divergence, beta=case.beta, temperature=case.temperature,
                   ignore_index=-100, reduction="mean")  # fmt: skip
    return BenchInputs(positional=[hs, ws, ht, wt], leaves=[hs, ws], options=options)


def heads(dtype: str, tokens: int | None, smoke: bool) -> list[SweepPoint]:
    n = 8 if smoke else (tokens or 8192)
    table = SMOKE_HEADS if smoke else HEADS
    return [SweepPoint(k, float(i), flkd_case(n=n, v=v, h=h, dtype=dtype, divergence="jsd"))
            for i, (k, (h, v)) in enumerate(table.items())]  # fmt: skip


def eager_bf16_product(student_hidden, student_weight, teacher_hidden, teacher_weight, labels=None, **options):
    """What trainers write: each head's product in the inputs' dtype, then float32 logits."""
    from ligerbench.suites.families import distill as semantics

    xs = (student_hidden @ student_weight.t()).float()
    xt = (teacher_hidden @ teacher_weight.t()).float()
    return semantics.reference(xs, xt, labels, textbook=True, **options)


# The most rows whose buffers (two float32 logits and a 16-bit gradient row: 10 bytes a logit) fit
# half Liger's fused JSD's memory at Llama-3-8B, beside the gradients (1066 MiB): 376 (1526 MiB;
# Liger's half 1531.5 on an H200). At 384 rows (results/runs/bench-flkd-heads-rows-h200): 72.86 ms
# at 1653 MiB at Qwen2.5-7B (Liger 76.85 at 3467), 70.05 at 1536 at Llama-3-8B, 4.7 MiB over; 352
# rows fit but ran 79.56 at Qwen, 320 rows 78.98. At 376 (results/runs/bench-flkd-heads-large-groups-h200-8532c28):
# 73.01 ms at 1641 MiB at Qwen (Liger 75.62 at 3467), 69.54 at 1526 at Llama (Liger 88.89 at 3063).
LARGE_GROUP_ROWS = 376


def _ours_large_groups():
    from ligerbench.kernels.fused_linear_distill import fused_linear_distill

    return functools.partial(fused_linear_distill, chunk_rows=LARGE_GROUP_ROWS)


PLAIN = plain_peers(
    "flkd", eager_bf16_product, "PyTorch: the products in the inputs' dtype, then float32 logits (TRL GKD's path)"
)

VARIANTS = (
    *PLAIN,
    Provider(name="ours_large_groups", kernel="flkd", bench_only=True, load=_ours_large_groups,
             settings={"chunk_rows": LARGE_GROUP_ROWS},
             description="ours with 376-row products and groups: past the memory target, about half Liger's fused "
             "JSD's memory, each product no longer bound by reading the weight"),
)  # fmt: skip

EXCLUDED = {
    **yardsticks_left_out(PLAIN, "float32 operands", "float32 operands"),
    "textbook": "float32 operands, as eager",
    "ours_small_chunks": verification_setting("16 KiB pieces"),
}

SOURCE = design_target("flkd")
# the kernel's bench, spelled out as data: alike in shape across kernels, its own in every value
SPEC = BenchSpec(
    kernel="flkd",
    make_inputs=make_inputs,
    work=flops, rate=MATMUL,
    work_formula="FLOPs: forward 2*N*V*(Hs + Ht), backward 4*N*Hs*V "
    "(ours_recompute recomputes both heads: 2*N*V*(Hs + Ht) more)",
    inputs="hidden N(0, 1), both heads N(0, 1/H) (logits of std ~1), teacher the student's size, ~10% of labels "
    "ignored, reduction mean",
    sweeps={"heads": heads},
    excluded=EXCLUDED,
    targets=(
        Target(("ours",), metric="time_ms", peers=("liger_fused_linear_jsd", "trl_chunked_divergence",
                                                   "compile_bf16_product"), factor=1.0,
               source=f"{SOURCE}: no slower than the best peer"),
        Target(("ours",), metric="extra_mib", limit=lambda case: 1.25 * gradient_mib(case),
               source=f"{SOURCE}: extra memory <= the student's gradients (hidden and weight) + 25%"),
        # a setting of ours at half Liger's memory or less, and no slower than it
        Target(("ours_large_groups",), metric="time_ms", peers=("liger_fused_linear_jsd",), factor=1.0,
               source=f"{SOURCE}: ours_large_groups no slower than Liger's fused JSD"),
        Target(("ours_large_groups",), metric="extra_mib", peers=("liger_fused_linear_jsd",), factor=0.5,
               source=f"{SOURCE}: ours_large_groups at half Liger's fused JSD's extra memory or less"),
    ),
)  # fmt: skip

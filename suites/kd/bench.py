"""`bench` of `kd`: the distillation divergence from both models' logits, fwd+bwd (the student's
gradient), beside the peers.

Bytes model (the fewest bytes a design moves through HBM): read both logits once and write the
student's gradient once: 3 * N * V * e (e: bytes per element). Ours reads both twice in forward
(the terms need both normalisers) and once more in backward: 6 * N * V * e; it is credited with 3,
as every provider is.

    ligerbench bench --kernel kd                     # N = 2048..8192 at V=152064, bf16, JSD beta 0.5
"""

from __future__ import annotations

import torch

from ligerbench.bench.ceilings import COPY
from ligerbench.bench.spec import (
    BenchInputs,
    BenchSpec,
    SweepPoint,
    Target,
    design_target,
    device_generator,
    element_bytes,
)
from ligerbench.cases import DTYPES, Case
from ligerbench.suites.common.bench_peers import plain_peers, yardsticks_left_out
from ligerbench.suites.families import distill as semantics
from ligerbench.suites.kd.axes import case as kd_case

PASSES = {"full": 3, "forward": 2, "backward": 3}
VOCAB = 152064  # Qwen2.5-7B's lm_head
TOKENS = (2048, 4096, 8192)


def bytes_moved(case: Case, mode: str) -> float:
    return PASSES[mode] * case.n * case.v * element_bytes(case)


def make_inputs(case: Case, seed: int, device: torch.device) -> BenchInputs:
    """Student and teacher logits N(0, 1) in the case dtype, ~10% of labels ignored."""
    g = device_generator(case, seed, device)
    dtype = DTYPES[case.dtype]
    student = torch.randn(case.n, case.v, generator=g, device=device, dtype=dtype).requires_grad_(True)
    teacher = torch.randn(case.n, case.v, generator=g, device=device, dtype=dtype)
    labels = torch.randint(0, case.v, (case.n,), generator=g, device=device)
    labels = torch.where(torch.rand(case.n, generator=g, device=device) < 0.1, -100, labels)
    options = dict(labels=labels, teacher_ids=None, divergence=case.divergence, beta=case.beta,
                   temperature=case.temperature, ignore_index=-100, reduction="mean", teacher_grad=False)  # fmt: skip
    return BenchInputs(positional=[student, teacher], leaves=[student], options=options)


def tokens_sweep(dtype: str, tokens: int | None, smoke: bool) -> list[SweepPoint]:
    v = 96 if smoke else VOCAB
    ns = (8, 16) if smoke else tuple(t for t in TOKENS if t <= (tokens or TOKENS[-1]))
    return [SweepPoint(str(n), float(n), kd_case(n=n, v=v, dtype=dtype, divergence="jsd")) for n in ns]


def divergences_sweep(dtype: str, tokens: int | None, smoke: bool) -> list[SweepPoint]:
    n, v = (8, 96) if smoke else (tokens or 8192, VOCAB)
    points = (("forward_kl", 0.5), ("reverse_kl", 0.5), ("jsd", 0.5), ("tvd", 0.5))
    return [SweepPoint(d, float(i), kd_case(n=n, v=v, dtype=dtype, divergence=d, beta=b))
            for i, (d, b) in enumerate(points)]  # fmt: skip


def eager_plain(student, teacher, labels=None, **options):
    """What trainers write (TRL's generalized_jsd_loss): float32 logits, log_softmax, F.kl_div."""
    return semantics.reference(student.float(), teacher.float(), labels, textbook=True, **options)


VARIANTS = plain_peers("kd", eager_plain, "PyTorch as trainers write it: float32 logits, log_softmax, F.kl_div")

EXCLUDED = {
    **yardsticks_left_out(VARIANTS, "the careful log1p form", "dynamic shapes"),
    "textbook": "the same formula as eager_plain",
}

SOURCE = design_target("kd")
# the kernel's bench, spelled out as data: alike in shape across kernels, its own in every value
SPEC = BenchSpec(
    kernel="kd",
    make_inputs=make_inputs,
    work=bytes_moved, rate=COPY,
    work_formula="bytes = k * N * V * e; k: full 3 (read both logits, write the gradient), forward 2, backward 3",
    inputs="student and teacher logits N(0, 1), ~10% of labels ignored, reduction mean",
    sweeps={"tokens": tokens_sweep, "divergences": divergences_sweep},
    excluded=EXCLUDED,
    targets=(
        Target(("ours",), metric="time_ms", peers=("liger", "compile_plain"), factor=1.0,
               source=f"{SOURCE}: no slower than the best peer"),
    ),
)  # fmt: skip

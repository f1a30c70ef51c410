"""`bench` of `lp`: log-probs and entropy from logits, fwd+bwd with random upstream gradients on
both outputs, beside the peers.

Bytes model (the fewest bytes a design with unknown upstreams moves through HBM): forward reads
the logits once, backward reads them again and writes their gradient: 3 * N * V * e (e: bytes per
element) for a full step, N * V * e forward, 2 * N * V * e backward. The rate is a share of the
copy ceiling measured in the same run (the design target: within 1.2x of that floor;
docs/performance.md).

    ligerbench bench --kernel lp                     # N = 2048..8192 at V=151936, bf16, T=0.7
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
from ligerbench.suites.lp.axes import case as lp_case

PASSES = {"full": 3, "forward": 1, "backward": 2}
TEMPERATURE = 0.7
VOCAB = 151936  # Qwen2.5
TOKENS = (2048, 4096, 8192)


def bytes_moved(case: Case, mode: str) -> float:
    return PASSES[mode] * case.n * case.v * element_bytes(case)


def make_inputs(case: Case, seed: int, device: torch.device) -> BenchInputs:
    """Random normal logits (std 1), 10% of targets ignored, random upstreams on both outputs."""
    g = device_generator(case, seed, device)
    logits = torch.randn(case.n, case.v, generator=g, device=device, dtype=DTYPES[case.dtype]).requires_grad_(True)
    target = torch.randint(0, case.v, (case.n,), generator=g, device=device)
    target = torch.where(torch.rand(case.n, generator=g, device=device) < 0.1, -100, target)
    u_logp = torch.randn(case.n, generator=g, device=device)
    u_ent = 0.5 * torch.randn(case.n, generator=g, device=device)
    options = dict(temperature=case.temperature, softcap=None, logit_scale=1.0, ignore_index=-100)
    return BenchInputs(positional=[logits, target], leaves=[logits], options=options,
                       objective=lambda out: (out[0] * u_logp).sum() + (out[1] * u_ent).sum())  # fmt: skip


def tokens_sweep(dtype: str, tokens: int | None, smoke: bool) -> list[SweepPoint]:
    v = 96 if smoke else VOCAB
    ns = (8, 16) if smoke else tuple(t for t in TOKENS if t <= (tokens or TOKENS[-1]))
    return [SweepPoint(str(n), float(n), lp_case(n=n, v=v, dtype=dtype, temperature=TEMPERATURE)) for n in ns]


def eager_plain(logits, target, *, temperature=1.0, softcap=None, logit_scale=1.0, ignore_index=-100):
    """What trainers write (TRL's selective log-softmax with an entropy): float32 logits over the
    temperature, torch.log_softmax, gather, -(p * logp).sum(). The softcap and scale as the
    semantics has them; verify's `eager` is the careful form (log1p for confident rows)."""
    z = logit_scale * logits.float()
    if softcap:
        z = softcap * torch.tanh(z / softcap)
    logp_all = torch.log_softmax(z / temperature, dim=-1)
    counted = target != ignore_index
    logp = logp_all.gather(-1, torch.where(counted, target, 0)[..., None]).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return torch.where(counted, logp, 0.0), torch.where(counted, entropy, 0.0)


VARIANTS = plain_peers("lp", eager_plain, "PyTorch as trainers write it: float32 logits, log_softmax, gather, entropy")

EXCLUDED = yardsticks_left_out(VARIANTS, "the careful log1p form, ~10 passes", "dynamic shapes")

SOURCE = design_target("lp")
# the kernel's bench, spelled out as data: alike in shape across kernels, its own in every value
SPEC = BenchSpec(
    kernel="lp",
    make_inputs=make_inputs,
    work=bytes_moved, rate=COPY,
    work_formula="bytes = k * N * V * e; k: full 3 (read, read again, write the gradient), forward 1, backward 2",
    inputs="logits N(0, 1), ~10% of targets ignored, random upstream gradients on logp and entropy",
    sweeps={"tokens": tokens_sweep},
    excluded=EXCLUDED,
    targets=(
        Target(("ours",), metric="time_ms", peers=("eager_plain", "compile_plain", "trl_triton", "trl", "verl"),
               factor=1.0, source=f"{SOURCE}: ahead of every peer, TRL's and verl's kernels among them"),
        Target(("ours",), metric="time_ms", of_floor=1.15,
               source=f"{SOURCE}: within 1.15x its copy floor (3 passes over the logits)"),
    ),
)  # fmt: skip

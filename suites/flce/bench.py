"""`bench` of the fused linear + cross entropy kernel `flce`: inputs and FLOP model.

FLOP model (matrix products only; the softmax is O(N*V), under 0.1% of it):
    forward  logits = h @ W.T                        2 * N * H * V
    backward grad_h = g @ W and grad_W = g.T @ h     4 * N * H * V
    full                                             6 * N * H * V
A design that recomputes the logits in backward does 8*N*H*V but is credited with 6: the
rate says how close a provider comes to the least work, not how busy it kept the GPU.

Providers are those registered for kernel "flce" (suites/flce/providers.py); each takes
(hidden, weight, target, *, bias, ignore_index, reduction, ...).
"""

from __future__ import annotations

import functools

import torch

from ligerbench.bench.ceilings import MATMUL
from ligerbench.bench.spec import (
    BenchInputs,
    BenchSpec,
    Target,
    design_target,
    device_generator,
    drawn_targets,
    element_bytes,
    ignored_rows,
    no_slower_at_its_memory,
)
from ligerbench.cases import DTYPES, Case
from ligerbench.registry import Provider
from ligerbench.suites.ce.bench import plain_options
from ligerbench.suites.common import bench_shapes
from ligerbench.suites.common.bench_peers import verification_setting
from ligerbench.suites.flce.axes import case as flce_case

MATMULS = {"full": 6, "forward": 2, "backward": 4}  # FLOPs per N*H*V for each mode


def flops(case: Case, mode: str) -> float:
    return MATMULS[mode] * case.n * case.h * case.v


def gradient_mib(case: Case) -> float:
    """The memory floor: the gradients of the weight [V, H] and of the hidden states [N, H]."""
    return (case.v + case.n) * case.h * element_bytes(case) / 2**20


def make_inputs(case: Case, seed: int, device: torch.device) -> BenchInputs:
    """hidden ~ N(0, 1) and W ~ N(0, 1/H), so logits have std ~1 as in the ce bench; ~10% of
    targets ignored."""
    g = device_generator(case, seed, device)
    dtype = DTYPES[case.dtype]
    ignore_index, ignored = ignored_rows(case, seed, device)
    hidden = torch.randn(case.n, case.h, generator=g, device=device, dtype=dtype)
    weight = torch.randn(case.v, case.h, generator=g, device=device, dtype=dtype) * case.h**-0.5
    target = drawn_targets(case, g, ignore_index, ignored)
    hidden.requires_grad_(True)
    weight.requires_grad_(True)
    options = plain_options(ignore_index, case.reduction, bias=None, class_weight=None)
    return BenchInputs(positional=[hidden, weight, target], leaves=[hidden, weight], options=options)


def _load_cce_filtered():
    from cut_cross_entropy import linear_cross_entropy

    def call(hidden, weight, target, *, ignore_index, reduction, softcap, **_):
        # CCE's default filter_eps="high" skips gradient entries below bf16 resolution: its speed
        # trick, timed beside the exact-gradient provider (flce_cce) so neither hides the other
        return linear_cross_entropy(
            hidden, weight, target, ignore_index=ignore_index, softcap=softcap, reduction=reduction, impl="cce"
        )

    return call


def _load_ours_at(budget_mib: int):
    from ligerbench.kernels.fused_linear_cross_entropy import fused_linear_cross_entropy

    return functools.partial(fused_linear_cross_entropy, chunk_bytes=budget_mib * 2**20)


# Ours at a peer's memory: a budget (chunk_bytes, the working memory beyond the gradients) that
# brings our extra memory to about what the peer holds beyond the same gradients, from the call's
# shapes. torch.compile holds the [N, V] logits in the inputs' dtype; QuACK's chunked kernel
# (either chunk) a float32 [V, H] weight-gradient accumulator, and at its default chunk that chunk's
# logits too: the H200 bench of 2026-11-28 measured its extra memory at chunk 1024 as the two
# gradients + 4*V*H bytes to the MiB at all four heads. Per-row buffers come on top of a budget:
# PEER_MEMORY_MARGIN (a sixteenth of the peer's bytes at small shapes) keeps ours at or under the peer.
PEER_MEMORY_MARGIN = 64 * 2**20


def under_margin(peer_bytes: int) -> int:
    return peer_bytes - min(PEER_MEMORY_MARGIN, peer_bytes // 16)


def compile_memory_bytes(hidden: torch.Tensor, weight: torch.Tensor) -> int:
    return under_margin(hidden.shape[0] * weight.shape[0] * hidden.element_size())


def quack_memory_bytes(hidden: torch.Tensor, weight: torch.Tensor) -> int:
    return under_margin(4 * weight.shape[0] * weight.shape[1])


def _load_ours_at_peer_memory(budget):
    from ligerbench.kernels.fused_linear_cross_entropy import fused_linear_cross_entropy

    def call(hidden, weight, target, **options):
        return fused_linear_cross_entropy(hidden, weight, target, chunk_bytes=budget(hidden, weight), **options)

    return call


# `--sweep budget`: ours over memory budgets (the working memory beyond the gradients the fused
# kernel may use: the logits chunk, and the fp32 accumulator when "auto" picks it), timed beside
# every peer at the heads of BUDGET_HEADS, so time against extra memory can be read as a Pareto
# picture (bench/pareto.py) and a user picks the point that fits their GPU.
BUDGETS_MIB = (64, 128, 256, 512, 1024, 2048)
BUDGET_HEADS = ("llama3-8b", "gemma2-2b")
BUDGET_PROVIDERS = tuple(f"ours_budget_{b}" for b in BUDGETS_MIB)

VARIANTS = (
    Provider(
        name="ours_compile_memory",
        kernel="flce",
        bench_only=True,
        load=functools.partial(_load_ours_at_peer_memory, compile_memory_bytes),
        description="ours with chunk_bytes = the [N, V] logits in the inputs' dtype (what torch.compile holds) "
        "less 64 MiB",
    ),
    Provider(
        name="ours_quack_memory",
        kernel="flce",
        bench_only=True,
        load=functools.partial(_load_ours_at_peer_memory, quack_memory_bytes),
        description="ours with chunk_bytes = a float32 [V, H] (QuACK's weight-gradient accumulator) less 64 MiB",
    ),
    *(
        Provider(
            name=f"ours_budget_{b}",
            kernel="flce",
            description=f"ours with chunk_bytes = {b} MiB (the budget sweep)",
            bench_only=True,
            settings={"chunk_mib": b},
            load=functools.partial(_load_ours_at, b),
        )
        for b in BUDGETS_MIB
    ),
    Provider(
        name="cce_filtered",
        kernel="flce",
        description="Cut Cross-Entropy with its default gradient filtering (filter_eps='high')",
        bench_only=True,
        load=_load_cce_filtered,
        devices=("cuda",),
    ),
)

# 5-token chunks exist to make verification hit partial and fully ignored chunks; at N=8192
# that is ~1,640 chunks per step, a setting no one would train with.
EXCLUDED = {"ours_small_chunks": verification_setting("5-token chunks")}

SOURCE = design_target("flce")
# every peer a user could pick instead, whatever memory it takes (CCE's filtered gradient too)
FASTEST_PEERS = ("torch_compile", "eager", "liger", "cce", "cce_filtered", "torch_native", "quack", "quack_chunk_1024")
# the kernel's bench, spelled out as data: alike in shape across kernels, its own in every value
SPEC = BenchSpec(
    kernel="flce",
    make_inputs=make_inputs,
    work=flops,
    work_formula="FLOPs = k * N * H * V; k: full 6 (2 forward + 4 backward), forward 2, backward 4",
    rate=MATMUL,
    sweeps={
        **bench_shapes.sweeps(flce_case, fused=True, first="heads"),
        "budget": functools.partial(bench_shapes.heads_points, flce_case, BUDGET_HEADS),
    },
    sweep_only={"budget": BUDGET_PROVIDERS},
    excluded=EXCLUDED,
    targets=(
        Target(
            ("ours",),
            metric="time_ms",
            peers=("torch_compile",),
            source=f"{SOURCE}: no slower than torch.compile at every head",
        ),
        Target(
            ("ours",),
            metric="time_ms",
            peers=FASTEST_PEERS,
            factor=1.05,
            source=f"{SOURCE}: within 1.05x the fastest peer at any memory, every head",
        ),
        Target(
            ("ours",),
            metric="extra_mib",
            limit=lambda case: 1.2 * gradient_mib(case),
            source=f"{SOURCE}: extra memory <= the two gradients + 20%",
        ),
        # at a peer's memory or less, no slower than it: ours at a budget that brings its extra
        # memory to about the peer's, both figures judged in the same run
        *no_slower_at_its_memory(
            "ours_compile_memory",
            "torch_compile",
            time_source=f"{SOURCE}: at torch.compile's memory or less, no slower than torch.compile",
            memory_source=f"{SOURCE}: ours_compile_memory's extra memory <= torch.compile's",
        ),
        *no_slower_at_its_memory(
            "ours_quack_memory",
            "quack_chunk_1024",
            time_source=f"{SOURCE}: at QuACK's memory or less, no slower than QuACK (its leaner chunk, 1024)",
            memory_source=f"{SOURCE}: ours_quack_memory's extra memory <= QuACK's at chunk 1024",
        ),
        Target(
            ("ours_quack_memory",),
            metric="time_ms",
            peers=("quack",),
            factor=1.0,
            source=f"{SOURCE}: at QuACK's memory or less, no slower than QuACK (its default chunk, which holds "
            "more memory than chunk 1024)",
        ),
    ),
)

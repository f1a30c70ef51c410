"""`bench` of the `ce` kernel: inputs, work model, sweeps, design targets and bench-only providers.

Bytes model (the fewest bytes any implementation must move through HBM, per step):
    full     = read the logits once + write their gradient once = 2 * N * V * e   (e: bytes per
               element; bf16: 2 * 2 * N * V). A fused single pass does exactly this.
    forward  = read the logits once  = N * V * e
    backward = write the gradient once = N * V * e
Targets (8 bytes per token) and the loss are under 0.01% of that and are left out.
"""

from __future__ import annotations

import functools

import torch

from ligerbench.bench.ceilings import COPY
from ligerbench.bench.spec import (
    BenchInputs,
    BenchSpec,
    Target,
    at_shape,
    design_target,
    device_generator,
    drawn_targets,
    element_bytes,
    ignored_rows,
)
from ligerbench.cases import DTYPES, Case
from ligerbench.registry import Provider
from ligerbench.suites.ce.axes import case as ce_case
from ligerbench.suites.common import bench_shapes

PASSES = {"full": 2, "forward": 1, "backward": 1}  # passes over N*V elements each mode must make


def bytes_moved(case: Case, mode: str) -> float:
    return PASSES[mode] * case.n * case.v * element_bytes(case)


def plain_options(ignore_index: int, reduction: str, **inputs) -> dict:
    """The options of a cross entropy bench call (ce and its fused, vocab-parallel kin): the
    provider's own `inputs` (its class weights, bias, group: None or as given), then no smoothing,
    softcap, z-loss or token weights: the plain loss every peer computes."""
    return dict(**inputs, ignore_index=ignore_index, reduction=reduction, label_smoothing=0.0, softcap=None,
                z_loss_scale=0.0, token_weight=None)  # fmt: skip


def make_inputs(case: Case, seed: int, device: torch.device) -> BenchInputs:
    """Random normal logits (std 1) in the case dtype and ~10% of targets ignored, as in
    docs/performance.md. Never zeros: they can run faster than real data and hide unwritten outputs."""
    g = device_generator(case, seed, device)
    ignore_index, ignored = ignored_rows(case, seed, device)
    logits = torch.randn(case.n, case.v, generator=g, device=device, dtype=DTYPES[case.dtype])
    target = drawn_targets(case, g, ignore_index, ignored)
    logits.requires_grad_(True)
    options = plain_options(ignore_index, case.reduction, weight=None)
    return BenchInputs(positional=[logits, target], leaves=[logits], options=options)


def _ours(**settings):
    from ligerbench.kernels.cross_entropy import cross_entropy

    return functools.partial(cross_entropy, return_z_loss=True, **settings)


def _eager_fp32():
    import torch.nn.functional as F

    def ce_upcast(logits, target, *, weight, ignore_index, reduction, label_smoothing, **_):
        # what Hugging Face transformers' loss does: upcast the logits, then F.cross_entropy
        return F.cross_entropy(
            logits.float(),
            target,
            weight=weight,
            ignore_index=ignore_index,
            reduction=reduction,
            label_smoothing=label_smoothing,
        )

    return ce_upcast


# Our default checks the targets' range on the device (a small kernel and an asynchronous
# assertion, no host sync); the variants time the kernel without any check and with the old
# host check (a sync), as separate rows, so no figure hides another.
VARIANTS = (
    Provider(
        name="ours_nocheck",
        kernel="ce",
        description="ours with check_targets=False (no range check at all)",
        bench_only=True,
        load=lambda: _ours(check_targets=False),
    ),
    Provider(
        name="ours_inplace_nocheck",
        kernel="ce",
        description="ours with inplace_backward=True and check_targets=False",
        bench_only=True,
        load=lambda: _ours(inplace_backward=True, check_targets=False),
        mutates_input=True,
    ),
    Provider(
        name="ours_hostcheck",
        kernel="ce",
        description="ours with check_targets='host' (the range check with a host sync, the old default)",
        bench_only=True,
        load=lambda: _ours(check_targets="host"),
    ),
    Provider(
        name="eager_fp32",
        kernel="ce",
        description="F.cross_entropy(logits.float()): what transformers runs",
        bench_only=True,
        load=_eager_fp32,
    ),
)

# the peers "ours" must not be slower than (Liger's input clone is timed apart, not added)
PEERS = ("eager", "eager_fp32", "torch_compile", "liger", "quack")

SOURCE = design_target("ce")
# the kernel's bench, spelled out as data: alike in shape across kernels, its own in every value
SPEC = BenchSpec(
    kernel="ce",
    make_inputs=make_inputs,
    work=bytes_moved, rate=COPY,
    work_formula="bytes = passes * N * V * bytes_per_element; passes: full 2 (read logits, write grad), "
    "forward 1, backward 1",
    sweeps=bench_shapes.sweeps(ce_case, fused=False, first="vocab"),
    targets=(
        Target(
            ("ours", "ours_nocheck", "ours_inplace", "ours_inplace_nocheck"),
            metric="time_ms",
            applies=at_shape(8192, 128256),
            limit=1.6,
            source=f"{SOURCE}: CE at N=8192, V=128256, fwd+bwd <= 1.6 ms",
        ),
        Target(
            ("ours",),
            metric="time_ms",
            applies=at_shape(8192, 128256),
            of_floor=1.45,
            source=f"{SOURCE}: CE at N=8192, V=128256 within 1.45x its copy floor (read logits, write grad)",
        ),
        Target(
            ("ours",),
            metric="time_ms",
            peers=PEERS,
            source=f"{SOURCE}: the default call no slower than the best peer, every point",
        ),
    ),
)  # fmt: skip

"""The two ceilings of the GPU a run is on, measured at the start of that run (docs/performance.md,
measuring: datasheet rates are leads; measure them where you time).

    copy_gbps     = 2 * bytes / time of dst.copy_(src)   (bytes read + bytes written)
    matmul_tflops = 2 * M * N * K / time of a bf16 matmul, M = N = K = 8192 on a GPU

On CPU (--smoke) the sizes are tiny and the numbers are not a measurement; they exist so the
derived columns are exercised.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ligerbench.bench.timing import SMOKE_BUDGET, TimingBudget, time_region


@dataclass(frozen=True)
class Rate:
    """How a kernel's work per ms reads as a rate (BenchSpec.rate), and which ceiling measured here
    that rate is a share of: the bench's `% ceiling` column, and the floor of a target's `of_floor`."""

    unit: str
    scale: float  # work per ms / scale = unit
    ceiling: str  # the key of measure()'s result it is a share of


# bandwidth-bound kernels (work in bytes): bytes per ms / 1e6 = GB/s, against the copy ceiling
COPY = Rate(unit="GB/s", scale=1e6, ceiling="copy_gbps")
# matmul-bound kernels (work in FLOPs): FLOPs per ms / 1e9 = TFLOP/s, against the bf16 matmul ceiling
MATMUL = Rate(unit="TFLOP/s", scale=1e9, ceiling="matmul_tflops")
RATES = (COPY, MATMUL)  # one a ceiling measure() returns

GPU_COPY_BYTES = 2 * 1024**3  # 2 GiB: 40x an H100's L2, the size of the larger bench inputs
GPU_MATMUL = 8192
CPU_COPY_BYTES = 4 * 1024**2
CPU_MATMUL = 128


def measure(device: torch.device, budget: TimingBudget | None = None) -> dict[str, float]:
    on_gpu = device.type == "cuda"
    budget = budget or (TimingBudget() if on_gpu else SMOKE_BUDGET)
    size = GPU_COPY_BYTES if on_gpu else CPU_COPY_BYTES
    g = torch.Generator(device=device).manual_seed(0)
    src = torch.randn(size // 2, generator=g, device=device, dtype=torch.bfloat16)  # random, never zeros
    dst = torch.empty_like(src)
    copy = time_region(lambda: dst.copy_(src), device=device, budget=budget)
    m = GPU_MATMUL if on_gpu else CPU_MATMUL
    a = torch.randn(m, m, generator=g, device=device, dtype=torch.bfloat16)
    b = torch.randn(m, m, generator=g, device=device, dtype=torch.bfloat16)
    mm = time_region(lambda: a @ b, device=device, budget=budget)
    return {
        COPY.ceiling: 2 * size / (copy.median_ms * 1e-3) / 1e9,
        MATMUL.ceiling: 2 * m**3 / (mm.median_ms * 1e-3) / 1e12,
    }

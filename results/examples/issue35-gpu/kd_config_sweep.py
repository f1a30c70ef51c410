# ruff: noqa: B023 -- each closure is timed within its own iteration
"""The distillation kernels' launch config on a GPU (kernels/distill.py: one program per row,
BLOCK_V columns a step over num_warps warps; ce's config by default): forward and backward timed
apart, JSD, at flkd's sub-chunk (128 rows of float32 logits, V=152064: the shape the fused op
hands them at a Qwen2.5-7B head) and at kd's bench shape (2048 rows of bf16 logits).
Timed as `ligerbench bench` times (ligerbench/bench/timing.py: L2 flushed, median; the figures in
kernels/distill.py came from a plain CUDA-event median).

    PYTHONPATH=$PWD python3 results/examples/issue35-gpu/kd_config_sweep.py
"""

import torch
import triton

from ligerbench.bench.timing import time_region
from ligerbench.kernels import distill

V = 152064
CONFIGS = [None, (4096, 8), (2048, 8), (2048, 4), (1024, 4), (8192, 16), (1024, 2)]


def timed(fn):
    return time_region(fn, device=torch.device("cuda")).median_ms


def main():
    real = distill._launch_config
    print(torch.cuda.get_device_name(), "V", V, "JSD beta 0.5")
    for n, dtype in ((128, torch.float32), (2048, torch.bfloat16)):
        g = torch.Generator(device="cuda").manual_seed(0)
        xs = torch.randn(n, V, device="cuda", generator=g).to(dtype)
        xt = torch.randn(n, V, device="cuda", generator=g).to(dtype)
        labels = torch.randint(0, V, (n,), device="cuda", generator=g)
        opts = dict(divergence="jsd", beta=0.5, temperature=1.0, ignore_index=-100)
        scale = torch.full((n,), 1.0 / n, device="cuda")
        grad = torch.empty(n, V, device="cuda", dtype=torch.bfloat16)
        for cfg in CONFIGS:
            if cfg is None:
                distill._launch_config = real
            else:
                distill._launch_config = lambda n_cols, dev, c=cfg: (min(triton.next_power_of_2(n_cols), c[0]), c[1])
            rows, stats = distill.distill_rows(xs, xt, None, labels, **opts)
            fwd = timed(lambda: distill.distill_rows(xs, xt, None, labels, **opts, out=(rows, stats)))
            bwd = timed(lambda: distill.distill_grad_rows(xs, xt, None, labels, stats, scale, grad, None, **opts))
            name = "default " + str(real(V, xs.device)) if cfg is None else str(cfg)
            loss = rows.sum().item()
            print(f"n={n:5d} {str(dtype)[6:]:9s} {name:22s} fwd {fwd:7.3f} ms  bwd {bwd:7.3f} ms  loss {loss:.6f}")
    distill._launch_config = real


main()

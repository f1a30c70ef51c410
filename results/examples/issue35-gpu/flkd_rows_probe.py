"""flkd at N=8192 and a Qwen2.5-7B head for both (bf16, JSD, mean): the time and extra memory of
ours as the rows of a logits product change (the default: 128-row float32 sub-chunks in 256-row
groups; chunk_rows=R: R-row chunks), beside Liger's fused linear JSD (256-row chunks of bf16
logits) if installed. Question: is ours bound by reading the weight once per 128-row product
(2 * 128 FLOPs a weight byte, under the H200's ~180 FLOP/byte balance)?

    PYTHONPATH=$PWD python3 results/examples/issue35-gpu/flkd_rows_probe.py
"""

import torch

from ligerbench.kernels.fused_linear_distill import fused_linear_distill

N, H, V = 8192, 3584, 152064
dev, dt = "cuda", torch.bfloat16
g = torch.Generator(device=dev).manual_seed(0)
hs = torch.randn(N, H, device=dev, dtype=dt, generator=g).requires_grad_(True)
ws = (torch.randn(V, H, device=dev, dtype=dt, generator=g) * H**-0.5).requires_grad_(True)
ht = torch.randn(N, H, device=dev, dtype=dt, generator=g)
wt = torch.randn(V, H, device=dev, dtype=dt, generator=g) * H**-0.5
labels = torch.randint(0, V, (N,), device=dev, generator=g)


def timed(name, fn, reps=6):
    for _ in range(2):
        hs.grad = ws.grad = None
        fn().backward()
    torch.cuda.synchronize()
    hs.grad = ws.grad = None
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(reps):
        hs.grad = ws.grad = None
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        loss = fn()
        loss.backward()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    extra = (torch.cuda.max_memory_allocated() - base) / 2**20
    times.sort()
    print(f"{name:34s} {times[len(times) // 2]:8.2f} ms  extra {extra:7.0f} MiB  loss {loss.item():.6f}", flush=True)


opts = dict(divergence="jsd", beta=0.5, temperature=1.0, reduction="mean")
heads = (hs, ws, ht, wt)
timed("ours (default)", lambda: fused_linear_distill(hs, ws, ht, wt, labels, **opts))
for mib in (224, 260, 280):
    budget = mib * 2**20
    timed(f"ours chunk_bytes={mib} MiB", lambda b=budget: fused_linear_distill(*heads, labels, chunk_bytes=b, **opts))
for rows in (128, 192, 256, 384):
    timed(f"ours chunk_rows={rows}", lambda r=rows: fused_linear_distill(hs, ws, ht, wt, labels, chunk_rows=r, **opts))
timed("ours gradients=backward", lambda: fused_linear_distill(hs, ws, ht, wt, labels, gradients="backward", **opts))
try:
    from ligerbench.suites.peers.liger import _liger_fused_linear_jsd  # called as the bench calls it

    liger = _liger_fused_linear_jsd()
    timed("liger fused linear JSD", lambda: liger(hs, ws, ht, wt, labels=labels, **opts))
except ImportError as exc:
    print("liger not installed:", exc)

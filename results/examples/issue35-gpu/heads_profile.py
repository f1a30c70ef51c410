"""Where a fused head's forward + backward spends its time on a GPU: torch.profiler's CUDA time
per kernel for one iteration of ours (and a peer beside it when installed), at N=8192, bf16.

    PYTHONPATH=$PWD python3 results/examples/issue35-gpu/heads_profile.py [flkd-qwen flce-gemma flce-llama ...]

Each job prints the wall time of an iteration (CUDA events, median of 5), then the kernels that
took the most CUDA time in one profiled iteration, grouped as the profiler names them (cuBLAS
products, our Triton kernels by name, copies), with their share of the total.
"""

import functools
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from ligerbench.kernels.fused_linear_cross_entropy import fused_linear_cross_entropy
from ligerbench.kernels.fused_linear_distill import fused_linear_distill

N, dev, dt = 8192, "cuda", torch.bfloat16
HEADS = {"qwen": (3584, 152064), "gemma": (2304, 256000), "llama": (4096, 128256)}


def inputs(h, v, teacher):
    g = torch.Generator(device=dev).manual_seed(0)
    hs = torch.randn(N, h, device=dev, dtype=dt, generator=g).requires_grad_(True)
    ws = (torch.randn(v, h, device=dev, dtype=dt, generator=g) * h**-0.5).requires_grad_(True)
    labels = torch.randint(0, v, (N,), device=dev, generator=g)
    labels[torch.rand(N, device=dev, generator=g) < 0.1] = -100
    if not teacher:
        return hs, ws, labels, None, None
    ht = torch.randn(N, h, device=dev, dtype=dt, generator=g)
    wt = torch.randn(v, h, device=dev, dtype=dt, generator=g) * h**-0.5
    return hs, ws, labels, ht, wt


def step(fn, hs, ws):
    hs.grad = ws.grad = None
    fn().backward()


def report(name, fn, hs, ws, top=14):
    for _ in range(2):
        step(fn, hs, ws)
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step(fn, hs, ws)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step(fn, hs, ws)
        torch.cuda.synchronize()
    rows = [(e.key, e.count, getattr(e, "self_device_time_total", 0) / 1e3) for e in prof.key_averages()]
    rows = [r for r in rows if r[2] > 0]
    total = sum(r[2] for r in rows)
    print(f"\n== {name}: {times[2]:.2f} ms an iteration (median of 5); profiled CUDA time {total:.2f} ms", flush=True)
    for key, count, ms in sorted(rows, key=lambda r: -r[2])[:top]:
        print(f"  {ms:8.2f} ms {100 * ms / total:5.1f}%  x{count:<4d} {key[:110]}")


def flkd(head):
    h, v = HEADS[head]
    hs, ws, labels, ht, wt = inputs(h, v, teacher=True)
    opts = dict(divergence="jsd", beta=0.5, temperature=1.0, reduction="mean")
    report(f"flkd ours {head}", lambda: fused_linear_distill(hs, ws, ht, wt, labels, **opts), hs, ws)
    wide = functools.partial(fused_linear_distill, chunk_rows=384, **opts)
    report(f"flkd ours {head} chunk_rows=384", lambda: wide(hs, ws, ht, wt, labels), hs, ws)
    try:
        from ligerbench.suites.peers.liger import _liger_fused_linear_jsd

        liger = _liger_fused_linear_jsd()
        report(f"flkd liger {head}", lambda: liger(hs, ws, ht, wt, labels=labels, **opts), hs, ws)
    except ImportError as exc:
        print("liger not installed:", exc)


def flce(head):
    h, v = HEADS[head]
    hs, ws, labels, _, _ = inputs(h, v, teacher=False)
    report(f"flce ours {head}", lambda: fused_linear_cross_entropy(hs, ws, labels), hs, ws)
    compiled = torch.compile(lambda x, w, t: torch.nn.functional.cross_entropy((x @ w.t()).float(), t))
    report(f"flce torch.compile {head}", lambda: compiled(hs, ws, labels), hs, ws)


jobs = sys.argv[1:] or ["flkd-qwen", "flce-gemma", "flce-llama"]
for job in jobs:
    kernel, head = job.split("-")
    {"flkd": flkd, "flce": flce}[kernel](head)
    torch.cuda.empty_cache()

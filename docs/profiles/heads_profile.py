"""Where the fused linear cross entropy's forward + backward spends its time on a GPU, and what
the weight-gradient product costs by its K: one run, every figure from the same process.

    PYTHONPATH=$PWD python3 docs/profiles/heads_profile.py [ceilings dw flce profile host] > out.txt

- ceilings: a bf16 8192^3 product (TFLOP/s) and a 2 GiB device copy (GB/s, read + write).
- dw: the [V, H] weight-gradient product of one chunk, dW (+)= g.T @ h_c, by K = tokens a
  chunk, written (mm) or accumulated (addmm_), alone and beside grad_h = g @ W on two streams.
The output of one H200 run, and what it says: docs/profiles/heads_profile-h200.txt and
docs/profiles/flce-heads-h200.md.
- flce: ours (its default budget, two fixed ones, and at Gemma-2 each split) and torch.compile of
  the model code at the four heads of `ligerbench bench --kernel flce --sweep heads`; median ms
  (triton.testing.do_bench, L2 flushed) and extra MiB (peak above what was allocated before).
- profile: torch.profiler's CUDA time per kernel in one iteration, grouped by name.
- host: the host's time to issue one call while the GPU is held busy (a call that syncs shows
  the held time).
Inputs as the bench draws them: hidden ~ N(0, 1), W ~ N(0, 1/H), bf16, ~10% of targets ignored.
"""

from __future__ import annotations

import sys
import time

import torch
import triton
from torch.profiler import ProfilerActivity, profile

from ligerbench.kernels.fused_linear_cross_entropy import fused_linear_cross_entropy

N, DEV, DT = 8192, "cuda", torch.bfloat16
HEADS = {"llama3-8b": (4096, 128256), "gemma2-2b": (2304, 256000), "qwen2.5-7b": (3584, 152064),
         "mistral-7b": (4096, 32768)}  # fmt: skip
MIB = 2**20


def inputs(h: int, v: int):
    g = torch.Generator(device=DEV).manual_seed(0)
    hs = torch.randn(N, h, device=DEV, dtype=DT, generator=g).requires_grad_(True)
    ws = (torch.randn(v, h, device=DEV, dtype=DT, generator=g) * h**-0.5).requires_grad_(True)
    y = torch.randint(0, v, (N,), device=DEV, generator=g)
    y[torch.rand(N, device=DEV, generator=g) < 0.1] = -100
    return hs, ws, y


def step(fn, hs, ws):
    hs.grad = ws.grad = None
    fn().backward()


def bench(fn, hs, ws) -> tuple[float, float]:
    step(fn, hs, ws)
    hs.grad = ws.grad = None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step(fn, hs, ws)
    torch.cuda.synchronize()
    extra = (torch.cuda.max_memory_allocated() - before) / MIB
    ms = triton.testing.do_bench(lambda: step(fn, hs, ws), warmup=300, rep=1500, return_mode="median")
    return ms, extra


def ceilings():
    a = torch.randn(8192, 8192, device=DEV, dtype=DT)
    ms = triton.testing.do_bench(lambda: a @ a, return_mode="median")
    print(f"ceiling matmul bf16 8192^3: {2 * 8192**3 / ms / 1e9:.0f} TFLOP/s")
    x = torch.empty(2**30, device=DEV, dtype=torch.float16)
    y = torch.empty_like(x)
    ms = triton.testing.do_bench(lambda: y.copy_(x), return_mode="median")
    print(f"ceiling copy 2 GiB: {2 * x.numel() * 2 / ms / 1e6:.0f} GB/s")


def dw_point(head, k, w, acc, main, side):
    v, h = w.shape
    g = torch.randn(k, v, device=DEV, dtype=DT) * 1e-3
    hc = torch.randn(k, h, device=DEV, dtype=DT)
    dh = torch.empty(k, h, device=DEV, dtype=DT)
    t_mm = triton.testing.do_bench(lambda: torch.mm(g.t(), hc, out=acc), return_mode="median")
    t_add = triton.testing.do_bench(lambda: acc.addmm_(g.t(), hc), return_mode="median")
    t_dh = triton.testing.do_bench(lambda: torch.mm(g, w, out=dh), return_mode="median")

    def both():
        side.wait_stream(main)
        torch.mm(g, w, out=dh)
        with torch.cuda.stream(side):
            acc.addmm_(g.t(), hc)
        main.wait_stream(side)

    t_both = triton.testing.do_bench(both, return_mode="median")
    tf = 2 * v * h * k / 1e9
    print(f"dw {head} K={k:5d}: mm {t_mm:.3f} ms ({tf / t_mm:.0f} TF/s), addmm_ {t_add:.3f} "
          f"({tf / t_add:.0f}), grad_h {t_dh:.3f}, serial {t_add + t_dh:.3f}, two streams {t_both:.3f}",
          flush=True)  # fmt: skip


def dw():
    main, side = torch.cuda.current_stream(), torch.cuda.Stream()
    for head in ("llama3-8b", "gemma2-2b"):
        h, v = HEADS[head]
        w = torch.randn(v, h, device=DEV, dtype=DT)
        acc = torch.randn(v, h, device=DEV, dtype=DT)
        for k in (448, 576, 640, 1024, 2048, 8192):
            dw_point(head, k, w, acc, main, side)
        del w, acc
        torch.cuda.empty_cache()


def ours(**kw):
    return lambda hs, ws, y: lambda: fused_linear_cross_entropy(hs, ws, y, **kw)


_COMPILED = []  # one torch.compile for the whole run: a head's shape compiles once


def compiled():
    if not _COMPILED:
        _COMPILED.append(torch.compile(lambda x, w, t: torch.nn.functional.cross_entropy((x @ w.t()).float(), t)))
    fn = _COMPILED[0]
    return lambda hs, ws, y: lambda: fn(hs, ws, y)


def flce(heads=tuple(HEADS)):
    for head in heads:
        h, v = HEADS[head]
        hs, ws, y = inputs(h, v)
        grads_mib = (v + N) * h * 2 / MIB
        variants = [("ours", {})] + [(f"ours {b} MiB", {"chunk_bytes": b * MIB}) for b in (192, 384)]
        if head == "gemma2-2b":
            variants += [("ours by tokens", {"split": "tokens"}), ("ours by vocabulary", {"split": "vocab"})]
        variants.append(("torch.compile", None))
        for name, kw in variants:
            fn = compiled()(hs, ws, y) if kw is None else ours(**kw)(hs, ws, y)
            try:
                ms, extra = bench(fn, hs, ws)
            except Exception as exc:  # a variant that fails is reported, the rest still run
                print(f"flce {head} {name}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                continue
            print(f"flce {head} {name}: {ms:.2f} ms, {extra:.0f} MiB extra ({extra - grads_mib:.0f} above the "
                  f"gradients, {extra / grads_mib:.2f}x)", flush=True)  # fmt: skip
        del hs, ws, y
        torch.cuda.empty_cache()


def profile_one(name, fn, hs, ws, top=14):
    for _ in range(2):
        step(fn, hs, ws)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step(fn, hs, ws)
        torch.cuda.synchronize()
    rows = [(e.key, e.count, getattr(e, "self_device_time_total", 0) / 1e3) for e in prof.key_averages()]
    rows = [r for r in rows if r[2] > 0]
    total = sum(r[2] for r in rows)
    print(f"\n== profile {name}: CUDA time {total:.2f} ms (kernel time summed; streams overlap)", flush=True)
    for key, count, ms in sorted(rows, key=lambda r: -r[2])[:top]:
        print(f"  {ms:8.2f} ms {100 * ms / total:5.1f}%  x{count:<4d} {key[:100]}")


def profiles():
    for head, kw in (("llama3-8b", {}), ("gemma2-2b", {}), ("gemma2-2b", {"split": "tokens"})):
        h, v = HEADS[head]
        hs, ws, y = inputs(h, v)
        profile_one(f"ours {head} {kw or 'default'}", ours(**kw)(hs, ws, y), hs, ws)
        profile_one(f"torch.compile {head}", compiled()(hs, ws, y), hs, ws)
        del hs, ws, y
        torch.cuda.empty_cache()


def host():
    for head in ("llama3-8b", "gemma2-2b", "mistral-7b"):
        h, v = HEADS[head]
        hs, ws, y = inputs(h, v)
        for name, fn in (("ours", ours()(hs, ws, y)), ("torch.compile", compiled()(hs, ws, y))):
            step(fn, hs, ws)
            times = []
            for _ in range(5):
                torch.cuda.synchronize()
                torch.cuda._sleep(2_000_000_000)  # ~1 s of GPU time: the host issues against a busy GPU
                t0 = time.perf_counter()
                step(fn, hs, ws)
                times.append((time.perf_counter() - t0) * 1e3)
                torch.cuda.synchronize()
            times.sort()
            print(f"host {head} {name}: {times[2]:.1f} ms to issue forward + backward (median of 5)", flush=True)
        del hs, ws, y
        torch.cuda.empty_cache()


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    jobs = {"ceilings": ceilings, "dw": dw, "flce": flce, "profile": profiles, "host": host}
    for job in sys.argv[1:] or list(jobs):
        jobs[job]()

# ruff: noqa: B023 -- each closure is timed within its own iteration
"""One block a program against one program a row, for the backwards that write each column
from that column alone (kernels/log_probs.py split_blocks, BWD_SPLIT): lp's backward at N=8192
(bf16, V=151936, T=0.7; TRL's Triton kernel beside, forward + backward through autograd) and
the distillation backward at flkd's sub-chunk (128 float32 rows) and kd's bench shape (2048
bf16 rows), V=152064, JSD. CUDA events, median of 20 after 3 warm-ups.

    PYTHONPATH=/tmp/site:$PWD python3 results/examples/issue34-gpu/bwd_split_probe.py
"""

import statistics

import torch

from ligerbench.kernels import distill, log_probs

CONFIGS = [None, (512, 4), (1024, 4), (2048, 4), (2048, 8), (4096, 8)]


def timed(fn, reps=20):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def lp_part():
    n, v, t = 8192, 151936, 0.7
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(n, v, device="cuda", dtype=torch.bfloat16, generator=g)
    tgt = torch.randint(0, v, (n,), device="cuda", generator=g)
    up = torch.randn(n, device="cuda", generator=g), torch.randn(n, device="cuda", generator=g)
    xl = x.clone().requires_grad_(True)
    opts = dict(temperature=t, softcap=None, logit_scale=1.0, ignore_index=-100)
    _, _, stats = log_probs.log_probs_rows(x, tgt[:, None], **opts)
    grad = torch.empty_like(x)
    dlogp = up[0][:, None].contiguous()

    def step():
        a, b = log_probs.log_probs(xl, tgt, temperature=t)
        torch.autograd.backward((a, b), up)
        xl.grad = None

    try:
        from trl.kernels import selective_log_softmax_and_entropy as trl_fused

        def trl_step():
            a, b = trl_fused(xl, tgt, t, None)
            torch.autograd.backward((a, b), up)
            xl.grad = None

        print(f"lp N={n}: trl fwd+bwd {timed(trl_step):.3f} ms", flush=True)
    except ImportError as exc:
        print("trl not installed:", exc)
    for cfg in CONFIGS:
        if cfg is None:
            log_probs.BWD_SPLIT.pop("cuda", None)
        else:
            log_probs.BWD_SPLIT["cuda"] = cfg
        bwd = timed(lambda: log_probs.log_probs_grad_rows(x, tgt[:, None], stats, dlogp, up[1], grad, **opts))
        name = "row walk " + str(log_probs._GPU_BWD) if cfg is None else f"split {cfg}"
        print(f"lp N={n}: {name:22s} bwd {bwd:.3f} ms; ours fwd+bwd {timed(step):.3f} ms", flush=True)
    log_probs.BWD_SPLIT.pop("cuda", None)


def kd_part():
    v = 152064
    for n, dtype in ((128, torch.float32), (2048, torch.bfloat16)):
        g = torch.Generator(device="cuda").manual_seed(0)
        xs = torch.randn(n, v, device="cuda", generator=g).to(dtype)
        xt = torch.randn(n, v, device="cuda", generator=g).to(dtype)
        labels = torch.randint(0, v, (n,), device="cuda", generator=g)
        opts = dict(divergence="jsd", beta=0.5, temperature=1.0, ignore_index=-100)
        _, stats = distill.distill_rows(xs, xt, None, labels, **opts)
        scale = torch.full((n,), 1.0 / n, device="cuda")
        grad = torch.empty(n, v, device="cuda", dtype=torch.bfloat16)
        for cfg in CONFIGS:
            if cfg is None:
                distill.BWD_SPLIT.pop("cuda", None)
            else:
                distill.BWD_SPLIT["cuda"] = cfg
            bwd = timed(lambda: distill.distill_grad_rows(xs, xt, None, labels, stats, scale, grad, None, **opts))
            name = "row walk" if cfg is None else f"split {cfg}"
            print(f"kd n={n} {str(dtype)[6:]}: {name:22s} bwd {bwd:.3f} ms", flush=True)
        distill.BWD_SPLIT.pop("cuda", None)


print(torch.cuda.get_device_name())
lp_part()
kd_part()

# ruff: noqa: B023 -- each closure is timed within its own iteration
"""lp's backward on a GPU, variant by variant (kernels/log_probs.py BWD_EXPERIMENT): streaming
loads and stores (evict_first), the single target's id and upstream read once a row (hoist),
multiply-add fusion (fma: changes bits; counted), each at the row-walk configs (4096, 8) and
(1024, 4); N=8192, V=151936, bf16, T=0.7, both upstreams; TRL's forward and forward + backward
beside. CUDA events, median of 20 after 3 warm-ups.

    PYTHONPATH=/tmp/site:$PWD python3 results/examples/issue34-gpu/bwd_variants_probe.py
"""

import itertools
import statistics

import torch

from ligerbench.kernels import log_probs as lp


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


n, v, t = 8192, 151936, 0.7
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(n, v, device="cuda", dtype=torch.bfloat16, generator=g)
tgt = torch.randint(0, v, (n,), device="cuda", generator=g)
up = torch.randn(n, device="cuda", generator=g), torch.randn(n, device="cuda", generator=g)
opts = dict(temperature=t, softcap=None, logit_scale=1.0, ignore_index=-100)
_, _, stats = lp.log_probs_rows(x, tgt[:, None], **opts)
dlogp = up[0][:, None].contiguous()
print(torch.cuda.get_device_name(), f"N={n} V={v} bf16")
try:
    from trl.kernels import selective_log_softmax_and_entropy as trl_fused

    xl = x.clone().requires_grad_(True)

    def trl_step():
        a, b = trl_fused(xl, tgt, t, None)
        torch.autograd.backward((a, b), up)
        xl.grad = None

    def trl_fwd():
        with torch.no_grad():
            trl_fused(x, tgt, t, None)

    print(f"trl fwd {timed(trl_fwd):.3f} ms, fwd+bwd {timed(trl_step):.3f} ms", flush=True)
except ImportError as exc:
    print("trl not installed:", exc)
base = None
for config in ((4096, 8), (1024, 4), (2048, 4)):
    lp._GPU_BWD = config
    for evict, hoist, fma in itertools.product((False, True), repeat=3):
        lp.BWD_EXPERIMENT.update(evict=evict, hoist=hoist, fma=fma)
        grad = torch.empty_like(x)
        lp.log_probs_grad_rows(x, tgt[:, None], stats, dlogp, up[1], grad, **opts)
        if base is None:
            base = grad.clone()
        diff = int((grad != base).sum())
        ms = timed(lambda: lp.log_probs_grad_rows(x, tgt[:, None], stats, dlogp, up[1], grad, **opts))
        print(
            f"bwd {str(config):10s} evict={evict:d} hoist={hoist:d} fma={fma:d}: {ms:.3f} ms; "
            f"elements differing from the first variant: {diff}",
            flush=True,
        )

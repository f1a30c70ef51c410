# ruff: noqa: B023 -- each closure is timed within its own iteration
"""lp's backward launch config on a GPU (kernels/log_probs.py _GPU_BWD) after the single target's
id and upstream moved out of the block loop: N=8192, V=151936, bf16, T=0.7, both upstreams; TRL's
forward and forward + backward beside. Timed as `ligerbench bench` times (ligerbench/bench/timing.py:
L2 flushed, median; the figures in results/examples/README.md came from a plain CUDA-event median).

    PYTHONPATH=/tmp/site:$PWD python3 results/examples/issue34-gpu/bwd_config_probe.py
"""

import torch

from ligerbench.bench.timing import time_region
from ligerbench.kernels import log_probs as lp


def timed(fn):
    return time_region(fn, device=torch.device("cuda")).median_ms


n, v, t = 8192, 151936, 0.7
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(n, v, device="cuda", dtype=torch.bfloat16, generator=g)
tgt = torch.randint(0, v, (n,), device="cuda", generator=g)
up = torch.randn(n, device="cuda", generator=g), torch.randn(n, device="cuda", generator=g)
opts = dict(temperature=t, softcap=None, logit_scale=1.0, ignore_index=-100)
_, _, stats = lp.log_probs_rows(x, tgt[:, None], **opts)
dlogp = up[0][:, None].contiguous()
grad = torch.empty_like(x)
print(torch.cuda.get_device_name(), f"N={n} V={v} bf16; default backward config {lp._GPU_BWD}")
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
print(f"ours fwd {timed(lambda: lp.log_probs_rows(x, tgt[:, None], **opts)):.3f} ms")
default = lp._GPU_BWD
for config in ((4096, 8), (2048, 8), (2048, 4), (1024, 4), (4096, 16)):
    lp._GPU_BWD = config
    ms = timed(lambda: lp.log_probs_grad_rows(x, tgt[:, None], stats, dlogp, up[1], grad, **opts))
    print(f"ours bwd {config}: {ms:.3f} ms", flush=True)
lp._GPU_BWD = default

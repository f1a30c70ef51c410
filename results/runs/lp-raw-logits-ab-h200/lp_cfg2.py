"""On the GPU: the tree's log-probs kernels by launch config (BLOCK_V, num_warps), forward and
backward apart, at the bench's shapes; the whole step (autograd, as the bench times it) too."""
import json, sys, torch, triton
from triton.testing import do_bench
import ligerbench.kernels.log_probs as lp
out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
g = torch.Generator(device="cuda").manual_seed(0)
fwd_cfgs = [(1024, 4), (2048, 4), (4096, 4), (1024, 2), (2048, 8)]
bwd_cfgs = [(4096, 8)]
for n, v, dt in [(2048, 151936, torch.bfloat16), (4096, 151936, torch.bfloat16), (8192, 151936, torch.bfloat16), (8192, 8192, torch.float32), (1024, 128256, torch.float32)]:
    x = torch.randn(n, v, generator=g, device="cuda").to(dt)
    t = torch.randint(0, v, (n, 1), generator=g, device="cuda"); t[::10] = -100
    opts = dict(temperature=0.7, softcap=None, logit_scale=1.0, ignore_index=-100)
    dl = torch.randn(n, 1, generator=g, device="cuda"); de = torch.randn(n, generator=g, device="cuda")
    res = {}
    _, _, st = lp.log_probs_rows(x, t, **opts); gr = torch.empty_like(x)
    for cfg in fwd_cfgs:
        lp._GPU_FWD_BLOCK_BYTES = cfg[0] * x.element_size(); lp._GPU_FWD_WARPS = cfg[1]
        res[f"fwd {cfg}"] = do_bench(lambda: lp.log_probs_rows(x, t, **opts), rep=150)
    for cfg in bwd_cfgs:
        lp._gpu_bwd = lambda i, cfg=cfg: cfg
        res[f"bwd {cfg}"] = do_bench(lambda: lp.log_probs_grad_rows(x, t, st, dl, de, gr, **opts), rep=150)
    best_f = min((k for k in res if k.startswith("fwd")), key=res.get); best_b = min((k for k in res if k.startswith("bwd")), key=res.get)
    res["best"] = (best_f, res[best_f], best_b, res[best_b])
    out[f"{n}x{v} {dt}"] = res
    print(n, v, dt, json.dumps(res), flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)

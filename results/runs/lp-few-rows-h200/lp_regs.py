"""On the GPU: log-probs' kernels with a thread's registers capped (maxnreg), by cap: time (do_bench
medians, ms, L2 flushed), registers and spills of the compiled kernel, bits against no cap."""
import json, os, torch, triton
from triton.testing import do_bench
import ligerbench.kernels.log_probs as lp
g = torch.Generator(device="cuda").manual_seed(0)
a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda"); b = torch.empty_like(a)
out = {"device": torch.cuda.get_device_name(), "copy_gbps": 2 * a.numel() / do_bench(lambda: b.copy_(a), rep=200) / 1e6, "rows": []}
del a, b
def regs(fn):
    res = []
    for dev, c in fn.device_caches.items():
        for key, ck in c[0].items():
            res.append((getattr(ck, "n_regs", None), getattr(ck, "n_spills", None)))
    return res
for dt, n, v in ((torch.bfloat16, 1024, 151936), (torch.bfloat16, 2048, 151936), (torch.bfloat16, 8192, 151936), (torch.float32, 2048, 151936)):
    x = torch.randn(n, v, generator=g, device="cuda").to(dt)
    t = torch.randint(0, v, (n, 1), generator=g, device="cuda"); t[::10] = -100
    opts = dict(temperature=0.7, softcap=None, logit_scale=1.0, ignore_index=-100)
    dl = torch.randn(n, 1, generator=g, device="cuda"); de = torch.randn(n, generator=g, device="cuda")
    floor = x.numel() * x.element_size() / out["copy_gbps"] / 1e6
    base = None
    for cap in (None, 96, 80, 72, 64, 56, 48):
        lp._GPU_FWD_MAXNREG = cap; lp._GPU_BWD_MAXNREG = cap
        lp._lp_fwd_kernel.device_caches.clear(); lp._lp_bwd_kernel.device_caches.clear()
        res = lp.log_probs_rows(x, t, **opts)
        gr = torch.empty_like(x); lp.log_probs_grad_rows(x, t, res[2], dl, de, gr, **opts)
        if base is None: base = [r.clone() for r in res] + [gr.clone()]
        same = all(torch.equal(p, q) for p, q in zip(base, list(res) + [gr]))
        f = do_bench(lambda: lp.log_probs_rows(x, t, **opts), rep=100)
        bw = do_bench(lambda: lp.log_probs_grad_rows(x, t, res[2], dl, de, gr, **opts), rep=100)
        row = dict(dtype=str(dt)[6:], n=n, cap=cap, fwd=round(f, 4), bwd=round(bw, 4), fwd_of_floor=round(f / floor, 3),
                   bwd_of_floor=round(bw / 2 / floor, 3), fwd_regs=regs(lp._lp_fwd_kernel), bwd_regs=regs(lp._lp_bwd_kernel), same_bits=same)
        out["rows"].append(row); print(row, flush=True)
    del x
json.dump(out, open(os.path.join(os.environ["OUT"], "lp_regs.json"), "w"), indent=1)

"""On the GPU: log-probs' backward with a row's blocks split over programs where rows alone are few,
by programs wanted a multiprocessor (0: one program a row) and launch config; bf16 and float32
logits, V=151936, own gradient buffer, upstream through logp and entropy. Each split's gradient is
checked bit for bit against one program a row. do_bench medians (ms), L2 flushed."""
import json, os, torch, triton
from triton.testing import do_bench
import ligerbench.kernels.log_probs as lp
out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
       "sms": torch.cuda.get_device_properties(0).multi_processor_count}
a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda"); b = torch.empty_like(a)
out["copy_gbps"] = 2 * a.numel() / do_bench(lambda: b.copy_(a), rep=200) / 1e6; del a, b
print(out, flush=True)
g = torch.Generator(device="cuda").manual_seed(0)
v = 151936
lp._GPU_BWD_BY_NAME = ()
rows = []
for dt, ns in ((torch.bfloat16, (1024, 2048, 4096, 8192)), (torch.float32, (1024, 2048, 4096))):
    for n in ns:
        x = torch.randn(n, v, generator=g, device="cuda").to(dt)
        t = torch.randint(0, v, (n, 1), generator=g, device="cuda"); t[::10] = -100
        opts = dict(temperature=0.7, softcap=None, logit_scale=1.0, ignore_index=-100)
        _, _, st = lp.log_probs_rows(x, t, **opts)
        fwd = do_bench(lambda: lp.log_probs_rows(x, t, **opts), rep=100)
        dl = torch.randn(n, 1, generator=g, device="cuda"); de = torch.randn(n, generator=g, device="cuda")
        floor = 2 * x.numel() * x.element_size() / out["copy_gbps"] / 1e6
        for cfg in ((4096, 8), (8192, 16), (2048, 4), (4096, 16)):
            lp._GPU_BWD = cfg; lp._gpu_bwd.cache_clear()
            base = None
            for per_sm in (0, 4, 8, 16, 32, 64):
                lp._GPU_BWD_PROGRAMS_PER_SM = per_sm
                gr = torch.empty_like(x)
                lp.log_probs_grad_rows(x, t, st, dl, de, gr, **opts)
                if base is None: base = gr.clone()
                same = bool(torch.equal(gr, base))
                ms = do_bench(lambda: lp.log_probs_grad_rows(x, t, st, dl, de, gr, **opts), rep=100)
                row = dict(dtype=str(dt), n=n, cfg=cfg, per_sm=per_sm, bwd_ms=round(ms, 4), fwd_ms=round(fwd, 4),
                           bwd_of_floor=round(ms / floor, 3), same_bits=same)
                rows.append(row); print(row, flush=True)
        del x, st
out["rows"] = rows
os.makedirs(os.environ["OUT"], exist_ok=True)
json.dump(out, open(os.path.join(os.environ["OUT"], "lp_bwd_split.json"), "w"), indent=1)

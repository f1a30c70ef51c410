"""On the GPU: log-probs' forward, this tree's kernel against the previous commit's file
(lp_prev.py), same inputs, one process, alternated A B A B; bits compared. do_bench medians (ms)."""
import importlib.util, json, os, torch, triton
from triton.testing import do_bench
import ligerbench.kernels.log_probs as new
spec = importlib.util.spec_from_file_location("ligerbench.kernels._lp_prev", ".job/lpab/lp_prev.py")
old = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)
g = torch.Generator(device="cuda").manual_seed(0)
a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda"); b = torch.empty_like(a)
out = {"device": torch.cuda.get_device_name(), "copy_gbps": 2 * a.numel() / do_bench(lambda: b.copy_(a), rep=200) / 1e6, "rows": []}
del a, b
for dt, n, v in ((torch.bfloat16, 1024, 151936), (torch.bfloat16, 2048, 151936), (torch.bfloat16, 8192, 151936), (torch.float32, 2048, 151936)):
    x = torch.randn(n, v, generator=g, device="cuda").to(dt)
    t = torch.randint(0, v, (n, 1), generator=g, device="cuda"); t[::10] = -100
    opts = dict(temperature=0.7, softcap=None, logit_scale=1.0, ignore_index=-100)
    ro, rn = old.log_probs_rows(x, t, **opts), new.log_probs_rows(x, t, **opts)
    same = all(torch.equal(p, q) for p, q in zip(ro, rn))
    ts = {"old": [], "new": []}
    for _ in range(3):
        for side, m in (("old", old), ("new", new)):
            ts[side].append(do_bench(lambda: m.log_probs_rows(x, t, **opts), rep=100))
    floor = x.numel() * x.element_size() / out["copy_gbps"] / 1e6
    row = dict(dtype=str(dt), n=n, old=[round(q, 4) for q in ts["old"]], new=[round(q, 4) for q in ts["new"]],
               old_of_floor=round(min(ts["old"]) / floor, 3), new_of_floor=round(min(ts["new"]) / floor, 3), same_bits=same)
    out["rows"].append(row); print(row, flush=True)
json.dump(out, open(os.path.join(os.environ["OUT"], "lp_fwd_ab.json"), "w"), indent=1)

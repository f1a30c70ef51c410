"""On the GPU: log-probs' forward and backward, the tree's kernels against the previous file
(lp_prev.py), same inputs, one process: time (do_bench medians, ms) by launch config, the copy
rate, and each side's error against float64 on a sample of rows."""
import importlib.util, json, sys, os, torch, triton
from triton.testing import do_bench
import ligerbench.kernels.log_probs as new
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m
old = load("ligerbench.kernels._lp_prev", ".job/lpab/lp_prev.py")
out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
g = torch.Generator(device="cuda").manual_seed(0)
def copy_gbps():
    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda"); b = torch.empty_like(a)
    ms = do_bench(lambda: b.copy_(a), rep=200); return 2 * a.numel() / ms / 1e6
out["copy_gbps"] = copy_gbps(); print("copy GB/s", out["copy_gbps"], flush=True)
def ref64(x, t, opts, rows):
    z = x[rows].double() * opts["logit_scale"]
    if opts["softcap"]: z = opts["softcap"] * torch.tanh(z / opts["softcap"])
    z = z / opts["temperature"]; lsm = torch.log_softmax(z, -1); p = lsm.exp()
    tt = t[rows]; valid = tt != -100
    logp = torch.where(valid, lsm.gather(1, tt.clamp(min=0)), 0.0)
    ent = -(p * torch.where(p > 0, lsm, 0.0)).sum(-1)
    return logp, ent, z
def err(a, b):  # max |a - b| / max(|b|, tiny) and max abs
    a = a.double(); return float(((a - b).abs() / b.abs().clamp(min=1e-30)).max()), float((a - b).abs().max())
cases = [("bf16 8192x151936 k1", 8192, 151936, 1, None, torch.bfloat16, "normal"),
         ("bf16 8192x151936 k1 peaked", 8192, 151936, 1, None, torch.bfloat16, "peaked"),
         ("bf16 4096x32000 k4 softcap30", 4096, 32000, 4, 30.0, torch.bfloat16, "normal"),
         ("fp32 8192x32768 k1", 8192, 32768, 1, None, torch.float32, "normal")]
fwd_cfgs = [(1024, 4), (2048, 4), (1024, 2), (2048, 8)]
bwd_cfgs = [(4096, 8)]
for name, n, v, k, soft, dt, kind in cases:
    x = torch.randn(n, v, generator=g, device="cuda")
    t = torch.randint(0, v, (n, k), generator=g, device="cuda"); t[::10] = -100
    if kind == "peaked": x.scatter_(1, t[:, :1].clamp(min=0), 25.0)
    x = x.to(dt)
    opts = dict(temperature=0.7, softcap=soft, logit_scale=1.0, ignore_index=-100)
    dl = torch.randn(n, k, generator=g, device="cuda"); de = torch.randn(n, generator=g, device="cuda")
    res = {"bytes_one_pass": x.numel() * x.element_size()}
    rows = torch.arange(0, n, max(1, n // 64), device="cuda")
    r_logp, r_ent, z64 = ref64(x, t, opts, rows)
    for side, mod in (("old", old), ("new", new)):
        logp, ent, st = mod.log_probs_rows(x, t, **opts)
        gr = torch.empty_like(x); mod.log_probs_grad_rows(x, t, st, dl, de, gr, **opts)
        # float64 gradient of sum dl*logp + de*ent on the sampled rows
        zz = z64.clone().requires_grad_(True); lsm = torch.log_softmax(zz, -1); p = lsm.exp()
        tt = t[rows]; valid = tt != -100
        lp_ = torch.where(valid, lsm.gather(1, tt.clamp(min=0)), 0.0); en = -(p * torch.where(p > 0, lsm, 0.0)).sum(-1)
        keep = valid.any(-1)
        ((dl[rows].double() * lp_).sum() + (de[rows].double() * torch.where(keep, en, 0.0)).sum()).backward()
        gz = zz.grad  # d/dz; x -> z chain (no softcap: / T)
        res[side] = dict(logp_err=err(logp[rows], r_logp), ent_err=err(ent[rows][keep], r_ent[keep]))
        if not soft:
            gx = gz / opts["temperature"]
            res[side]["grad_max_abs_err"] = float((gr[rows].double() - gx).abs().max()); res[side]["grad_max_abs"] = float(gx.abs().max())
        if side == "old":
            res["old"]["fwd_ms"] = do_bench(lambda: mod.log_probs_rows(x, t, **opts), rep=200)
            res["old"]["bwd_ms"] = do_bench(lambda: mod.log_probs_grad_rows(x, t, st, dl, de, gr, **opts), rep=200)
        else:
            saved = mod._GPU_FWD
            for cfg in fwd_cfgs:
                mod._GPU_FWD = cfg
                res["new"][f"fwd_ms {cfg}"] = do_bench(lambda: mod.log_probs_rows(x, t, **opts), rep=200)
            mod._GPU_FWD = saved
            saved_b = mod._gpu_bwd
            for cfg in bwd_cfgs:
                mod._gpu_bwd = lambda i, cfg=cfg: cfg
                res["new"][f"bwd_ms {cfg}"] = do_bench(lambda: mod.log_probs_grad_rows(x, t, st, dl, de, gr, **opts), rep=200)
            mod._gpu_bwd = saved_b
        del gr
    out[name] = res
    print(name, json.dumps(res), flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)

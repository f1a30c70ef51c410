"""On the GPU: the distill forward (kernels/distill.py) against the file before it (distill_prev.py,
beside this script), same inputs, one process: forward ms by launch config, the loss rows' bits and
each side's error against float64 on sampled rows; the backward for reference."""
import importlib.util, json, sys, torch, triton
from triton.testing import do_bench
import ligerbench.kernels.distill as new
from ligerbench.suites.families import distill as semantics
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m
old = load("ligerbench.kernels._distill_prev", ".job/flce/distill_prev.py")
out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
g = torch.Generator(device="cuda").manual_seed(0)
cases = [("kd bf16 2048x152064 jsd", 2048, 152064, torch.bfloat16, "jsd", False),
         ("kd bf16 2048x152064 reverse_kl", 2048, 152064, torch.bfloat16, "reverse_kl", False),
         ("flkd sub-chunk fp32 128x152064 jsd", 128, 152064, torch.float32, "jsd", True),
         ("flkd sub-chunk fp32 128x128256 jsd", 128, 128256, torch.float32, "jsd", True)]
cfgs = [(8192, 16), (4096, 8), (4096, 16), (2048, 4), (2048, 8), (1024, 4)]
for name, n, v, dt, div, sub in cases:
    s = torch.randn(n, v, generator=g, device="cuda").to(dt)
    t = (2 * torch.randn(n, v, generator=g, device="cuda")).to(dt)
    labels = torch.randint(0, v, (n,), generator=g, device="cuda"); labels[::10] = -100
    opts = dict(divergence=div, beta=0.5, temperature=1.0, ignore_index=-100)
    rows = torch.arange(0, n, max(1, n // 32), device="cuda")
    ref = semantics.reference(s[rows].double(), t[rows].double(), labels[rows], teacher_ids=None, divergence=div,
                              beta=0.5, temperature=1.0, reduction="none").double()
    res = {}
    for side, mod in (("old", old), ("new", new)):
        loss, st = mod.distill_rows(s, t, None, labels, **opts, sub_chunks=sub)
        e = (loss[rows].double() - ref).abs()
        res[side] = dict(loss_max_abs_err=float(e.max()), loss_max_rel_err=float((e / ref.abs().clamp(min=1e-30)).max()))
        for cfg in cfgs:
            mod._GPU_FWD[sub] = cfg
            res[side][f"fwd {cfg}"] = do_bench(lambda: mod.distill_rows(s, t, None, labels, **opts, sub_chunks=sub), rep=150)
        if side == "old":
            res["old_loss"] = loss
    res["same_loss_bits_at_default"] = None
    del res["old_loss"]
    out[name] = res
    print(name, json.dumps(res), flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)

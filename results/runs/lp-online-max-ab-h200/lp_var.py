"""On the GPU: variants of the tree's log-probs kernels (files beside this script) against the tree's,
same inputs, one process: forward at (1024, 4), backward at (4096, 8) and (8192, 16); bits of each
variant against the tree's."""
import importlib.util, json, sys, torch, triton
from triton.testing import do_bench
import ligerbench.kernels.log_probs as tree
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m
mods = {"tree": tree}
for v in ("lp_fwd2", "lp_bwd1", "lp_both"):
    mods[v] = load("ligerbench.kernels._" + v, f".job/lpab/{v}.py")
out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
g = torch.Generator(device="cuda").manual_seed(0)
for n, v, dt in [(2048, 151936, torch.bfloat16), (8192, 151936, torch.bfloat16), (8192, 8192, torch.float32)]:
    x = torch.randn(n, v, generator=g, device="cuda").to(dt)
    t = torch.randint(0, v, (n, 1), generator=g, device="cuda"); t[::10] = -100
    opts = dict(temperature=0.7, softcap=None, logit_scale=1.0, ignore_index=-100)
    dl = torch.randn(n, 1, generator=g, device="cuda"); de = torch.randn(n, generator=g, device="cuda")
    res = {}; ref = None
    for name, mod in mods.items():
        mod._GPU_FWD = (1024, 4)
        logp, ent, st = mod.log_probs_rows(x, t, **opts); gr = torch.empty_like(x)
        mod.log_probs_grad_rows(x, t, st, dl, de, gr, **opts)
        bits = (logp, ent, st, gr.clone())
        if ref is None: ref = bits
        r = {"same_bits": all(torch.equal(a, b) for a, b in zip(bits, ref))}
        r["fwd (1024, 4)"] = do_bench(lambda: mod.log_probs_rows(x, t, **opts), rep=150)
        mod._GPU_FWD = (2048, 4)
        r["fwd (2048, 4)"] = do_bench(lambda: mod.log_probs_rows(x, t, **opts), rep=150)
        for cfg in [(4096, 8), (8192, 16), (2048, 4)]:
            mod._gpu_bwd = lambda i, cfg=cfg: cfg
            r[f"bwd {cfg}"] = do_bench(lambda: mod.log_probs_grad_rows(x, t, st, dl, de, gr, **opts), rep=150)
        res[name] = r
    out[f"{n}x{v} {dt}"] = res
    print(n, v, dt, json.dumps(res), flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)

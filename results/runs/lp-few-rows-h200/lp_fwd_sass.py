"""On the GPU: the SASS of log-probs' forward (bf16, one row a program, the raw-logit path), its
instruction mix, and a torch profiler trace of one bench-like step (forward + backward at N=2048,
V=151936) listing every kernel and its time."""
import collections, json, os, re, torch, triton
import ligerbench.kernels.log_probs as lp
from ligerbench.kernels.log_probs import log_probs
out_dir = os.environ["OUT"]
g = torch.Generator(device="cuda").manual_seed(0)
n, v = 2048, 151936
x = torch.randn(n, v, generator=g, device="cuda").to(torch.bfloat16)
t = torch.randint(0, v, (n,), generator=g, device="cuda")
opts = dict(temperature=0.7, softcap=None, logit_scale=1.0, ignore_index=-100)
lp.log_probs_rows(x, t.unsqueeze(1), **opts)
res = {}
for name, fn in (("fwd", lp._lp_fwd_kernel), ("bwd", lp._lp_bwd_kernel)):
    try:
        caches = fn.device_caches
        for dev, c in caches.items():
            for key, ck in c[0].items():
                sass = ck.asm.get("sass") if hasattr(ck.asm, "get") else None
                if sass is None:
                    try: sass = ck.asm["sass"]
                    except Exception as e: sass = f"no sass: {e}"
                open(os.path.join(out_dir, f"{name}.sass"), "w").write(sass)
                open(os.path.join(out_dir, f"{name}.ptx"), "w").write(ck.asm["ptx"])
                ops = collections.Counter(m.group(1).split(".")[0] for m in re.finditer(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", sass, re.M))
                res[name] = {"n_regs": getattr(ck, "n_regs", None), "n_spills": getattr(ck, "n_spills", None), "ops": dict(ops.most_common(40))}
                break
    except Exception as e:
        res[name] = f"error {e!r}"
print(json.dumps(res)[:3000], flush=True)
# the bench-like step
leaf = x.clone().requires_grad_(True)
def step():
    logp, ent = log_probs(leaf, t, **opts)
    (logp.sum() + ent.sum()).backward()
    leaf.grad = None
for _ in range(3): step()
torch.cuda.synchronize()
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
    for _ in range(5): step()
    torch.cuda.synchronize()
tab = prof.key_averages().table(sort_by="cuda_time_total", row_limit=25)
print(tab, flush=True)
open(os.path.join(out_dir, "profile.txt"), "w").write(tab)
json.dump(res, open(os.path.join(out_dir, "sass_ops.json"), "w"), indent=1)

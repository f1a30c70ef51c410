"""On the GPU: our row kernels as the tree has them against the one-row kernels of 8691006, same
inputs, one process: bits and time (triton.testing.do_bench, median ms). The old files first:

    mkdir -p .job/ab && for f in log_probs shifted_logits cross_entropy; do
        git show 8691006:kernels/$f.py > .job/ab/$f.old.py; done
    (named log_probs_old.py, shifted_old.py, ce_old.py below)
    python3 ab_gpu.py OUT.json       # NEW_FIRST=1: each pair timed new first
"""
import importlib.util, json, sys, torch, triton
from triton.testing import do_bench
import ligerbench.kernels.log_probs as new_lp
import ligerbench.kernels.shifted_logits as new_sh
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m
old_lp = load("ligerbench.kernels._old_lp", ".job/ab/log_probs_old.py")
old_sh = load("ligerbench.kernels._old_sh", ".job/ab/shifted_old.py")
import ligerbench.kernels.cross_entropy as new_ce
old_ce = load("ligerbench.kernels._old_ce", ".job/ab/ce_old.py")
import os
def pair(o, n, b=None):
    both = (("new", n), ("old", o)) if os.environ.get("NEW_FIRST") else (("old", o), ("new", n))
    return both + ((("b", b),) if b is not None else ())
out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
g = torch.Generator(device="cuda").manual_seed(0)
# log-probs: the RL shape of kernels/NOTES.md (N=8192, V=151936, bf16), 10% ignored, temperature 0.7
for (n, v, k, soft) in [(8192, 151936, 1, None), (4096, 32000, 4, 30.0)]:
    x = (3 * torch.randn(n, v, generator=g, device="cuda")).bfloat16()
    t = torch.randint(0, v, (n, k), generator=g, device="cuda"); t[::10] = -100
    opts = dict(temperature=0.7, softcap=soft, logit_scale=1.0, ignore_index=-100)
    dl = torch.randn(n, k, generator=g, device="cuda"); de = torch.randn(n, generator=g, device="cuda")
    res = {}
    for name, mod in pair(old_lp, new_lp):
        logp, ent, st = mod.log_probs_rows(x, t, **opts)
        gr = torch.empty_like(x); mod.log_probs_grad_rows(x, t, st, dl, de, gr, **opts)
        fwd = do_bench(lambda: mod.log_probs_rows(x, t, **opts), rep=300)
        bwd = do_bench(lambda: mod.log_probs_grad_rows(x, t, st, dl, de, gr, **opts), rep=300)
        res[name] = (logp, ent, st, gr, fwd, bwd)
    same = [torch.equal(a.nan_to_num(9.), b.nan_to_num(9.)) for a, b in zip(res["old"][:4], res["new"][:4])]
    maxd = [float((a.float() - b.float()).abs().nan_to_num(0).max()) for a, b in zip(res["old"][:4], res["new"][:4])]
    out[f"lp n{n} v{v} k{k} softcap{soft}"] = dict(same_bits=same, max_abs_diff=maxd, fwd_ms_old=res["old"][4], fwd_ms_new=res["new"][4], bwd_ms_old=res["old"][5], bwd_ms_new=res["new"][5])
    print(json.dumps(out[f"lp n{n} v{v} k{k} softcap{soft}"]), flush=True)
# the 2-byte chunk: Llama-3-8B's vocabulary, a chunk of 4096 tokens, bf16 gradient, 5% ignored
n, v = 4096, 128256
x = 4 * torch.randn(n, v, generator=g, device="cuda")
t = torch.randint(0, v, (n,), generator=g, device="cuda"); t[::20] = -100
res = {}
for name, mod in pair(old_sh, new_sh):
    st = mod.Stats(n, v, x.device); y = torch.empty(n, v, dtype=torch.float16, device="cuda")
    w = mod.slice_width(v, x.device)
    slices = [x[:, c:c + w].contiguous() for c in range(0, v, w)]
    def pack():
        st.start(n)
        for i, c in enumerate(range(0, v, w)):
            mod.pack_slice(slices[i], y, t, st, c)
    pack(); y0 = y.clone()
    loss, lse = mod.rows_loss_grad(y, y.view(torch.bfloat16), t, st, ignore_index=-100, class_weight=None, token_weight=None, denom=None)
    res_bits = (y0, st.m.clone(), st.s.clone(), st.xt.clone(), loss, lse, y.clone())
    tp = do_bench(pack, rep=300)
    def rows():
        y.copy_(y0); mod.rows_loss_grad(y, y.view(torch.bfloat16), t, st, ignore_index=-100, class_weight=None, token_weight=None, denom=None)
    tr = do_bench(rows, rep=300)
    tc = do_bench(lambda: y.copy_(y0), rep=300)
    res[name] = res_bits + (tp, tr - tc)
same = [torch.equal(a.float().nan_to_num(9.), b.float().nan_to_num(9.)) for a, b in zip(res["old"][:7], res["new"][:7])]
out["shifted16 n4096 v128256"] = dict(same_bits=same, pack_ms_old=res["old"][7], pack_ms_new=res["new"][7], rows_ms_old=res["old"][8], rows_ms_new=res["new"][8])
print(json.dumps(out["shifted16 n4096 v128256"]), flush=True)
# cross entropy: Llama-3-8B's head (N=8192, V=128256, bf16), forward with the gradient, 10% ignored;
# then the rows' rescale by a non-one upstream
n, v = 8192, 128256
x = (3 * torch.randn(n, v, generator=g, device="cuda")).bfloat16()
t = torch.randint(0, v, (n,), generator=g, device="cuda"); t[::10] = -100
up = torch.randn(n, generator=g, device="cuda")
res = {}
for name, mod in pair(old_ce, new_ce):
    gr = torch.empty_like(x)
    loss, zl, lse = mod.cross_entropy_rows(x, t, grad_out=gr)
    g0 = gr.clone(); mod.scale_rows_(gr, up)
    f = do_bench(lambda: mod.cross_entropy_rows(x, t, grad_out=gr), rep=300)
    sc = do_bench(lambda: mod.scale_rows_(gr, up), rep=300)
    res[name] = (loss, lse, g0, gr.clone(), f, sc)
same = [torch.equal(a.float().nan_to_num(9.), b.float().nan_to_num(9.)) for a, b in zip(res["old"][:3], res["new"][:3])]
out["ce n8192 v128256"] = dict(same_bits=same, fwd_grad_ms_old=res["old"][4], fwd_grad_ms_new=res["new"][4], scale_rows_ms_old=res["old"][5], scale_rows_ms_new=res["new"][5])
print(json.dumps(out["ce n8192 v128256"]), flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)

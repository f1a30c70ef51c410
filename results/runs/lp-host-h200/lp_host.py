"""On the GPU: the host's time to issue log-probs (N=2048, V=151936, bf16, the bench's step: forward,
the random-upstream objective, backward), by part, and a cProfile of the whole step. Each figure:
wall time a call over 200 calls issued back to back, the GPU idle at the start (ms)."""
import cProfile, io, json, os, pstats, time, torch
import ligerbench.kernels.log_probs as lp
from ligerbench.kernels.log_probs import log_probs
g = torch.Generator(device="cuda").manual_seed(0)
n, v = 2048, 151936
x = torch.randn(n, v, generator=g, device="cuda").to(torch.bfloat16).requires_grad_(True)
t = torch.randint(0, v, (n,), generator=g, device="cuda"); t[::10] = -100
u1 = torch.randn(n, generator=g, device="cuda"); u2 = torch.randn(n, generator=g, device="cuda")
opts = dict(temperature=1.0, softcap=None, logit_scale=1.0, ignore_index=-100)
t2 = t.unsqueeze(1)
_, _, st = lp.log_probs_rows(x.detach(), t2, **opts)
gr = torch.empty_like(x)
dl = u1.unsqueeze(1).contiguous()
def step():
    logp, ent = log_probs(x, t)
    ((logp * u1).sum() + (ent * u2).sum()).backward()
    x.grad = None
def step_torch():  # a step of plain torch ops of the same count, for scale
    y = x.detach()[:, :8].float()
    ((y.sum(-1) * u1).sum() + (y.mean(-1) * u2).sum())
parts = {
    "step": step,
    "forward (log_probs)": lambda: log_probs(x.detach(), t),
    "fwd launch (log_probs_rows)": lambda: lp.log_probs_rows(x.detach(), t2, **opts),
    "bwd launch (log_probs_grad_rows)": lambda: lp.log_probs_grad_rows(x.detach(), t2, st, dl, None, gr, **opts),
    "torch.empty x3": lambda: (torch.empty(n, 1, device="cuda"), torch.empty(n, device="cuda"), torch.empty(n, 3, device="cuda")),
    "a plain torch step (5 ops)": step_torch,
}
out = {"device": torch.cuda.get_device_name(), "ms": {}}
for name, fn in parts.items():
    for _ in range(5): fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(200): fn()
    wall = (time.perf_counter() - t0) / 200 * 1e3
    torch.cuda.synchronize()
    out["ms"][name] = round(wall, 4); print(name, round(wall, 4), flush=True)
pr = cProfile.Profile(); pr.enable()
for _ in range(100): step()
pr.disable(); torch.cuda.synchronize()
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30)
s2 = io.StringIO(); pstats.Stats(pr, stream=s2).sort_stats("cumulative").print_stats(40)
open(os.path.join(os.environ["OUT"], "lp_host_profile.txt"), "w").write(s.getvalue() + "\n\n" + s2.getvalue())
print(s.getvalue()[:6000])
json.dump(out, open(os.path.join(os.environ["OUT"], "lp_host.json"), "w"), indent=1)

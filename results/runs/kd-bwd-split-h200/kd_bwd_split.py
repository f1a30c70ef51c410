"""On the GPU: the distill backward (JSD, beta 0.5) with a row's blocks split over programs, by programs
wanted a multiprocessor (0: one a row): flkd's float32 sub-chunks (128 and 376 rows, V=152064, the
gradient bf16 in a buffer of its own) and kd's bf16 rows (2048); bits against one program a row.
The forward timed beside for scale. do_bench medians (ms), L2 flushed."""
import json, os, torch, triton
from triton.testing import do_bench
import ligerbench.kernels.distill as kd
g = torch.Generator(device="cuda").manual_seed(0)
a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda"); b = torch.empty_like(a)
out = {"device": torch.cuda.get_device_name(), "copy_gbps": 2 * a.numel() / do_bench(lambda: b.copy_(a), rep=200) / 1e6, "rows": []}
del a, b
v = 152064
opts = dict(divergence="jsd", beta=0.5, temperature=1.0, ignore_index=-100)
for n, dt, sub in ((128, torch.float32, True), (376, torch.float32, True), (2048, torch.bfloat16, False)):
    s = torch.randn(n, v, generator=g, device="cuda").to(dt); t = (2 * torch.randn(n, v, generator=g, device="cuda")).to(dt)
    lbl = torch.randint(0, v, (n,), generator=g, device="cuda"); lbl[::10] = -100
    loss, stats = kd.distill_rows(s, t, None, lbl, **opts, sub_chunks=sub)
    fwd = do_bench(lambda: kd.distill_rows(s, t, None, lbl, **opts, sub_chunks=sub), rep=100)
    scale = torch.full((n,), 1.0 / n, device="cuda")
    gs = torch.empty(n, v, dtype=torch.bfloat16, device="cuda")
    base = None
    for per_sm in (0, 2, 4, 8, 16, 32):
        kd._GPU_BWD_PROGRAMS_PER_SM = per_sm
        kd.distill_grad_rows(s, t, None, lbl, stats, scale, gs, None, **opts)
        if base is None: base = gs.clone()
        same = bool(torch.equal(gs, base))
        ms = do_bench(lambda: kd.distill_grad_rows(s, t, None, lbl, stats, scale, gs, None, **opts), rep=100)
        floor = (2 * s.numel() * s.element_size() + gs.numel() * 2) / out["copy_gbps"] / 1e6
        row = dict(n=n, dtype=str(dt)[6:], per_sm=per_sm, bwd=round(ms, 4), fwd=round(fwd, 4), bwd_of_floor=round(ms / floor, 2), same_bits=same)
        out["rows"].append(row); print(row, flush=True)
    del s, t, gs
json.dump(out, open(os.path.join(os.environ["OUT"], "kd_bwd_split.json"), "w"), indent=1)

"""The one float32 flkd check of ours that fails on an H200 (kernels/NOTES.md, session 15):
is it the logits' products or the divergence? Forms the case's logits both ways a caller's
tensors reach cuBLAS (ours: [N, H] @ W.T; the careful yardstick: [B, T, H] @ W.T) and runs both
the careful PyTorch semantics and our kd kernel (kernels/distill.py) on each, against the float64
truth.

    PYTHONPATH=$PWD python3 results/examples/issue35-gpu/reverse_kl_logits_probe.py [cpu|cuda]
"""

import sys

import torch

from ligerbench.builtin import default_registry
from ligerbench.kernels.distill import distill_loss
from ligerbench.kernels.fused_linear_distill import fused_linear_distill
from ligerbench.suites import distill_semantics as semantics

CASE = "flkd/n12/v500/h32/fp32/reverse_kl/t2.0/batchmean/up-ones/leading_run/confident/lay-3d"
dev = torch.device(sys.argv[1] if len(sys.argv) > 1 else "cuda")
reg = default_registry(plugins=False)
spec = reg.kernel("flkd")
case = next(c for s in reg.suites_for("flkd") for d in ("cuda", "cpu") for pr in ("quick", "full")
            for c in reg.cases_of(s, pr, d) if c.id == CASE)  # fmt: skip
p = spec.make_problem(case, 0, dev)
truth = spec.reference(p).values["loss"].double()
o = p.options
sh, sw, th, tw = (x.detach() for x in (p.student_hidden, p.student_weight, p.teacher_hidden, p.teacher_weight))
print("device", dev, "student_hidden", tuple(sh.shape), sh.stride(), "contiguous", sh.is_contiguous())
ways = {
    "2d (ours)": (sh.reshape(-1, sh.shape[-1]) @ sw.t(), th.reshape(-1, th.shape[-1]) @ tw.t()),
    "3d (yardstick)": ((sh @ sw.t()).reshape(-1, sw.shape[0]), (th @ tw.t()).reshape(-1, tw.shape[0])),
}
lbl = p.labels.reshape(-1)
x64 = (sh.double().reshape(-1, sh.shape[-1]) @ sw.double().t(), th.double().reshape(-1, th.shape[-1]) @ tw.double().t())


def rel(x):
    return f"{(x.double() - truth).abs().item() / truth.abs().item():.3e}"


for name, (xs, xt) in ways.items():
    ulps = (xs.double() - x64[0]).abs() / torch.finfo(torch.float32).eps / xs.abs().double().clamp_min(1e-30)
    careful = semantics.reference(xs, xt, lbl, **o)
    ours = distill_loss(xs, xt, labels=lbl, **o)
    print(
        f"{name:15s} logits vs float64: max {ulps.max().item():.2f} ulp-eps; careful {rel(careful)}; "
        f"our kd kernel {rel(ours)}"
    )
a, b = ways["2d (ours)"][0], ways["3d (yardstick)"][0]
print("2d vs 3d student logits differ in", int((a != b).sum()), "of", a.numel())
once = semantics.reference(x64[0].float(), x64[1].float(), lbl, **o)
print("careful on float64 logits rounded once to float32:", rel(once))
print("our fused op:", rel(fused_linear_distill(sh, sw, th, tw, p.labels, **o)))

"""Where does our compiled kernel lose the entropy's digits at softcap 30 / temperature 0.6?

The logits of the vp_flp case that fails on two H200s (docs/bugs.md, bug 11), all on one GPU
through the `lp` kernel (the per-slice kernel vp_flp runs on each rank): entropy error against
float64 with the softcap and temperature applied (a) inside the kernel, (b) beforehand in float64
and rounded once to float32 (the kernel then sees softcap=None, temperature 1), and (c) by the
careful PyTorch yardstick on the same float32 logits. If (a) >> (b) ~ (c), the kernel's softcap
(its expm1-based tanh) is the loss.

    python results/examples/issue32-gpu/softcap_entropy.py     # from the repo root, on a GPU
"""

import torch

from ligerbench import tolerance
from ligerbench.builtin import default_registry
from ligerbench.kernels.log_probs import log_probs
from ligerbench.suites import log_prob_semantics as semantics

CASE = "vp_flp/n12/v257/h16/fp32/t0.6/cap30.0/s1.0/k3/up-sums/none/peaked/lay-3d/w2/at-edges"
dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
registry = default_registry()
spec = registry.kernels["vp_flp"]
(case,) = [c for c in spec.grid("quick", "cuda") if c.id == CASE]
base = spec.make_problem(case, 0, dev).base
opts = dict(base.options)
cap, t = opts["softcap"], opts["temperature"]
target = base.target
x32 = (base.hidden.double() @ base.weight.double().t()).float()  # the float32 logits, one rounding
x64 = x32.double()
_, h_true = semantics.reference(x64, target, temperature=t, softcap=cap)
z64 = cap * torch.tanh(x64 / cap) / t
rows = []
for label, fn in (
    ("kernel softcap (a)", lambda: log_probs(x32, target, temperature=t, softcap=cap)[1]),
    ("float64 softcap (b)", lambda: log_probs(z64.float(), target, temperature=1.0, softcap=None)[1]),
    ("careful PyTorch (c)", lambda: semantics.reference(x32, target, temperature=t, softcap=cap)[1]),
    ("textbook PyTorch", lambda: semantics.reference(x32, target, temperature=t, softcap=cap, textbook=True)[1]),
):
    rows.append((label, tolerance.rel_error(fn(), h_true)))
# the capped logits alone: the kernel's tanh against float64 (through logp of every column)
for label, err in rows:
    print(f"{label:22s} entropy rel error {err:.3g}")

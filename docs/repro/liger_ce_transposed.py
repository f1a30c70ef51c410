"""Liger-Kernel 0.6.3-0.8.5 (docs/bugs.md, "Bugs this harness found in other kernels"): cross
entropy on logits whose last dimension is not contiguous hands back the raw logits as their
gradient. The same logits made contiguous get the right gradient.

    pip install liger-kernel==0.8.5
    python docs/repro/liger_ce_transposed.py      # on a GPU, or on CPU through Triton's interpreter
"""

import os

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton decorates Liger's kernels
from liger_kernel.transformers.functional import liger_cross_entropy  # noqa: E402

torch.manual_seed(0)
logits = torch.randn(64, 8, device=device).t()  # [8, 64], its last dim strided: a transposed view
target = torch.randint(0, 64, (8,), device=device)
truth = logits.detach().double().requires_grad_(True)
torch.nn.functional.cross_entropy(truth, target).backward()
for name, x in (("transposed", logits.detach().clone()), ("contiguous", logits.detach().contiguous())):
    given = x.clone()  # Liger writes its gradient into the logits' storage: keep what was handed in
    leaf = x.requires_grad_(True)
    liger_cross_entropy(leaf, target).backward()
    err = ((leaf.grad.double() - truth.grad).norm() / truth.grad.norm()).item()
    raw = torch.equal(leaf.grad, given)
    print(f"{name}: gradient relative error {err:.3g}; gradient == the logits handed in: {raw}")

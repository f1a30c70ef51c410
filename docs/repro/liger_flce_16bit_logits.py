"""Liger-Kernel 0.8.5's fused linear cross entropy (docs/peers.md, "Every failing check,
classified"), two findings, each printed beside float64 from the same inputs:
1. 16-bit inputs: each chunk's logits come out of the product in bf16 and the softmax is taken
   of the rounded logits (the class of Liger #1432). On confident rows, where 1 - p of the target
   is small, the loss moves by percent.
2. reduction "mean" with every target ignored: 0 where PyTorch gives NaN (0 / 0).

    pip install liger-kernel==0.8.5
    python docs/repro/liger_flce_16bit_logits.py      # on a GPU, or on CPU through Triton's interpreter
"""

import os

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton decorates Liger's kernels
from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss  # noqa: E402

torch.manual_seed(0)
n, h, v = 12, 32, 256
weight = torch.randn(v, h, device=device)
target = torch.randint(0, v, (n,), device=device)
hidden = weight[target] + 0.1 * torch.randn(n, h, device=device)  # confident rows: the target's logit dominates
hb, wb = hidden.bfloat16(), weight.bfloat16()
truth = torch.nn.functional.cross_entropy(hb.double() @ wb.double().t(), target)
careful = torch.nn.functional.cross_entropy(hb.float() @ wb.float().t(), target)  # float32 logits, same inputs
got = LigerFusedLinearCrossEntropyLoss()(wb, hb, target)
for name, loss in (("careful float32 logits", careful), ("Liger", got)):
    err = abs(loss.double().item() - truth.item()) / truth.item()
    print(f"confident bf16 rows: float64 loss {truth.item():.6g}, {name} {loss.item():.6g}, relative error {err:.3g}")
ignored = torch.full((n,), -100, device=device)
print("every target ignored: torch", torch.nn.functional.cross_entropy(hidden @ weight.t(), ignored).item(),
      "Liger", LigerFusedLinearCrossEntropyLoss()(weight, hidden, ignored).item())  # fmt: skip

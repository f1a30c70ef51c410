"""Liger-Kernel 0.8.5 (docs/peers.md, "Every failing check, classified"): cross entropy on 16-bit
logits with reduction="none" rounds the logits' gradient twice. Its forward writes the gradient
(softmax - one-hot) in the logits' dtype; its backward multiplies that by each row's upstream
gradient and rounds again. A careful kernel rounds once (float32 math, one rounding at the store:
ligerbench's bug 13 was this in its own kernel). Shown in fp16: Triton's interpreter truncates a
float32 -> bf16 cast (ligerbench/kernels/interpreter_defects.py), so a CPU run in bf16 would show
that instead; the rounding is the same for both 16-bit types. Printed, over 20 seeds: the share of Liger's
gradient elements that are bit for bit the twice-rounded value, and its error against float64
beside the once-rounded gradient's.

    pip install liger-kernel==0.8.5
    python docs/repro/liger_ce_twice_rounded.py      # on a GPU, or on CPU through Triton's interpreter
"""

import os

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton decorates Liger's kernels
from liger_kernel.transformers.functional import liger_cross_entropy  # noqa: E402

n, v = 16, 1000
ratios, same = [], []
for seed in range(20):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, v, generator=g).half().to(device)
    target = torch.randint(0, v, (n,), generator=g).to(device)
    up = torch.randn(n, generator=g).to(device)
    x = logits.clone().requires_grad_(True)
    liger_cross_entropy(x, target, reduction="none").backward(up.half())
    grad = torch.softmax(logits.double(), -1) - torch.nn.functional.one_hot(target, v).double()
    truth = grad * up.half().double()[:, None]
    once = truth.half()  # float32 math, one rounding at the store
    twice = (grad.half().float() * up.half().float()[:, None]).half()

    def err(t, truth=truth):
        return ((t.double() - truth).norm() / truth.norm()).item()

    ratios.append(err(x.grad) / err(once))
    same.append((x.grad == twice).float().mean().item())
print(f"Liger's gradient elements equal to the twice-rounded value: {min(same):.4f} to {max(same):.4f}")
print(
    f"Liger's error / the once-rounded error, 20 seeds: mean {sum(ratios) / len(ratios):.2f}, "
    f"max {max(ratios):.2f}, seeds above 2x: {sum(r > 2 for r in ratios)}"
)

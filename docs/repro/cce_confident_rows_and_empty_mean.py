"""Cut Cross-Entropy 25.1.1 (`cut_cross_entropy.linear_cross_entropy`, Triton; CUDA only) against
what it says it computes, "loss = F.cross_entropy((e @ c.T).float(), targets)" (its doc.py):

1. Confident rows (a trained model: p(target) near 1, a loss near 0), bf16 inputs, reduction
   "none": its per-token loss against the float64 truth, beside the formula it names (the product
   in bf16, then float32) and PyTorch on float32 logits of the same inputs. It forms the target's
   logit with a dot of its own (`indexed_neg_dot_forward_kernel`) apart from the logits its
   log-sum-exp reads, so loss = lse - x_t subtracts two separately rounded numbers.
2. Reduction "mean" with every target ignored: forward NaN as PyTorch, then backward divides by
   the number of counted rows in Python (`grad_scale = 1 / lse.numel()`, cce.py).
Seen in `ligerbench verify --kernel flce --preset quick --device cuda` on an H100 (2026-11-27).

    pip install cut-cross-entropy==25.1.1
    python docs/repro/cce_confident_rows_and_empty_mean.py      # needs a CUDA GPU
"""

import torch
import torch.nn.functional as F
from cut_cross_entropy import linear_cross_entropy

torch.manual_seed(0)
n, d, v = 256, 128, 4096
weight = (torch.randn(v, d, device="cuda") * d**-0.5).bfloat16()
hidden = torch.randn(n, d, device="cuda")
target = (hidden.bfloat16() @ weight.t()).float().argmax(-1)
hidden = (hidden * 6).bfloat16()  # sharpen: the argmax class takes nearly all the mass
truth = F.cross_entropy(hidden.double() @ weight.double().t(), target, reduction="none")


def rel(loss: torch.Tensor) -> str:
    err = loss.double() - truth
    return f"norm {err.norm().item() / truth.norm().item():.3g}, worst row {(err.abs() / truth).max().item():.3g}"


print(f"rows' float64 loss: median {truth.median().item():.2e}, max {truth.max().item():.2e}")
print(
    "formula it names, F.cross_entropy((e @ c.T).float()):",
    rel(F.cross_entropy((hidden @ weight.t()).float(), target, reduction="none")),
)
print("PyTorch on float32 logits:", rel(F.cross_entropy(hidden.float() @ weight.float().t(), target, reduction="none")))
for eps in (None, "auto"):
    got = linear_cross_entropy(hidden, weight, target, reduction="none", filter_eps=eps)
    print(f"Cut Cross-Entropy (filter_eps={eps}):", rel(got))

h = hidden[:8].clone().requires_grad_()
w = weight.clone().requires_grad_()
ignored = torch.full((8,), -100, device="cuda")
loss = linear_cross_entropy(h, w, ignored, reduction="mean", filter_eps=None)
print("every target ignored, mean: forward", loss.item(), "(PyTorch: nan)")
try:
    loss.backward()
    print("backward: ok, weight gradient max", w.grad.abs().max().item())
except Exception as exc:  # the failure is what this script shows
    print(f"backward: {type(exc).__name__}: {exc} (PyTorch: zero gradients)")

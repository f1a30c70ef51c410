"""Liger-Kernel 0.8.5's cross entropy and fused linear cross entropy under a second backward
through one forward (`loss.backward(up, retain_graph=True)`, then `loss.backward(other_up)`): both
form their gradients in forward and scale them in place in backward, so the second call scales a
buffer the first already scaled, and nothing refuses it (the pattern of QuACK #209). PyTorch's
own cross entropy, the reference, returns each call's gradient for its own upstream.

What the second call should return: the gradient of 0.5 * loss, half the first call's (with
the first upstream 1, an in-place scaling by 1 changes nothing, so the first upstream here is
the GradScaler's 65536). On a CUDA GPU, or on CPU through Triton's interpreter (float32: the
interpreter's known defects are 16-bit ones):

    pip install liger-kernel==0.8.5
    python docs/repro/liger_retain_graph_second_backward.py
    DEV=cpu TRITON_INTERPRET=1 python docs/repro/liger_retain_graph_second_backward.py

Measured on CPU through the interpreter (2026-11-27): both losses' first call right (1.07e-8,
1.51e-7), their second call's gradients off by 6.55e4 relative: scaled by 65536 twice. Its source
says why (liger_kernel/ops/cross_entropy.py, cross_entropy_backward: the saved gradient scaled in
place by a Triton kernel, "because modifying inputs in-place for gradient storage and backward
multiple times causes anomalies with PyTorch but not with Triton"). On an H100 (compiled Triton,
2026-11-27) the same: the first backward 1.07e-8 and 2.59e-7 off, the second 6.55e4.
"""

import os

import torch
import torch.nn.functional as F
from liger_kernel.transformers import LigerCrossEntropyLoss, LigerFusedLinearCrossEntropyLoss

torch.manual_seed(0)
dev = os.environ.get("DEV", "cuda")
N, H, V = 64, 128, 1000
h = torch.randn(N, H, device=dev)
w = torch.randn(V, H, device=dev) / H**0.5
t = torch.randint(0, V, (N,), device=dev)
FIRST, SECOND = 65536.0, 0.5 * 65536.0


def twice(loss_of, *leaves):
    """(first call's gradients read after the second, second call's gradients, or its error)."""
    leaves = [x.detach().clone().requires_grad_() for x in leaves]
    loss = loss_of(*leaves)
    loss.backward(torch.tensor(FIRST, device=dev), retain_graph=True)
    first = [x.grad for x in leaves]
    for x in leaves:
        x.grad = None
    try:
        loss.backward(torch.tensor(SECOND, device=dev))
        second = [x.grad.clone() for x in leaves]
    except RuntimeError as exc:
        second = f"refused: {str(exc).splitlines()[0]}"
    return [g.clone() for g in first], second


def report(name, got, want):
    (f_got, s_got), (f_want, s_want) = got, want
    first = max(float((a - b).norm() / b.norm()) for a, b in zip(f_got, f_want, strict=True))
    if isinstance(s_got, str):
        print(f"{name}: first call's gradients off by {first:.2e}; second call {s_got}")
        return
    second = max(float((a - b).norm() / b.norm()) for a, b in zip(s_got, s_want, strict=True))
    print(f"{name}: first call's gradients off by {first:.2e}; second call's off by {second:.2e} (relative)")


x = h @ w.T
report("LigerCrossEntropyLoss", twice(lambda x: LigerCrossEntropyLoss()(x, t), x),
       twice(lambda x: F.cross_entropy(x, t), x))  # fmt: skip
report("LigerFusedLinearCrossEntropyLoss", twice(lambda h, w: LigerFusedLinearCrossEntropyLoss()(w, h, t), h, w),
       twice(lambda h, w: F.cross_entropy(h @ w.T, t), h, w))  # fmt: skip

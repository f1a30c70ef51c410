"""QuACK 0.6.5's cross entropy (`quack.cross_entropy.cross_entropy`, CuTe DSL; SM90 or newer) on
float32 logits of large magnitude and spread (40 * randn + 100: a nearly one-hot softmax), with a
per-row upstream gradient (reduction "none"): its logits' gradient against the float64 one, beside
PyTorch's float32 `F.cross_entropy` on the same logits.

Reported by `ligerbench verify --kernel ce --preset quick --device cuda` on an H200 (2026-11-28,
results/runs/verify-ce-quick-peers-h200): at N=16, V=1000 its gradient was 5.42e-06 off (normwise,
relative) where PyTorch's float32 textbook form was 2.3e-06 off and the harness allows about 2x
that (4.83e-06). The same inputs at normal scale (randn) pass.

    pip install --target <dir>/site-packages quack-kernels==0.6.5 ...   (the install: suites/peers/quack.py)
    PYTHONPATH=<dir>/site-packages:<dir>/site-packages/nvidia_cutlass_dsl/dsl_packages \
        python docs/repro/quack_cross_entropy_fp32_large_logits.py      # needs a CUDA GPU (SM90+)
"""

import torch
import torch.nn.functional as F
from quack.cross_entropy import cross_entropy


def rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


torch.manual_seed(0)
for n, v in ((16, 1000), (4096, 1000), (4096, 32000)):
    for scale, shift in ((1.0, 0.0), (40.0, 100.0)):
        logits = scale * torch.randn(n, v, device="cuda") + shift
        target = torch.randint(0, v, (n,), device="cuda")
        up = torch.randn(n, device="cuda")
        truth = logits.double().requires_grad_(True)
        (F.cross_entropy(truth, target, reduction="none") * up.double()).sum().backward()
        grads = {}
        for name, fn in (("quack", cross_entropy), ("torch fp32", F.cross_entropy)):
            x = logits.clone().requires_grad_(True)
            (fn(x, target, reduction="none") * up).sum().backward()
            grads[name] = rel(x.grad, truth.grad)
        print(
            f"N={n} V={v} logits {scale:g}*randn+{shift:g}: gradient relative error quack {grads['quack']:.3g}, "
            f"torch fp32 {grads['torch fp32']:.3g} ({grads['quack'] / grads['torch fp32']:.2f}x)"
        )

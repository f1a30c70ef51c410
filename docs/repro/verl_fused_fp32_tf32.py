"""verl 0.9.1's fused `linear_cross_entropy` (Triton; CUDA only) on float32 inputs is as precise
as a TF32 product, not a float32 one: its kernels call `tl.dot` without `input_precision`, and
Triton's default for float32 operands is TF32 (10-bit mantissas). PyTorch's own float32 matmul
is full float32 unless a caller opts in (`torch.backends.cuda.matmul.allow_tf32`). Seen in
`ligerbench verify --kernel flp --preset quick --device cuda` (case n24, H=128, V=500, fp32):
log-probs 1.7e-4 off where float32 gives 4e-7. With TRITON_F32_DEFAULT=ieee (Triton's switch for
that default) the same call lands at float32's error, which names the cause.

    pip install --no-deps verl==0.9.1 && pip install tensordict==0.10.0
    python docs/repro/verl_fused_fp32_tf32.py      # needs a CUDA GPU; runs itself again under ieee
"""

import importlib
import importlib.metadata
import os
import subprocess
import sys
import types
from pathlib import Path

import torch

# verl's package __init__ imports its trainer (Ray and more): load the kernel's modules alone
root = Path(str(importlib.metadata.distribution("verl").locate_file(""))) / "verl"
for name, folder in (("verl", root), ("verl.utils", root / "utils")):
    sys.modules.setdefault(name, types.ModuleType(name)).__path__ = [str(folder)]
fused = importlib.import_module("verl.utils.kernel.linear_cross_entropy")


def rel(got: torch.Tensor, truth: torch.Tensor) -> float:
    return ((got.double() - truth).abs().max() / truth.abs().max()).item()


torch.manual_seed(0)
mode = os.environ.get("TRITON_F32_DEFAULT", "Triton's default")
for n, h, v in ((24, 128, 500), (4096, 1024, 32000)):
    hidden = torch.randn(n, h, device="cuda")
    weight = torch.randn(v, h, device="cuda") * h**-0.5
    target = torch.randint(0, v, (n,), device="cuda")
    logp, entropy = fused.linear_cross_entropy(hidden, weight, target, 1.0, "none")
    truth = torch.log_softmax(hidden.double() @ weight.double().t(), -1)
    ref_logp = truth.gather(-1, target[:, None]).squeeze(-1)
    ref_entropy = -(truth.exp() * truth).sum(-1)
    line = f"n={n} H={h} V={v}, tl.dot float32 precision: {mode}: verl logp {rel(logp, ref_logp):.2e}, "
    line += f"entropy {rel(entropy, ref_entropy):.2e}"
    if "TRITON_F32_DEFAULT" not in os.environ:
        for tf32 in (False, True):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            lp = torch.log_softmax(hidden @ weight.t(), -1).gather(-1, target[:, None]).squeeze(-1)
            line += f"; PyTorch float32 ({'TF32' if tf32 else 'full'} matmul) logp {rel(lp, ref_logp):.2e}"
        torch.backends.cuda.matmul.allow_tf32 = False
    print(line)

if "TRITON_F32_DEFAULT" not in os.environ:  # the same calls with Triton's float32 dots in IEEE float32
    subprocess.run([sys.executable, __file__], env={**os.environ, "TRITON_F32_DEFAULT": "ieee"}, check=True)

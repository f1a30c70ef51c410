"""verl 0.9.1's fused `linear_cross_entropy` (Triton; CUDA only) fails to compile for a single
token (hidden [1, H]): triton.CompilationError in its forward kernel. Seen in `ligerbench verify
--kernel flp --preset full --provider verl_fused` (case n1, H=1024, V=128256, bf16) on an H200.

    pip install --no-deps verl==0.9.1 && pip install tensordict==0.10.0
    python docs/repro/verl_fused_one_token.py      # needs a CUDA GPU
"""

import importlib
import importlib.metadata
import sys
import types
from pathlib import Path

import torch

root = Path(str(importlib.metadata.distribution("verl").locate_file(""))) / "verl"
for name, folder in (("verl", root), ("verl.utils", root / "utils")):
    sys.modules.setdefault(name, types.ModuleType(name)).__path__ = [str(folder)]
fused = importlib.import_module("verl.utils.kernel.linear_cross_entropy")

torch.manual_seed(0)
h, v = 1024, 128256
weight = (torch.randn(v, h, device="cuda") * h**-0.5).bfloat16()
for n in (2, 1):
    hidden = torch.randn(n, h, device="cuda").bfloat16()
    target = torch.randint(0, v, (n,), device="cuda")
    try:
        logp, entropy = fused.linear_cross_entropy(hidden, weight, target, 1.0, "none")
        ref = torch.log_softmax(hidden.double() @ weight.double().t(), -1).gather(-1, target[:, None]).squeeze(-1)
        print(f"n={n}: ok, log-prob error {(logp.double() - ref).abs().max().item():.3e}")
    except Exception as exc:  # the failure is what this script shows
        print(f"n={n}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")

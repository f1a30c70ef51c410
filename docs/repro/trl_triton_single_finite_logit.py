"""TRL 1.16.0's Triton log-prob + entropy kernel (`trl.kernels.selective_log_softmax_and_entropy`,
what `trl.trainer.utils.selective_log_softmax_and_entropy` runs on CUDA) on rows a sampler has
masked: where the row's first 1024 columns (its block) are all -inf, the log-prob is NaN, where
`logits.log_softmax(-1).gather(...)` (the form TRL documents its PyTorch path as equivalent to)
gives a finite number. The row's running max starts at -inf and stays there through that block:
exp(-inf - -inf) is NaN. Rows whose first block holds a finite logit come out right.

    pip install trl==1.16.0 torch
    python docs/repro/trl_triton_single_finite_logit.py   # a GPU, or CPU through Triton's interpreter
"""

import os

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton decorates TRL's kernel
from trl.kernels import selective_log_softmax_and_entropy  # noqa: E402

torch.manual_seed(0)
n, v = 2, 8192
logits = torch.randn(n, v, device=device)
cases = {}
for col in (7, 5000):  # one finite logit, the target: inside the first block, then past it
    x = torch.full_like(logits, float("-inf"))
    x[:, col] = logits[:, col]
    cases[f"one finite logit at column {col}"] = (x, col)
x = logits.clone()
x[:, :1024] = float("-inf")  # a banned run over the first block, every other class finite
cases["columns 0-1023 banned"] = (x, 5000)
cases["plain"] = (logits, 5000)
for name, (x, col) in cases.items():
    target = torch.full((n,), col, device=device)
    logp, _ = selective_log_softmax_and_entropy(x, target)
    truth = torch.log_softmax(x.double(), -1)[:, col]
    print(f"{name}: TRL {[round(t, 6) for t in logp.tolist()]}, log_softmax {[round(t, 6) for t in truth.tolist()]}")

"""Liger-Kernel 0.8.5 (docs/peers.md, "Every failing check, classified"): cross entropy with
reduction="mean" over a batch whose targets are all ignore_index returns 0, where
torch.nn.functional.cross_entropy, which Liger's cross entropy is meant to match, returns NaN
(0 / 0). A step of only padding then trains on a loss of 0 instead of flagging it.

    pip install liger-kernel==0.8.5
    python docs/repro/liger_ce_all_ignored_mean.py      # on a GPU, or on CPU through Triton's interpreter
"""

import os

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton decorates Liger's kernels
from liger_kernel.transformers.functional import liger_cross_entropy  # noqa: E402

torch.manual_seed(0)
logits = torch.randn(8, 64, device=device)
target = torch.full((8,), -100, device=device)
print("torch.nn.functional.cross_entropy, every target ignored:",
      torch.nn.functional.cross_entropy(logits, target, reduction="mean").item())  # fmt: skip
print("liger_cross_entropy, every target ignored:             ",
      liger_cross_entropy(logits.clone(), target, reduction="mean").item())  # fmt: skip

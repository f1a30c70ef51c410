"""Choosing where kernels run. Triton compiles for GPUs only; on CPU our kernels run through
Triton's interpreter, which has to be chosen before `triton.jit` decorates them, i.e. before
`kernels` is first imported. So commands call `prepare()` before touching any provider."""

from __future__ import annotations

import os
import sys

import torch

DEVICE_CHOICES = ("auto", "cpu", "cuda")


def resolve(choice: str) -> torch.device:
    if choice not in DEVICE_CHOICES:
        raise ValueError(f"device must be one of {DEVICE_CHOICES}, got {choice!r}")
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if choice == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda was asked for, but torch sees no CUDA device")
    return torch.device(choice)


def prepare(device: torch.device) -> str:
    """Select the interpreter for CPU runs; returns 'interpreter' or 'compiled'."""
    want = "1" if device.type == "cpu" else "0"
    if "kernels.cross_entropy" in sys.modules and os.environ.get("TRITON_INTERPRET", "0") != want:
        raise RuntimeError(
            "the kernels were already imported for the other Triton mode; run CPU and GPU "
            "verification in separate processes"
        )
    os.environ["TRITON_INTERPRET"] = want
    return "interpreter" if want == "1" else "compiled"

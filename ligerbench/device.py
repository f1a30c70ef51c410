"""Choosing where kernels run. On CPU our Triton kernels run through Triton's interpreter; the
mode is decided by `ligerbench.kernels.triton_mode` (the one place), which commands call through
`prepare()` before they import any provider."""

from __future__ import annotations

import torch

from ligerbench.kernels import triton_mode

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
    """Select the interpreter for CPU runs, compiled kernels for CUDA; returns the mode."""
    return triton_mode.decide(interpret=device.type == "cpu")

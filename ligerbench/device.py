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
    """Select the interpreter for CPU runs, compiled kernels for CUDA; returns the mode. On CUDA,
    also spare the process inductor's CPU vector-ISA probe (_no_cpu_isa_probe)."""
    if device.type == "cuda":
        _no_cpu_isa_probe()
    return triton_mode.decide(interpret=device.type == "cpu")


def _no_cpu_isa_probe() -> None:
    """On a GPU run, inductor's C++ kernels are scalar glue (a float argument a compiled graph
    holds as a 0-d CPU tensor, converted before the launch: Liger's compiled GRPO chunks). The
    first one sends the process through inductor's check of the CPU's vector instructions: ten
    test builds, each loaded by a new Python that imports torch, ~40 s on an H100 (a cProfile of
    grpo's warm quick verify: kernels/NOTES.md, "Compile time"). Such a
    kernel is built without vector instructions instead (the same values: a 0-d conversion has
    nothing to vectorize). A value the user set (TORCHINDUCTOR_VEC_ISA_OK) is kept; CPU runs keep
    the probe, where compiled code does the math."""
    import torch._inductor.config as inductor_config

    if inductor_config.cpp.vec_isa_ok is None:
        inductor_config.cpp.vec_isa_ok = False

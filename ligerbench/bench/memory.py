"""Memory of one call: peak and extra over the inputs, in MiB, gradients included.

    extra = max_memory_allocated during the call - memory_allocated just before it
    peak  = bytes of the inputs + extra

`extra` is what a training step pays for the loss on top of the inputs it already holds:
scratch, saved activations, and the gradient outputs (they are still alive when the peak is
read). A provider that writes the gradient into its input buffer (Liger, ours_inplace) shows
less extra for that reason, which is the point of doing so. Only PyTorch's CUDA caching
allocator is counted: memory a library allocates outside it would be missed. On CPU there is
no such counter and both are NaN.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

MIB = 1024 * 1024


@dataclass(frozen=True)
class Memory:
    peak_mib: float
    extra_mib: float
    inputs_mib: float


def tensor_bytes(*tensors: torch.Tensor | None) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def measure(
    fn: Callable[[], object], *, device: torch.device, input_bytes: int, setup: Callable[[], None] = lambda: None
) -> Memory:
    """Run setup() then fn() once and read the allocator's peak. `fn` should leave its outputs
    (gradients) alive until it returns; whatever it returns is kept until the peak is read."""
    inputs_mib = input_bytes / MIB
    if device.type != "cuda":
        setup()
        fn()
        return Memory(peak_mib=math.nan, extra_mib=math.nan, inputs_mib=inputs_mib)
    setup()
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    kept = fn()
    torch.cuda.synchronize(device)
    extra = (torch.cuda.max_memory_allocated(device) - before) / MIB
    del kept
    return Memory(peak_mib=inputs_mib + extra, extra_mib=extra, inputs_mib=inputs_mib)

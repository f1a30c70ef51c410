"""Triton loss kernels. They import nothing from the ligerbench harness.

Triton compiles for GPUs only; on a machine without CUDA the kernels can still run through
Triton's interpreter, which must be chosen before `triton.jit` decorates them. So when no GPU
is present and the caller has not decided, we choose the interpreter here: otherwise importing
the kernels on a CPU-only machine would leave them unusable.
"""

import os

if "TRITON_INTERPRET" not in os.environ:
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"

"""Known defects of Triton's interpreter (TRITON_INTERPRET=1, how Triton kernels run on CPU
tensors), each found by running a tiny kernel: a kernel that is right on a GPU can fail on CPU
because of these, and a kernel author should know which ones this Triton has before trusting a
CPU failure. Our kernels work around each (kernels/triton_math.py: rounding by hand, softcap
without libdevice; arithmetic in float32).

    from ligerbench.kernels.interpreter_defects import found
    found()   # {"bf16_arithmetic": "...", ...} for this Triton, {} when compiled or none show

Measured with Triton 3.9.0 on CPU: bf16 + bf16 gave 1.3e38, NaN and -inf for 2.0, 3.25, -2.25;
a float32 -> bf16 cast truncates (1.0078 -> 1.0, -2.71828 -> -2.703 instead of -2.719);
libdevice.tanh is a stub (the call fails: "cannot convert None ... to tensor").
"""

from __future__ import annotations

import functools

import torch

from .triton_mode import current, decide

decide(lock=True)  # before triton.jit decorates anything below

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language.extra import libdevice  # noqa: E402

DEFECTS = {
    "bf16_arithmetic": "arithmetic on two bfloat16 values gives garbage (1e38, NaN, inf): upcast to float32 first",
    "bf16_cast_truncates": "a float32 -> bfloat16 cast truncates instead of rounding to nearest",
    "libdevice_tanh": "libdevice.tanh is a stub: a kernel calling it fails (write tanh from exp)",
}


@triton.jit
def _add(x_ptr, y_ptr, o_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(o_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs))


@triton.jit
def _cast(x_ptr, o_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(o_ptr + offs, tl.load(x_ptr + offs).to(tl.bfloat16))


@triton.jit
def _tanh(x_ptr, o_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(o_ptr + offs, libdevice.tanh(tl.load(x_ptr + offs)))


@functools.cache
def found() -> dict[str, str]:
    """The defects this process's Triton interpreter shows (name -> what it does); {} when our
    kernels run compiled."""
    if current() != "interpreter":
        return {}
    out = {}
    x = torch.tensor([1.5, 2.25, -3.0, 0.125], dtype=torch.bfloat16)
    y = torch.tensor([0.5, 1.0, 0.75, 0.25], dtype=torch.bfloat16)
    o = torch.empty_like(x)
    _add[(1,)](x, y, o, N=4)
    if not torch.equal(o, x + y):
        out["bf16_arithmetic"] = DEFECTS["bf16_arithmetic"]
    f = torch.tensor([1.0 + 2**-8 + 2**-10, -2.71828, 1 / 3, 3.0])
    o = torch.empty(4, dtype=torch.bfloat16)
    _cast[(1,)](f, o, N=4)
    if not torch.equal(o, f.to(torch.bfloat16)):
        out["bf16_cast_truncates"] = DEFECTS["bf16_cast_truncates"]
    o = torch.full((4,), float("nan"))
    try:
        _tanh[(1,)](f, o, N=4)
        ok = torch.allclose(o, torch.tanh(f), rtol=1e-6, atol=0)
    except Exception:  # noqa: BLE001 -- the stub fails in the interpreter's own ways
        ok = False
    if not ok:
        out["libdevice_tanh"] = DEFECTS["libdevice_tanh"]
    return out

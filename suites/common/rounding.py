"""The one rounding the careful yardsticks of the fused-head kernels (`flce`, `flp` and through
them `vp_flce`, `vp_flp`, `grpo`) add inside backward: the logits' gradient, once, to the case's
16-bit dtype (docs/bugs.md, bug 10).

A fused head forms grad_hidden = dlogits @ W and grad_weight = dlogits^T @ hidden as products
whose operands are 16-bit for 16-bit inputs (that is what tensor cores take; so does PyTorch as
users write it: `(hidden @ weight.T).float()` hands its backward an fp16 or bf16 gradient). So
any such kernel rounds dlogits once to the dtype, however carefully it forms it in float32. A
yardstick that kept dlogits in float32 asks for less error than any of them can have:
- far from 0 (logits shifted by a constant) the hidden gradient is a sum that cancels, and the
  rounding of its terms shows (flce);
- in fp16, dlogits below 2**-14 (6.1e-5) is subnormal, with an absolute spacing of 2**-24: at
  a 128K vocabulary an entropy-only upstream makes every element ~1e-5 to 1e-7, rounded to a
  few significant bits. Our flp and an independent fused kernel both measured 6.7e-3 on the
  weight's gradient there, against a limit of 1.1e-3 from a float32-dlogits yardstick (docs/bugs.md,
  bug 10).
The logits themselves stay float32 and unrounded in the careful yardstick: under `--strict` a
kernel that rounds THEM before the softmax (Liger #1432) still fails.

The model code's form (`model_logits`) is the other rounding: the logits as a model forms them,
`lm_head(h)` in the inputs' 16-bit dtype (the product rounded once: Hugging Face's models,
`F.cross_entropy(F.linear(h, W))`), then `.float()` before the loss, whose backward rounds the
logits' gradient back to the dtype. The default verdict takes it as one more textbook form of
every kernel that takes hidden states (a provider with the model code's semantics is not wrong
by default); `--strict` says how far from float32 logits it lands. A rounding inside the loss's
math (a softmax or 1 - p formed in 16 bits: docs/bugs.md, bug 6) is no form of the model code's.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from ligerbench.problems import MODEL_CODE

SIXTEEN_BITS = (torch.float16, torch.bfloat16)


class _HandOn(torch.autograd.Function):
    """Identity forward; backward hands `fn(grad)` on instead of the gradient."""

    @staticmethod
    def forward(ctx, x, fn):
        ctx.fn = fn
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return ctx.fn(grad), None


def backward_through(x: torch.Tensor, fn) -> torch.Tensor:
    """`x`, whose gradient backward passes through `fn` on its way on: a rounding here, a wrong
    upstream in a planted bug (suites/common/input_mutants.py), a peer's group sum (suites/peers/)."""
    return _HandOn.apply(x, fn)


def grad_rounded_to(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`x`, whose gradient backward rounds once to `dtype` (a no-op where that is the gradient's own
    dtype) and hands on in the gradient's dtype."""
    return backward_through(x, lambda grad: grad.to(dtype).to(grad.dtype))


def model_logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The logits as model code forms them (module docstring): `F.linear` in the inputs' dtype,
    then `.float()`."""
    return F.linear(hidden, weight, bias).float()


def held_as_float32(out):
    """An Outcome (a dataclass with `values`) of the model code's form run on the case's own
    16-bit inputs, every value as float32 (exact: a bf16 gradient is one already), named as that
    form."""
    values = {k: None if v is None else v.float() for k, v in out.values.items()}
    return dataclasses.replace(out, values=values, form=MODEL_CODE)

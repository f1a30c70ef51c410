"""Argument checks shared by the ops over a linear head: hidden [.., H], weight [V, H] and an
optional bias [V], multiplied into float32 logits (kernels/fp32_products.py)."""

from __future__ import annotations

import torch


def check_head_dtypes(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    """hidden in a float dtype the kernels take, weight and bias in that same dtype, the bias
    one value per row of the weight."""
    if hidden.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise TypeError(f"hidden must be float32, bfloat16 or float16, got {hidden.dtype}")
    if weight.dtype != hidden.dtype or (bias is not None and bias.dtype != hidden.dtype):
        got = (hidden.dtype, weight.dtype, None if bias is None else bias.dtype)
        raise TypeError(f"hidden, weight and bias must share one dtype, got {got}")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"bias must have shape ({weight.shape[0]},), got {tuple(bias.shape)}")

"""What every kernel spec shares: the Outcome of a provider (or the reference) on one case,
and the bitwise comparison that tells whether an input was written."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Outcome:
    """What a provider (or the reference) produced for one case."""

    values: dict[str, torch.Tensor]  # quantity name -> tensor ("loss", "z_loss", "grad_logits", ...)
    input_mutated: bool = False


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaN equals itself), for telling whether a tensor was written."""
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return torch.equal(a.contiguous().view(as_int), b.contiguous().view(as_int))

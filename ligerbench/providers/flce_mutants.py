"""Planted bugs in the `flce` kernel, registered like any provider (see providers/mutants.py).

Run only when named (`--kernel flce --provider mutant_...`); a suite that cannot make verify fail on
one of these is not checking what it claims.
"""

from __future__ import annotations

import torch

from ligerbench.registry import Provider

_CHUNK = 5  # as providers/flce.py SMALL_CHUNK_TOKENS: no grid token count is a multiple


def _drops_last_partial_chunk(hidden, weight, target, *, token_weight, **opts):
    """A chunk loop written as `range(0, N - chunk + 1, chunk)`: the last partial chunk is never
    visited, so its tokens add nothing to the loss or any gradient, while the mean's denominator
    (computed before the loop) still counts them. Emulated on our kernel by giving those tokens
    a token weight of 0, which is exactly 'never visited' with zero-initialised outputs."""
    from ligerbench.kernels.fused_linear_cross_entropy import fused_linear_cross_entropy

    n = target.numel()
    visited = (torch.arange(n, device=target.device) < (n // _CHUNK) * _CHUNK).reshape(target.shape)
    tw = visited.float() if token_weight is None else token_weight * visited
    return fused_linear_cross_entropy(
        hidden, weight, target, token_weight=tw, chunk_tokens=_CHUNK, return_z_loss=True, **opts
    )


PROVIDERS = (
    Provider(
        name="mutant_drops_last_chunk",
        kernel="flce",
        description="chunk loop that skips the last partial chunk of tokens",
        load=lambda: _drops_last_partial_chunk,
        mutant=True,
        # selftest's slice (ligerbench/selftest.py): no token ignored, so the tokens the loop skips show
        targets=({"dtype": "fp32", "ignore_pattern": "none", "option": "plain", "logits": "normal"},),
    ),
)

"""Logits as a sampler leaves them: -inf scattered across the vocabulary, and the log-probs and
entropy a trainer recomputes on those rows. Today's other -inf are a padded tail only.

Rows take turns (row index mod 5):

    0  top-k: the 20 largest logits kept, every other one -inf
    1  top-p: the smallest set of largest logits holding 90% of the probability kept
    2  a single finite logit (the target's, or the row's largest where the row has no target)
    3  banned tokens (10% of the vocabulary, scattered) and a wholly -inf run in the middle of the
       row, [V/4, 3V/4): whole vocabulary blocks of a kernel's loop see nothing but -inf there
    4  unmasked

A sampler only draws finite tokens: every counted target's logit stays finite. The entropy's
convention on such rows is 0 * -inf = 0 (a masked class has p = 0 and adds nothing).
"""

from __future__ import annotations

import torch

KIND = "sampler_masked"  # the value of a logits axis that draws them
TOP_K, TOP_P, BANNED = 20, 0.9, 0.1


def masked(x: torch.Tensor, target: torch.Tensor, ignore_index: int, gen: torch.Generator) -> torch.Tensor:
    """float32 logits [..., V] with the masks above, given targets [...] or [..., K]."""
    v = x.shape[-1]
    rows = x.reshape(-1, v)
    tgt = target.reshape(rows.shape[0], -1)
    keep = torch.ones_like(rows, dtype=torch.bool)
    kind = torch.arange(rows.shape[0]) % 5
    order = rows.argsort(dim=-1, descending=True)
    rank = torch.empty_like(order).scatter_(-1, order, torch.arange(v).expand_as(order))
    keep[kind == 0] = rank[kind == 0] < TOP_K
    p_sorted = torch.softmax(rows, -1).gather(-1, order)
    before = p_sorted.cumsum(-1) - p_sorted  # mass of the larger logits: kept while it is < TOP_P
    in_p = torch.zeros_like(keep).scatter_(-1, order, before < TOP_P)
    keep[kind == 1] = in_p[kind == 1]
    keep[kind == 2] = rank[kind == 2] == 0
    banned = torch.rand(rows.shape, generator=gen) < BANNED
    banned[:, v // 4 : (3 * v) // 4] = True
    keep[kind == 3] = ~banned[kind == 3]
    counted = tgt != ignore_index
    has_target = counted.any(-1)
    single = (kind == 2) & has_target
    keep[single] = False  # the single finite logit is the target's
    r, c = counted.nonzero(as_tuple=True)
    keep[r, tgt[r, c]] = True
    return torch.where(keep, rows, float("-inf")).reshape(x.shape)

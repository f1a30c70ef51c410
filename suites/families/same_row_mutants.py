"""Planted bugs that only the determinism and batch-invariance suites (suites/common/same_row.py)
can see: each gives answers within every tolerance, so correctness passes them, but a row's bits
change with the batch around it or from one call to the next.

    tile_from_rows     the row's sum of exponentials taken a tile of columns at a time, the tile
                       chosen from the number of rows (a launch heuristic keyed on N): the same
                       row rounds one way alone and another way in a large batch
    call_order_sum     the weight's gradient summed over chunks of rows in an order that
                       changes from one call to the next, as an atomic add's order does
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

from ligerbench.suites.families.log_prob import at_targets

# the log-prob kernels' (lp, flp) determinism and batch-invariance case, but for its shape: the
# options of its semantics (suites/lp/__init__.py and suites/flp/__init__.py, SAME_ROW_CASES)
SAME_ROW_SEMANTICS = {"temperature": 1.0, "softcap": 0.0, "logit_scale": 1.0, "targets": 1, "upstream": "both",
                      "ignore_pattern": "random", "logits": "normal", "layout": "2d"}  # fmt: skip
SMALL_TILE, LARGE_TILE, LARGE_FROM = 32, 128, 16  # tile_from_rows: columns a tile, and the rows that pick the large one


def tile_from_rows():
    """fn(logits, target, **options) -> (logp, entropy): the log-prob semantics in float32 with
    the softmax's sum over columns taken tile by tile, the tile's width picked from the rows."""

    def fn(logits, target, *, temperature=1.0, softcap=None, logit_scale=1.0, ignore_index=-100):
        x = logits.float()
        rows = x.numel() // max(x.shape[-1], 1)
        tile = LARGE_TILE if rows >= LARGE_FROM else SMALL_TILE  # the planted bug: a tile chosen from N
        z = logit_scale * x
        if softcap:
            z = torch.where(z == float("-inf"), z, softcap * torch.tanh(z / softcap))
        z = z / temperature
        m, at = z.max(-1, keepdim=True)
        zm = z - m
        e = torch.exp(zm).scatter(-1, at, 0.0)
        tiles = F.pad(e, (0, (-e.shape[-1]) % tile)).unflatten(-1, (-1, tile)).sum(-1)
        log_sm = zm - torch.log1p(tiles.sum(-1, keepdim=True))
        p = log_sm.exp()
        entropy = -(p * torch.where(p > 0, log_sm, 0.0)).sum(-1)
        return at_targets(log_sm, entropy, target, ignore_index)

    return fn


_CALLS = itertools.count()  # every call of every load: the order moves between any two calls


class _Fan(torch.autograd.Function):
    """One tensor handed to several chunks; backward sums the chunks' gradients in `order`."""

    @staticmethod
    def forward(ctx, t, copies: int, order: tuple[int, ...]):
        ctx.order = order
        return tuple(t.view_as(t) for _ in range(copies))

    @staticmethod
    def backward(ctx, *grads):
        total = None
        for i in ctx.order:  # the planted bug: the order of this sum moves from call to call
            if grads[i] is not None:
                total = grads[i] if total is None else total + grads[i]
        return total, None, None


def call_order_sum(fused, pieces: int = 3):
    """`fused(hidden, weight, target, **options)` over `pieces` chunks of rows, the weight's (and
    bias's) gradient summed over the chunks in forward order on one call and in reverse on the
    next, as an atomic add's order changes from launch to launch."""

    def fn(hidden, weight, target, *, bias=None, **options):
        rows = hidden.reshape(-1, hidden.shape[-1])
        tgt = target.reshape(rows.shape[0], *target.shape[hidden.dim() - 1 :])
        bounds = torch.linspace(0, rows.shape[0], pieces + 1).round().long().tolist()
        spans = [(a, b) for a, b in itertools.pairwise(bounds) if b > a]
        order = tuple(range(len(spans)))
        order = order if next(_CALLS) % 2 == 0 else order[::-1]
        weights = _Fan.apply(weight, len(spans), order)
        biases = _Fan.apply(bias, len(spans), order) if bias is not None else (None,) * len(spans)
        outs = [
            fused(rows[a:b], w, tgt[a:b], bias=c, **options)
            for (a, b), w, c in zip(spans, weights, biases, strict=True)
        ]
        logp = torch.cat([o[0] for o in outs]).reshape(target.shape)
        entropy = torch.cat([o[1] for o in outs]).reshape(hidden.shape[:-1])
        return logp, entropy

    return fn

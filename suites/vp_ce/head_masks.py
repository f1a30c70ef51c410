"""A sampler's mask as a fused lm_head takes it: -inf in the head's bias (vp_flp and vp_flce).

The fused kernels never hold the logits, so a per-row mask (top-k, top-p: each row its own
columns) has no way in; what they take is the bias [V], added to every row's logits. A mask there
is one for every row: banned tokens, a vocabulary restricted to some classes (a logit bias of -inf,
as samplers' `logit_bias` and `bad_words` leave it). Two kinds of logits (a value of the logits
axis), each with a bias drawn as usual and -inf added where masked:

    bias_masked   banned tokens (10% of the vocabulary, scattered), a wholly -inf run in the
                  middle, [V/4, 3V/4) (whole vocabulary blocks of a kernel's loop see only -inf),
                  and the last rank's whole shard (its local max is -inf on every row: a naive
                  shard softmax forms -inf - -inf = NaN)
    bias_single   a single finite logit, a class of the first rank's shard: every other rank's
                  shard wholly -inf, every row's softmax 1 at that class (logp 0, entropy 0)

A sampler draws only finite tokens: every counted target is moved onto a finite class. The
entropy's convention is 0 * -inf = 0 (a masked class has p = 0 and adds nothing), in the float64
reference and its gradient alike (suites/families/log_prob.py, reference).
"""

from __future__ import annotations

import torch

from ligerbench.suites.vp_ce.spec import shard_bounds

BIAS_MASKED, BIAS_SINGLE = "bias_masked", "bias_single"
KINDS = (BIAS_MASKED, BIAS_SINGLE)
BANNED = 0.1
MEANS = {
    BIAS_MASKED: "a sampler's mask through the head's bias (-inf): banned tokens, a wholly -inf middle run and "
    "the last rank's whole shard; targets on finite classes",
    BIAS_SINGLE: "a bias of -inf everywhere but one class of the first rank's shard: one finite logit, every "
    "other shard wholly -inf; every target that class",
}


def mask(v: int, world: int, kind: str, gen: torch.Generator) -> torch.Tensor:
    """bool [V]: the classes the bias masks."""
    bounds = [b for b in shard_bounds(v, world) if b[1] > b[0]]
    masked = torch.zeros(v, dtype=torch.bool)
    if kind == BIAS_SINGLE:
        keep = int(torch.randint(bounds[0][0], bounds[0][1], (1,), generator=gen))
        masked[:] = True
        masked[keep] = False
        return masked
    if kind != BIAS_MASKED:
        raise ValueError(f"unknown head mask {kind!r}; expected one of {KINDS}")
    masked |= torch.rand(v, generator=gen) < BANNED
    masked[v // 4 : (3 * v) // 4] = True
    if len(bounds) > 1:
        masked[bounds[-1][0] : bounds[-1][1]] = True
    masked[bounds[0][0]] = False  # a class stays finite whatever the draw
    return masked


def masked_bias(bias: torch.Tensor | None, masked: torch.Tensor) -> torch.Tensor:
    """The bias (zeros where the case has none drawn) with -inf where `masked`, in its dtype."""
    base = torch.zeros(masked.shape[0], device=masked.device) if bias is None else bias.detach()
    return base.masked_fill(masked.to(base.device), float("-inf"))


def finite_targets(target: torch.Tensor, ignore_index: int, masked: torch.Tensor) -> torch.Tensor:
    """Every counted target moved onto a finite class (in turn over them); ignored ones stay."""
    finite = (~masked).nonzero().flatten().to(target.device)
    counted = target != ignore_index
    picked = finite[target.clamp(min=0) % finite.numel()]
    return torch.where(counted, picked, target)


def masked_problem(make_problem, case, seed: int, device: torch.device, ignore_index: int | None = None):
    """The fused head's problem of a case whose logits are a mask's kind: `make_problem` of the same
    case with normal logits, its bias masked (in the weight's dtype) and its counted targets moved
    onto finite classes (`ignore_index`: the problem's own when None)."""
    base = make_problem(case.replace(logits="normal"), seed, device)
    masked = mask(case.v, case.world, case.logits, torch.Generator().manual_seed(seed))
    base.bias = masked_bias(base.bias, masked.to(device)).to(dtype=base.weight.dtype, device=device)
    ignore = base.ignore_index if ignore_index is None else ignore_index
    base.target = finite_targets(base.target, ignore, masked)
    return base

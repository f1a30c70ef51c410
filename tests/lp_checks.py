"""Shared by the log-prob tests (tests/test_lp_kernel.py, tests/test_flp_kernel.py): the
semantics in PyTorch (float64 truth, float32 yardstick), the targets and upstream gradients of
the grids, and the one comparison rule.

The rule: a quantity passes when its relative L2 error against the float64 truth is at most

    FACTOR * yardstick_error + FLOOR[dtype of the quantity]

where the yardstick is the same PyTorch semantics run in float32 on the same inputs (the logits
computed in float32 from the unrounded inputs, never rounded to 16 bits: what torch.compile and
a careful kernel do), its 16-bit gradients rounded once at the end. FACTOR = 2 leaves room for
one more rounding than the yardstick makes (our 16-bit gradient of the logits, rounded before
the two gradient matmuls of the fused op), not for a bug: rounding the logits to bf16 before
the softmax gives 4-23% gradient error (Liger #1432), the bugs named in issue 22 more.
FLOOR covers a yardstick that lands (almost) exactly on the truth: a few float32 roundings for
the float32 outputs (logp, entropy and float32 gradients), one output rounding for 16-bit
gradients. logp and entropy are float32 whatever the input dtype, so their rule is tight.
"""

from __future__ import annotations

import torch

from ligerbench import tolerance

FACTOR = 2.0
FLOOR = {torch.float32: 4 * 2.0**-24, torch.bfloat16: 2.0**-9, torch.float16: 2.0**-11}

IGNORE = -100
UPSTREAMS = ("logp", "entropy", "both", "zero_rows")
IGNORE_PATTERNS = ("none", "random", "leading_run", "all")


def reference(x, target, *, temperature=1.0, softcap=None, logit_scale=1.0, ignore_index=IGNORE):
    """The semantics of kernels/log_probs.py in PyTorch, in x's dtype (float64: the truth)."""
    z = logit_scale * x
    if softcap:
        z = torch.where(z == float("-inf"), z, softcap * torch.tanh(z / softcap))
    z = z / temperature
    # log_softmax with log s = log1p(sum over all but one copy of the max): confident rows keep
    # their digits (torch.log_softmax rounds log(1 + 1e-19) to 0 even in float64)
    m, at = z.max(-1, keepdim=True)
    zm = z - m
    logp_all = zm - torch.log1p(torch.exp(zm).scatter(-1, at, 0.0).sum(-1, keepdim=True))
    p = logp_all.exp()
    # 0 log 0 = 0, with a zero gradient (a where() after the product would pass 0 * -inf = NaN back)
    entropy = -(p * torch.where(p > 0, logp_all, 0.0)).sum(-1)
    one = target.dim() == x.dim() - 1
    t = target.unsqueeze(-1) if one else target
    counted = t != ignore_index
    logp = torch.where(counted, logp_all.gather(-1, torch.where(counted, t, 0)), 0.0)
    entropy = torch.where(counted.any(-1), entropy, 0.0)
    return (logp.squeeze(-1) if one else logp), entropy


def make_target(rows: tuple[int, ...], k: int | None, v: int, pattern: str, gen) -> torch.Tensor:
    """Targets [*rows] (k None) or [*rows, k] with an ignore pattern:
    none; random (30% of the entries, and all of row 1: with K targets both a partly and a
    fully ignored row); leading_run (the first half of the rows: a prompt); all."""
    shape = rows + ((k,) if k else (1,))
    t = torch.randint(0, v, shape, generator=gen)
    flat = t.view(-1, shape[-1])
    if pattern == "random":
        flat[torch.rand(flat.shape, generator=gen) < 0.3] = IGNORE
        flat[min(1, flat.shape[0] - 1)] = IGNORE
    elif pattern == "leading_run":
        flat[: flat.shape[0] // 2 + 1] = IGNORE
    elif pattern == "all":
        flat[:] = IGNORE
    elif pattern != "none":
        raise ValueError(pattern)
    return t if k else t.squeeze(-1)


def make_upstream(kind: str, logp_shape, entropy_shape, gen):
    """(dlogp or None, dentropy or None): one output, the other, both, or both with some rows
    exactly zero (rows a trainer masks out: they must give exactly nothing, never NaN)."""
    dl = torch.randn(logp_shape, generator=gen)
    de = torch.randn(entropy_shape, generator=gen) * 0.5
    if kind == "logp":
        return dl, None
    if kind == "entropy":
        return None, de
    if kind == "zero_rows":
        rows = torch.rand(entropy_shape, generator=gen) < 0.5
        dl[rows] = 0.0
        de[rows] = 0.0
    elif kind != "both":
        raise ValueError(kind)
    return dl, de


def outputs_and_grads(call, inputs, upstream):
    """(logp, entropy, [gradient of each input, None for None inputs]) of `call(*leaves)`, the
    leaves being fresh copies of `inputs` (a layout, e.g. a transposed view, is made by the call
    itself: a copy of a strided view would come out dense)."""
    leaves = [None if t is None else t.detach().clone().requires_grad_(True) for t in inputs]
    logp, entropy = call(*leaves)
    dl, de = upstream
    outs, ups = [], []
    if dl is not None:
        outs.append(logp)
        ups.append(dl.to(device=logp.device, dtype=logp.dtype))
    if de is not None:
        outs.append(entropy)
        ups.append(de.to(device=entropy.device, dtype=entropy.dtype))
    if any(o.requires_grad for o in outs):
        torch.autograd.backward(outs, ups)
    grads = [None if t is None else (t.grad if t.grad is not None else torch.zeros_like(t)) for t in leaves]
    return logp.detach(), entropy.detach(), grads


def assert_within_rule(name: str, got, yard, truth) -> None:
    err = tolerance.rel_error(got, truth)
    limit = FACTOR * tolerance.rel_error(yard, truth) + FLOOR[got.dtype]
    assert got.dtype == yard.dtype, f"{name}: dtype {got.dtype}, yardstick {yard.dtype}"
    assert err <= limit, f"{name}: error {err:.3g} > limit {limit:.3g}"


def check(ours, ref, inputs, upstream, names) -> tuple:
    """Our op against the float64 truth within the rule, outputs and gradients of every input.

    ours(*leaves) -> (logp, entropy); ref(*leaves, dtype) -> the same semantics computed in
    `dtype` from the leaves (float32: the yardstick; float64: the truth). Returns our results."""
    got = outputs_and_grads(ours, inputs, upstream)
    yard = outputs_and_grads(lambda *leaves: ref(*leaves, torch.float32), inputs, upstream)
    as64 = [None if t is None else t.double() for t in inputs]
    truth = outputs_and_grads(lambda *leaves: ref(*leaves, torch.float64), as64, upstream)
    assert got[0].dtype == torch.float32 and got[1].dtype == torch.float32
    assert got[0].shape == truth[0].shape and got[1].shape == truth[1].shape
    assert_within_rule("logp", got[0], yard[0], truth[0])
    assert_within_rule("entropy", got[1], yard[1], truth[1])
    for name, g, y, t in zip(names, got[2], yard[2], truth[2], strict=True):
        if t is not None:
            assert torch.isfinite(g).all(), f"grad {name}: not finite"
            assert_within_rule(f"grad {name}", g, y, t)
    return got

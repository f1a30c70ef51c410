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
the softmax gives 4-23% gradient error (Liger #1432), the bug classes of docs/bugs.md ("Bug classes
in log-probs and entropy") more. FLOOR covers a yardstick that lands (almost) exactly on the truth:
a few float32 roundings for the float32 outputs (logp, entropy and float32 gradients), one output
rounding for 16-bit gradients. logp and entropy are float32 whatever the input dtype, so their rule
is tight.
"""

from __future__ import annotations

import torch

from ligerbench import tolerance
from ligerbench.suites.families.log_prob import IGNORE, make_target, make_upstream, reference  # noqa: F401

FACTOR = 2.0
FLOOR = {torch.float32: 4 * 2.0**-24, torch.bfloat16: 2.0**-9, torch.float16: 2.0**-11}

UPSTREAMS = ("logp", "entropy", "both", "zero_rows")
IGNORE_PATTERNS = ("none", "random", "leading_run", "all")


def over(**axes):
    """pytest.mark.parametrize over each of `axes` (name: values), the last named outermost: the
    option grids the lp and flp kernel tests share."""
    import pytest

    def mark(test):
        for name, values in axes.items():
            test = pytest.mark.parametrize(name, values)(test)
        return test

    return mark


# temperature: sharper than 1 (RL sampling at 0.6), 1 (no scaling), flatter (1.5); softcap: off, and
# a cap the logits (std 2 * 3) reach (Gemma's form with cap 5); logit_scale: 1, and a scale that
# multiplies before the cap (Cohere/Granite-style); k: one target per row, and a teacher's top-3
OPTION_GRID = over(k=[None, 3], logit_scale=[1.0, 3.0], softcap=[None, 5.0], temperature=[0.6, 1.0, 1.5])
# upstream: through logp only, entropy only (its gradient must not be dropped: TRL #6625), both, and
# rows of exact zeros; ignore: none, random entries, a leading run (a prompt), all rows; k: one or 3
# targets (with 3 a row can be partly ignored: it keeps its entropy)
UPSTREAM_GRID = over(k=[None, 3], pattern=IGNORE_PATTERNS, upstream=UPSTREAMS)


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

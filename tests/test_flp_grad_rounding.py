"""docs/bugs.md, bug 10: flp's yardstick must round the logits' gradient once to the 16-bit dtype
before the products, as every kernel with 16-bit product operands does.

On an H200 our flp and an independent fused log-prob kernel both failed
`flp/n2048/v128256/h1024/fp16/t1.5/.../up-entropy/random/normal` on grad_weight with the same
error, 6.7e-3 against a limit of 1.1e-3: with an entropy-only upstream at V=128256 every element of
dlogits is below 2**-14, an fp16 subnormal (absolute spacing 2**-24), and rounding it costs that
much whoever rounds it. Here the same at CPU size: `flat` logits (p ~ 1/V, log p + H ~ 0) give an
entropy gradient of ~1e-6, deep in fp16's subnormals, at V=4096.

The kernel is emulated in PyTorch (`_kernel`): float32 logits from the 16-bit inputs, the
semantics' float32 gradient of them, rounded to the dtype (the operand the products read), the
products in float32 from those operands a vocabulary slice at a time, each result rounded once.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ligerbench.builtin import default_registry
from ligerbench.suites.families import log_prob as semantics
from ligerbench.suites.flp import spec as flp_spec
from ligerbench.suites.flp.axes import case
from ligerbench.tolerance import limit_for, rel_error

GRADS = ("grad_weight", "grad_hidden")
SUBNORMAL = case(n=256, v=4096, h=64, dtype="fp16", temperature=1.5, upstream="entropy", logits="flat")
# where rounding the logits shows in the gradients: a sharpening temperature on confident rows
VISIBLE = [case(n=256, v=4096, h=64, dtype=d, temperature=0.6, upstream="entropy", logits="peaked")
           for d in ("fp16", "bf16")]  # fmt: skip


def _run(c):
    spec = default_registry().kernels["flp"]
    problem = spec.make_problem(c, 0, torch.device("cpu"))
    return spec, problem, spec.reference(problem).values, spec.eager(problem).values


def _kernel(problem, *, round_logits: bool = False, cols: int = 1000):
    """A fused kernel's gradients in PyTorch (module docstring); `round_logits`: the logits rounded
    to the inputs' dtype before the softmax (Liger #1432). Also returns the 16-bit dlogits."""
    dtype = problem.weight.dtype
    h, w = problem.hidden.reshape(-1, problem.hidden.shape[-1]), problem.weight
    x = h.float() @ w.float().t()
    if round_logits:
        x = x.to(dtype).float()
    x.requires_grad_(True)
    _, entropy = semantics.reference(x, problem.target.reshape(h.shape[0]), **problem.options)
    entropy.backward(problem.upstream[1].float().reshape(entropy.shape))
    g = x.grad.to(dtype)
    grad_w = torch.cat([(g[:, c : c + cols].float().t() @ h.float()).to(dtype) for c in range(0, w.shape[0], cols)])
    return {"grad_weight": grad_w, "grad_hidden": (g.float() @ w.float()).to(dtype)}, g


def _float32_dlogits_yardstick(problem):
    """The yardstick before the fix: float32 logits and dlogits, each gradient rounded once."""
    wide = dataclasses.replace(problem, hidden=problem.hidden.float(), weight=problem.weight.float(),
                               upstream=tuple(u if u is None else u.float() for u in problem.upstream))  # fmt: skip
    values = flp_spec.run_flp(flp_spec.flp_semantics, wide).values
    return {q: values[q].to(problem.weight.dtype) for q in GRADS}


def test_the_case_makes_dlogits_fp16_subnormals():
    _, problem, _, _ = _run(SUBNORMAL)
    _, g = _kernel(problem)
    nonzero = g[g != 0].float().abs()
    assert nonzero.numel() > 0.5 * g.numel()
    assert (nonzero < 2.0**-14).float().mean() > 0.99


def test_a_kernel_that_rounds_dlogits_to_fp16_passes():
    _, problem, ref, eager = _run(SUBNORMAL)
    kernel, _ = _kernel(problem)
    old = _float32_dlogits_yardstick(problem)
    for q in GRADS:
        err, limit = rel_error(kernel[q], ref[q]), limit_for(rel_error(eager[q], ref[q]), torch.float16)
        assert err <= limit, f"{q}: {err:.3g} > {limit:.3g}"
    # the yardstick that kept dlogits in float32 failed it on grad_weight (2.5x its limit here)
    err_w = rel_error(kernel["grad_weight"], ref["grad_weight"])
    assert err_w > 2 * limit_for(rel_error(old["grad_weight"], ref["grad_weight"]), torch.float16)


@pytest.mark.interpreter
def test_ours_passes_and_gets_what_the_emulation_gets():
    spec, problem, ref, eager = _run(SUBNORMAL)
    ours = spec.run(default_registry().provider("flp", "ours").load(), problem).values
    kernel, _ = _kernel(problem)
    for q in GRADS:
        err, limit = rel_error(ours[q], ref[q]), limit_for(rel_error(eager[q], ref[q]), torch.float16)
        assert err <= limit, f"{q}: {err:.3g} > {limit:.3g}"
        assert abs(err - rel_error(kernel[q], ref[q])) < 0.02 * err


@pytest.mark.parametrize("c", VISIBLE, ids=lambda c: c.dtype)
def test_a_kernel_that_rounds_the_logits_still_fails(c):
    _, problem, ref, eager = _run(c)
    rounded, _ = _kernel(problem, round_logits=True)
    for q in GRADS:  # 2.8x-3.3x the limit (a careful kernel: 0.3x)
        err, limit = rel_error(rounded[q], ref[q]), limit_for(rel_error(eager[q], ref[q]), problem.weight.dtype)
        assert err > 2 * limit, f"{q}: {err:.3g} <= 2 x {limit:.3g}"

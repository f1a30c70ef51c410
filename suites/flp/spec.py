"""The `flp` kernel as the harness sees it: its inputs, float64 reference, yardstick and call.

x = hidden @ weight.T (+ bias), then kernels/log_probs.py's semantics (suites/families/log_prob.py).
A provider is `fn(hidden, weight, target, *, bias, temperature, softcap, logit_scale,
ignore_index) -> (logp, entropy)`; gradients of hidden, weight and bias through the case's
upstream on logp, entropy or both. The float64 truth forms the logits in float64; the yardstick
forms them in float32 from the same (16-bit) inputs, never rounded (docs/bugs.md, "Bug classes in
log-probs and entropy"), rounds the logits' gradient once to a 16-bit dtype before the products
(suites/common/rounding.py) and each 16-bit gradient once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ligerbench.cases import DTYPES, Case, batch_split, batched, generator_for
from ligerbench.problems import Outcome, as_handed
from ligerbench.suites.common.rounding import SIXTEEN_BITS, grad_rounded_to, held_as_float32, model_logits
from ligerbench.suites.families import log_prob as semantics
from ligerbench.suites.families.log_prob import IGNORE, make_target, make_upstream, run_outputs

SHIFT = -200.0  # "shifted" logits: every logit 200 below zero, through the bias (verl #7439)
GRADS = ("hidden", "weight", "bias")


@dataclass
class FLPProblem:
    hidden: torch.Tensor  # as laid out for the case
    weight: torch.Tensor  # [V, H]
    bias: torch.Tensor | None  # [V]
    target: torch.Tensor
    upstream: tuple
    options: dict


def lay_out(h: torch.Tensor, layout: str, g) -> torch.Tensor:
    if layout == "2d":
        return h
    if layout == "3d":
        return batched(h)
    if layout == "kept_slice":
        b, t = batch_split(h.shape[0])
        full = torch.randn(b, t + 3, h.shape[1], generator=g)  # 3 prompt positions the caller drops
        full[:, -t:, :] = batched(h)
        return full[:, -t:, :]
    if layout == "column_major":
        return h.t().contiguous().t()
    raise ValueError(f"unknown layout {layout!r}")


def make_problem(case: Case, seed: int, device: torch.device) -> FLPProblem:
    g = generator_for(case, seed)
    n, v, hs = case.n, case.v, case.h
    h = torch.randn(n, hs, generator=g)
    w = torch.randn(v, hs, generator=g) / hs**0.5  # logits ~ N(0, 1)
    b = 0.5 * torch.randn(v, generator=g) if case.bias else None
    if case.logits == "flat":
        w = 0.01 * w
    elif case.logits == "peaked":  # a confident model: rows of h along one lm_head row each
        at = torch.randint(0, v, (n,), generator=g)
        h = h + (12.0 + 8.0 * torch.rand(n, 1, generator=g)) * w[at] / (w[at] * w[at]).sum(1, keepdim=True)
    elif case.logits == "shifted":
        b = (b if b is not None else torch.zeros(v)) + SHIFT
    hidden = lay_out(h, case.layout, g)
    rows = tuple(hidden.shape[:-1])
    target = make_target(rows, case.targets if case.targets > 1 else None, v, case.ignore_pattern, g)
    upstream = make_upstream(case.upstream, tuple(target.shape), rows, g)
    dtype = DTYPES[case.dtype]
    options = dict(temperature=case.temperature, softcap=case.softcap or None, logit_scale=case.logit_scale,
                   ignore_index=IGNORE)  # fmt: skip
    return FLPProblem(
        _cast(hidden, dtype, device), w.to(dtype).to(device), None if b is None else b.to(dtype).to(device),
        target.to(device), tuple(u if u is None else as_handed(u, device=device) for u in upstream), options,
    )  # fmt: skip


def _cast(t: torch.Tensor, dtype, device) -> torch.Tensor:
    """t in `dtype` on `device`, same layout (its whole storage converted)."""
    n = t.untyped_storage().nbytes() // t.element_size()
    flat = t.as_strided((n,), (1,), 0).to(dtype=dtype, device=device)
    return flat.as_strided(t.shape, t.stride(), t.storage_offset())


def run_flp(fn, problem: FLPProblem) -> Outcome:
    def call(hidden, weight, target, bias=None, **options):
        return fn(hidden, weight, target, bias=bias, **options)

    call.__wrapped__ = fn
    tensors = {"hidden": problem.hidden, "weight": problem.weight, "target": problem.target}
    if problem.bias is not None:
        tensors["bias"] = problem.bias
    return run_outputs(call, tensors, GRADS, {}, problem.options, problem.upstream)


def flp_semantics(hidden, weight, target, *, bias=None, **options):
    """The semantics in PyTorch, in the inputs' dtype."""
    x = hidden @ weight.t()
    if bias is not None:
        x = x + bias
    return semantics.reference(x, target, **options)


def _careful(dtype: torch.dtype):
    """flp_semantics on float32 operands whose logits' gradient is rounded once to `dtype`
    (suites/common/rounding.py: what a kernel with 16-bit product operands does; in fp16 at a large
    vocabulary that gradient is subnormal: docs/bugs.md, bug 10)."""

    def fn(hidden, weight, target, *, bias=None, **options):
        x = hidden @ weight.t()
        if bias is not None:
            x = x + bias
        return semantics.reference(grad_rounded_to(x, dtype), target, **options)

    return fn


def _in(problem: FLPProblem, dtype: torch.dtype, fn=flp_semantics) -> Outcome:
    def up(t):
        return None if t is None else _cast(t, dtype, t.device)

    ups = tuple(u if u is None else as_handed(u, dtype=dtype) for u in problem.upstream)
    p = FLPProblem(up(problem.hidden), up(problem.weight), up(problem.bias), problem.target, ups, problem.options)
    return run_flp(fn, p)


def reference(problem: FLPProblem) -> Outcome:
    """The float64 truth."""
    return _in(problem, torch.float64)


def eager_in_dtype(problem: FLPProblem) -> Outcome:
    """The yardstick: float32 logits from the unrounded inputs, their gradient rounded once to a
    16-bit case dtype before the products (_careful), each gradient rounded once."""
    out = _in(problem, torch.float32, _careful(problem.weight.dtype))
    for name in GRADS:
        key = f"grad_{name}"
        if key in out.values:
            out.values[key] = out.values[key].to(problem.weight.dtype)
    return out


def model_code(hidden, weight, target, *, bias=None, **options):
    """The head as model code forms it (suites/common/rounding.py, model_logits: the logits in the inputs'
    dtype, then `.float()`), then log_softmax and the entropy in float32 as users write them."""
    return semantics.reference(model_logits(hidden, weight, bias), target, textbook=True, **options)


def textbook(problem: FLPProblem) -> Outcome:
    """The default verdict's yardsticks (ligerbench/tolerance.py): the semantics in each way users
    write them (semantics.textbook_forms: log_softmax, x_t - logsumexp, and with a softcap its
    tanh one ulp nearer 0), otherwise as eager_in_dtype; in 16-bit dtypes also the model code's
    form (model_code, on the case's own inputs); a provider fails only where it is worse than all."""
    forms = tuple(eager_in_dtype(dataclasses.replace(problem, options={**problem.options, "textbook": form}))
                  for form in semantics.textbook_forms(problem.options["softcap"]))  # fmt: skip
    if problem.weight.dtype in SIXTEEN_BITS:
        forms += (held_as_float32(run_flp(model_code, problem)),)
    return forms

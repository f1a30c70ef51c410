"""The `lp` kernel as the harness sees it: its inputs, float64 reference, yardstick and call.

Semantics: kernels/log_probs.py's docstring, in PyTorch in suites/families/log_prob.py. A
provider is `fn(logits, target, *, temperature, softcap, logit_scale, ignore_index) ->
(logp, entropy)`; the case runner hands it the logits exactly as laid out (a vocabulary padded with
-inf columns, transposed storage, [B, T, V]) and runs backward with the case's upstream
gradients on logp, entropy or both.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ligerbench.cases import DTYPES, Case, batched, generator_for
from ligerbench.problems import Outcome, as_handed
from ligerbench.suites.families import log_prob as semantics
from ligerbench.suites.families import sampler_masks
from ligerbench.suites.families.log_prob import IGNORE, make_target, make_upstream, run_outputs, shape_logits

VOCAB_PAD = 64  # padded_vocab: V rounded up to a multiple of this, plus one more multiple


@dataclass
class LPProblem:
    logits: torch.Tensor  # as laid out for the case, in the case dtype
    target: torch.Tensor  # [rows] or [rows, K] int64
    upstream: tuple  # (dlogp or None, dentropy or None), float32
    options: dict  # temperature, softcap, logit_scale, ignore_index


def options_of(case: Case) -> dict:
    return dict(temperature=case.temperature, softcap=case.softcap or None, logit_scale=case.logit_scale,
                ignore_index=IGNORE)  # fmt: skip


def lay_out(x: torch.Tensor, layout: str) -> torch.Tensor:
    """float32 logits [N, V] in the case's layout (a view whose storage holds the padding)."""
    if layout == "2d":
        return x
    if layout == "3d":
        return batched(x)
    n, v = x.shape
    if layout == "padded_vocab":
        vp = (v + VOCAB_PAD - 1) // VOCAB_PAD * VOCAB_PAD + VOCAB_PAD
        full = torch.full((n, vp), float("-inf"))  # a padded lm_head's extra rows, masked
        full[:, :v] = x
        return full
    if layout == "transposed":
        return x.t().contiguous().t()
    raise ValueError(f"unknown layout {layout!r}")


def make_problem(case: Case, seed: int, device: torch.device) -> LPProblem:
    g = generator_for(case, seed)
    sampled = case.logits == sampler_masks.KIND
    x = shape_logits(torch.randn(case.n, case.v, generator=g), "normal" if sampled else case.logits, g)
    logits = lay_out(x, case.layout)
    rows = tuple(logits.shape[:-1])
    target = make_target(rows, case.targets if case.targets > 1 else None, case.v, case.ignore_pattern, g)
    if sampled:  # masked around the targets a sampler drew (suites/families/sampler_masks.py)
        logits = lay_out(sampler_masks.masked(x, target.reshape(case.n, -1), IGNORE, g), case.layout)
    upstream = make_upstream(case.upstream, tuple(target.shape), rows, g)
    dtype = DTYPES[case.dtype]
    # cast keeping the layout: a strided view's storage (padding included) goes over whole
    laid = _upcast(logits, dtype).to(device)
    laid = (
        laid.as_strided(logits.shape, logits.stride(), logits.storage_offset())
        if laid.device != logits.device
        else laid
    )
    return LPProblem(laid, target.to(device), tuple(u if u is None else as_handed(u, device=device) for u in upstream),
                     options_of(case))  # fmt: skip


def run_lp(fn, problem: LPProblem) -> Outcome:
    return run_outputs(
        fn, {"logits": problem.logits, "target": problem.target}, ("logits",), {}, problem.options, problem.upstream
    )


def _semantics(logits, target, **options):
    return semantics.reference(logits, target, **options)


def reference(problem: LPProblem) -> Outcome:
    """The float64 truth. With one class (V = 1) every log-prob and entropy is 0 and the gradient
    exactly 0, whatever the logits: that gradient is judged against its natural size
    (ligerbench/tolerance.py, "A truth that is exactly 0"), _one_class_scale."""
    out = _in(problem, torch.float64)
    if problem.logits.shape[-1] == 1:
        scale = _one_class_scale(problem)
        if scale > 0:
            out.scales = {"grad_logits": scale}
    return out


def _one_class_scale(problem: LPProblem) -> float:
    """The norm over rows of the upstream a row's gradient carries, |dlogp| over its counted
    targets plus |dentropy|, times logit_scale / T: the size of the gradient's terms (p - 1 times
    it, p the class's probability) as soon as a second class takes some of the mass. A one-class
    gradient of 2**-24 (p = exp(x - lse) rounded to 1 - 2**-24, TRL's unfused path on a GPU) is a
    rounding of that size, not a defect."""
    dlogp, dentropy = problem.upstream
    rows = problem.logits.shape[:-1]
    per_row = torch.zeros(rows, dtype=torch.float64, device=problem.logits.device)
    if dlogp is not None:
        counted = (problem.target != IGNORE).to(torch.float64)
        up = dlogp.to(torch.float64).abs() * counted
        per_row += up.reshape(*rows, -1).sum(-1)
    if dentropy is not None:
        per_row += dentropy.to(torch.float64).abs().reshape(rows)
    opts = problem.options
    return float(torch.linalg.vector_norm(per_row)) * abs(opts["logit_scale"]) / opts["temperature"]


def eager_in_dtype(problem: LPProblem) -> Outcome:
    """The yardstick: the semantics in float32 from the unrounded logits, the gradient rounded
    once to the case dtype."""
    out = _in(problem, torch.float32)
    out.values["grad_logits"] = out.values["grad_logits"].to(problem.logits.dtype)
    return out


def _in(problem: LPProblem, dtype: torch.dtype) -> Outcome:
    up = tuple(u if u is None else as_handed(u, dtype=dtype) for u in problem.upstream)
    p = LPProblem(_upcast(problem.logits, dtype), problem.target, up, problem.options)
    return run_lp(_semantics, p)


def _upcast(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """t in `dtype` with the same layout (its whole storage converted)."""
    n = t.untyped_storage().nbytes() // t.element_size()
    return t.as_strided((n,), (1,), 0).to(dtype).as_strided(t.shape, t.stride(), t.storage_offset())


def textbook(problem: LPProblem) -> Outcome:
    """The default verdict's yardsticks (ligerbench/tolerance.py): the semantics in each way users
    write them (semantics.textbook_forms: log_softmax, x_t - logsumexp, and with a softcap its
    tanh one ulp nearer 0), otherwise as eager_in_dtype; a provider fails only where it is worse
    than all of them."""
    return tuple(eager_in_dtype(dataclasses.replace(problem, options={**problem.options, "textbook": form}))
                 for form in semantics.textbook_forms(problem.options["softcap"]))  # fmt: skip

"""The convergence suite: train a mini transformers model twice (transformers' loss, then our
kernels patched in) and compare; plus the logits_to_keep and packing checks.

    from ligerbench.suites.converge import ConvergeCase, run_converge
    result = run_converge(ConvergeCase("llama-mini", PRESETS["tiny"], "fp32", "ce", seed=0))
    assert all(r.verdict == "pass" for r in result.records)

Every check yields Record rows (suite "converge"); an exception inside a check becomes an
"error" row naming it, so one broken check never hides the others. What is checked, and why:
  patch_active        our kernel ran once per training step (a patch that is silently not
                      applied compares transformers with itself and passes everything else)
  patch_reverted      the instance's forward is transformers' again after the context, and
                      our kernel no longer runs (ANCHORS.md bug 7)
  loss_per_step, final_params, eval_topk_logprobs: the trajectory against a third run,
                      transformers' loss in float64, with transformers' own run in the case's
                      dtype as the yardstick (tolerance rule 3)
  logits_grad@step0, hidden_grad@step0: the kernel against float64 truth (rule 1); gradients,
                      never the logits buffer (ANCHORS.md bug 3)
  logits_to_keep      k = 0, 1, K in train and eval mode (ANCHORS.md bug 5), rule 2
  packed              per-sequence mean on a packed row == padded batch (bug 4), rule 2
The packed/logits_to_keep helpers live in suites/converge_checks.py.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ligerbench.converge import tolerance as tol
from ligerbench.converge.data import make_batches
from ligerbench.converge.models import GEMMA2_MINI_SOFTCAP, Preset, build_model
from ligerbench.converge.train import (
    RunResult,
    StepZero,
    eval_logprobs,
    flat,
    float64_causal_lm_loss,
    topk_logprob_error,
    train,
)
from ligerbench.kernels.hf import CausalLMPatch
from ligerbench.records import Record

SUITE = "converge"
# Which kernel runs during a training step under each patch.
TRAINING_KERNEL = {"ce": "ce", "flce": "flce", "both": "flce"}


@dataclass(frozen=True)
class ConvergeCase:
    model: str
    preset: Preset
    dtype: str  # "fp32" | "bf16"
    patch: str  # "ce" | "flce" | "both"
    seed: int = 0
    packed: bool = False
    device: str = "cpu"

    @property
    def id(self) -> str:
        return f"{self.model}-{self.preset.name}-{self.dtype}-{self.patch}" + ("-packed" if self.packed else "")


@dataclass
class ConvergeResult:
    records: list[Record] = field(default_factory=list)
    ref: RunResult | None = None
    ours: RunResult | None = None
    truth: RunResult | None = None  # transformers' loss, float64


class Checker:
    """Makes this case's records; `calls` tallies kernel launches over every patch it applied."""

    def __init__(self, case: ConvergeCase, run_id: str, patcher: Callable, sink: Callable[[Record], None] | None):
        self.case, self.run_id, self.patcher, self.sink = case, run_id, patcher, sink
        self.records: list[Record] = []
        self.calls: Counter = Counter()

    def patch(self, model, **options) -> CausalLMPatch:
        return self.patcher(model, self.case.patch, **options)

    def tally(self, patch) -> None:
        self.calls.update(patch.calls)

    def record(self, quantity, value, limit, *, metric="rel_l2", unit="", message="", verdict=None):
        ok = value <= limit and not math.isnan(value)
        p = self.case.preset
        r = Record(
            run_id=self.run_id,
            suite=SUITE,
            kernel=self.case.patch,
            provider=self.case.model,
            case=self.case.id,
            quantity=quantity,
            metric=metric,
            value=float(value),
            unit=unit,
            limit=float(limit),
            verdict=verdict or ("pass" if ok else "fail"),
            message=message,
            n=p.batch * p.seq_len,
            v=p.vocab,
            h=p.hidden,
            dtype=self.case.dtype,
            option=p.name,
        )
        self.records.append(r)
        if self.sink:
            self.sink(r)
        return r

    def error(self, quantity: str, exc: BaseException):
        return self.record(
            quantity, math.inf, 0.0, metric="error", verdict="error", message=f"{type(exc).__name__}: {exc}"[:300]
        )


def build(case: ConvergeCase) -> torch.nn.Module:
    return build_model(case.model, case.preset, seed=case.seed, dtype=tol.DTYPES[case.dtype], device=case.device)


def _cap(model) -> float | None:
    return getattr(model.config, "final_logit_softcapping", None)


def truth_step0(ref: RunResult, cap: float | None):
    """float64 gradients of the mean CE w.r.t. the last hidden state and the (uncapped) logits."""
    s = ref.step0
    h = s.hidden.double().requires_grad_(True)
    logits = h @ s.head_weight.double().T
    logits.retain_grad()
    capped = torch.tanh(logits / cap) * cap if cap else logits
    target = torch.nn.functional.pad(s.labels, (0, 1), value=-100)[..., 1:]
    loss = torch.nn.functional.cross_entropy(capped.reshape(-1, capped.shape[-1]), target.reshape(-1).to(h.device))
    loss.backward()
    return h.grad, logits.grad


# The float64 run depends on neither dtype nor patch: one per (model, preset, seed, device) is
# kept, so `converge --dtype fp32 --dtype bf16` trains it once.
_TRUTH_CACHE: dict[tuple, tuple[RunResult, torch.Tensor]] = {}


def float64_truth(case: ConvergeCase, batches, held_out, on_step=None) -> tuple[RunResult, torch.Tensor]:
    """transformers' model trained in float64 (same initial weights, batches, AdamW), with the loss
    taken in float64 too (float64_causal_lm_loss); returns the run and its eval log-probs."""
    p = case.preset
    key = (case.model, p, case.seed, case.device)
    if key not in _TRUTH_CACHE:
        model = build_model(case.model, p, seed=case.seed, dtype=torch.float64, device=case.device)
        run = train(model, batches, lr=p.lr, on_step=on_step, loss_fn=float64_causal_lm_loss)
        run.step0 = StepZero()  # step 0 is judged on the dtype runs; keep no float64 copies
        lp = eval_logprobs(model, held_out)
        del model
        _TRUTH_CACHE.clear()
        _TRUTH_CACHE[key] = (run, lp)
    return _TRUTH_CACHE[key]


def check_trajectory(c: Checker, on_step=None) -> ConvergeResult:
    case, p = c.case, c.case.preset
    batches = make_batches(vocab=p.vocab, batch=p.batch, seq_len=p.seq_len, steps=p.steps, seed=case.seed)
    held_out = make_batches(vocab=p.vocab, batch=p.batch, seq_len=p.seq_len, steps=1, seed=case.seed + 1)[0]
    ref_model = build(case)
    ref = train(ref_model, batches, lr=p.lr, on_step=(lambda i, v: on_step("ref", i, v)) if on_step else None)
    ref_lp = eval_logprobs(ref_model, held_out)
    cap = _cap(ref_model)
    del ref_model

    model = build(case)
    patch = c.patch(model)
    with patch:
        ours = train(model, batches, lr=p.lr, on_step=(lambda i, v: on_step("ours", i, v)) if on_step else None)
        our_lp = eval_logprobs(model, held_out)
    c.tally(patch)
    kernel = TRAINING_KERNEL[case.patch]
    c.record(
        "patch_active",
        abs(patch.calls[kernel] - p.steps),
        0,
        metric="calls_missing",
        unit="launches",
        message=f"{kernel} kernel launches in {p.steps} training steps: {patch.calls[kernel]}",
    )
    _check_reverted(c, model, patch, batches[0])
    del model

    truth, truth_lp = float64_truth(
        case, batches, held_out, on_step=(lambda i, v: on_step("float64", i, v)) if on_step else None
    )
    result = ConvergeResult(ref=ref, ours=ours, truth=truth)
    _judge_trajectory(c, ref, ours, truth, (ref_lp, our_lp, truth_lp), held_out)

    truth_h, truth_logits = truth_step0(ref, cap)
    pairs = [("hidden_grad@step0", ref.step0.hidden_grad, ours.step0.hidden_grad, truth_h)]
    if ours.step0.logits_grad is not None:  # the fused kernel never materialises logits
        pairs.append(("logits_grad@step0", ref.step0.logits_grad, ours.step0.logits_grad, truth_logits))
    for name, eager, got, truth in pairs:
        eager_err = tol.rel_error(eager, truth)
        c.record(
            name,
            tol.rel_error(got, truth),
            tol.kernel_limit(eager_err, case.dtype),
            message=f"vs float64; transformers' own error {eager_err:.3g}",
        )
    return result


def _judge_trajectory(c: Checker, ref: RunResult, ours: RunResult, truth: RunResult, logprobs, held_out) -> None:
    """Rule 3 (ligerbench/converge/tolerance.py): ours' distance to the float64 run, limited by
    FACTOR x transformers' own distance to it in the same dtype + floor."""
    case, p = c.case, c.case.preset

    def rel(a: float, t: float) -> float:
        return abs(a - t) / abs(t) if t != 0 else (0.0 if a == t else math.inf)

    ours_err = [rel(a, t) for a, t in zip(ours.losses, truth.losses, strict=True)]
    yard = [rel(a, t) for a, t in zip(ref.losses, truth.losses, strict=True)]
    limits = tol.per_step_limits(yard, case.dtype)
    # the step closest to (or furthest over) its limit; NaN counts as the worst
    worst = max(range(len(ours_err)), key=lambda i: math.inf if math.isnan(ours_err[i]) else ours_err[i] / limits[i])
    c.record(
        "loss_per_step",
        ours_err[worst],
        limits[worst],
        metric="rel_diff_vs_float64",
        message=f"worst at step {worst}: float64 {truth.losses[worst]:.6g}, ref {ref.losses[worst]:.6g} "
        f"(yardstick {yard[worst]:.3g}), ours {ours.losses[worst]:.6g}; final float64 {truth.losses[-1]:.4g} "
        f"vs log(V) {math.log(p.vocab):.4g}",
    )
    ours_p, ref_p, truth_p = flat(ours.params), flat(ref.params), flat(truth.params)
    yard_p = tol.rel_error(ref_p, truth_p)
    c.record(
        "final_params",
        tol.rel_error(ours_p, truth_p),
        tol.trajectory_limit(yard_p, case.dtype),
        metric="rel_l2_vs_float64",
        message=f"yardstick (ref vs float64) {yard_p:.3g}; ours vs ref {tol.rel_error(ours_p, ref_p):.3g}",
    )
    ref_lp, our_lp, truth_lp = logprobs
    mask = held_out.attention_mask.to(truth_lp.device)
    yard_lp = topk_logprob_error(truth_lp, ref_lp, mask, p.topk)
    c.record(
        "eval_topk_logprobs",
        topk_logprob_error(truth_lp, our_lp, mask, p.topk),
        tol.trajectory_limit(yard_lp, case.dtype, tol.logprob_floor_scale(p.vocab)),
        metric="max_abs_diff_vs_float64",
        unit="nats",
        message=f"top-{p.topk} at the float64 run's tokens, eval mode; yardstick {yard_lp:.3g}",
    )


def _check_reverted(c: Checker, model, patch, batch) -> None:
    before = dict(patch.calls)
    still_patched = "forward" in vars(model) or patch.active
    b = batch.to(next(model.parameters()).device)
    model(**b.inputs()).loss.backward()
    model.zero_grad(set_to_none=True)
    ran = sum(patch.calls.values()) - sum(before.values())
    c.record(
        "patch_reverted",
        float(still_patched) + ran,
        0,
        metric="leftovers",
        message=f"instance forward still set: {still_patched}; kernel launches after exit: {ran}",
    )


def run_converge(
    case: ConvergeCase,
    *,
    run_id: str = "adhoc",
    patcher: Callable = CausalLMPatch,
    sink: Callable[[Record], None] | None = None,
    on_step: Callable[[str, int, float], None] | None = None,
    checks: tuple[str, ...] = ("trajectory", "logits_to_keep", "packed"),
) -> ConvergeResult:
    """Run the case's checks; `patcher(model, kind, **options)` makes the patch context (tests
    pass planted-bug variants here). `packed` runs only for a case with packed=True."""
    from ligerbench.suites.converge_checks import check_logits_to_keep, check_packed

    c = Checker(case, run_id, patcher, sink)
    result = ConvergeResult()
    steps = {
        "trajectory": lambda: check_trajectory(c, on_step),
        "logits_to_keep": lambda: check_logits_to_keep(c),
        "packed": lambda: check_packed(c) if case.packed else None,
    }
    for name in checks:
        try:
            out = steps[name]()
        except Exception as exc:  # recorded, named; the other checks still run
            c.error(name, exc)
            continue
        if isinstance(out, ConvergeResult):
            result.ref, result.ours, result.truth = out.ref, out.ours, out.truth
    if case.patch == "both":  # both kernels must have run somewhere in the suite
        for kernel in ("ce", "flce"):
            c.record(
                f"patch_active[{kernel}]",
                float(c.calls[kernel] == 0),
                0,
                metric="unused",
                message=f"{kernel} launches over all checks: {c.calls[kernel]}",
            )
    result.records = c.records
    return result


__all__ = ["ConvergeCase", "ConvergeResult", "run_converge", "GEMMA2_MINI_SOFTCAP"]

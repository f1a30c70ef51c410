"""The convergence suite's machinery: a case, the Checker that turns comparisons into Records,
the float64 run kept once per (model, preset, seed, device), and the engine that runs a case's
checks. What is checked lives in suites/converge/__init__.py and suites/converge/checks.py.

    from ligerbench.suites.converge import run_case
    result = run_case(ConvergeCase("llama-mini", PRESETS["tiny"], "fp32", "ce", seed=0))
    assert all(r.verdict == "pass" for r in result.records)

Every check yields Record rows (suite "converge", provider "ours": our kernels patched in, or
the planted bug's name under selftest); an exception inside a check becomes an "error" row
naming it, so one broken check never hides the others.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from ligerbench.converge import tolerance as tol
from ligerbench.converge.models import Preset, build_model
from ligerbench.converge.train import RunResult, StepZero, eval_logprobs, float64_causal_lm_loss, train
from ligerbench.kernels.hf import CausalLMPatch
from ligerbench.records import Record

SUITE = "converge"
PROVIDER = "ours"  # our kernels patched into transformers' model
INFO_METRIC = "rel_diff_info"  # a row reported, not judged (limit inf; shown as `info`)


@dataclass(frozen=True)
class ConvergeCase:
    model: str
    preset: Preset
    dtype: str  # "fp32" | "bf16"
    patch: str  # "ce" | "flce" | "both"
    seed: int = 0
    packed: bool = False
    device: str = "cpu"
    parallel: str = ""  # "", or a plan of ligerbench/converge/parallel.py run on `nproc` ranks
    nproc: int = 1
    accum: int = 1  # gradient accumulation micro-batches per step and rank (parallel runs)
    distill: str = ""  # `converge --distill`: the divergence (suites/converge/distill.py), else ""

    @property
    def id(self) -> str:
        out = f"{self.model}-{self.preset.name}-{self.dtype}-{self.patch}" + ("-packed" if self.packed else "")
        out += f"-{self.distill}" if self.distill else ""
        if self.parallel:
            out += f"-{self.parallel}x{self.nproc}" + (f"-accum{self.accum}" if self.accum > 1 else "")
        return out


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
        if metric != INFO_METRIC and limit > tol.MAX_LIMIT:  # a judged row's limit is one a bug can exceed
            raise ValueError(f"{quantity}: limit {limit:.3g} above {tol.MAX_LIMIT} (ligerbench/converge/tolerance.py)")
        ok = value <= limit and not math.isnan(value)
        if metric == INFO_METRIC:  # reported, never judged: the row says so itself, not only its table
            verdict = "info"
        p = self.case.preset
        r = Record(
            run_id=self.run_id,
            suite=SUITE,
            kernel=self.case.patch,
            provider=PROVIDER,
            case=self.case.id,
            quantity=quantity,
            metric=metric,
            value=float(value),
            unit=unit,
            limit=float(limit),
            verdict=verdict or ("pass" if ok else "fail"),
            message=message,
            params={"n": p.batch * p.seq_len, "v": p.vocab, "h": p.hidden, "dtype": self.case.dtype},
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


def cap_of(model) -> float | None:
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


# A check: (checker, on_step) -> a ConvergeResult (the trajectory check) or None
Check = Callable[["Checker", Callable | None], "ConvergeResult | None"]


def run_converge(
    case: ConvergeCase,
    checks: Mapping[str, Check],
    *,
    run_id: str = "adhoc",
    patcher: Callable = CausalLMPatch,
    sink: Callable[[Record], None] | None = None,
    on_step: Callable[[str, int, float], None] | None = None,
) -> ConvergeResult:
    """Run the checks, in order; `patcher(model, kind, **options)` makes the patch context
    (selftest and tests pass planted-bug variants here)."""
    c = Checker(case, run_id, patcher, sink)
    result = ConvergeResult()
    for name, check in checks.items():
        try:
            out = check(c, on_step)
        except Exception as exc:  # recorded, named; the other checks still run
            c.error(name, exc)
            continue
        if isinstance(out, ConvergeResult):
            result.ref, result.ours, result.truth = out.ref, out.ours, out.truth
    result.records = c.records
    return result

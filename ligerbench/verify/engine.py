"""The verify engine: run the selected providers on every case of the selected suites and turn
each comparison with the float64 truth into a record.

Each case's inputs are drawn once; the reference, the two yardsticks of the tolerance rule
(careful and textbook: ligerbench/tolerance.py) and every provider run once per case, and every
suite that lists the case reads the quantities it checks from those runs. A provider that raises
on a case (CUDA out-of-memory included) yields error rows for that case and the run goes on.
With `repeat` > 1 a provider that declares itself deterministic runs the case that many times
and any bit that differs between runs fails (a race shows in a few runs of many: docs/bugs.md,
bug 9).
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ligerbench import tolerance
from ligerbench.cases import DTYPES, Case
from ligerbench.problems import MODEL_CODE, same_bits
from ligerbench.records import Record, RecordWriter, settings_text
from ligerbench.registry import KernelSpec, NotRun, Provider, Registry, Suite
from ligerbench.rowwise import BATCHES, LAST, LAST_ROWS
from ligerbench.verify import invariance


@dataclass(frozen=True)
class Plan:
    kernel: str
    suites: tuple[Suite, ...]
    providers: tuple[Provider, ...]
    cases: tuple[Case, ...]
    # which suites list each case (by case id)
    suites_of_case: dict
    strict: bool = False  # every provider held to the careful yardstick alone (--strict)
    repeat: int = 1  # runs a case of a deterministic provider (--repeat N); bits must agree


def make_plan(
    registry: Registry,
    *,
    kernel: str,
    preset: str,
    device_type: str,
    suites: list[str] | None = None,
    providers: list[str] | None = None,
    case_filter: Callable[[Case], bool] = lambda c: True,
    strict: bool = False,
    repeat: int = 1,
) -> Plan:
    chosen_suites = [s for s in registry.suites_for(kernel) if not suites or s.name in suites]
    if providers:
        chosen_providers = [registry.provider(kernel, p) for p in providers]
    else:
        chosen_providers = registry.providers_for(kernel)
    spec = registry.kernels[kernel]
    cases: dict[str, Case] = {}
    suites_of_case: dict[str, list[str]] = {}
    # the kernel's grid built once for all its suites (a selftest makes a plan per planted bug)
    grid = spec.grid(preset, device_type) if chosen_suites else []
    for suite in chosen_suites:
        for case in registry.cases_of(suite, preset, device_type, grid):
            # a suite none of whose quantities applies to the case has nothing to run there: with
            # `--suite` narrowing the run, such a case would form its float64 truth and write no row
            if case_filter(case) and _quantities_for(spec, suite, case):
                cases.setdefault(case.id, case)
                suites_of_case.setdefault(case.id, []).append(suite.name)
    return Plan(kernel, tuple(chosen_suites), tuple(chosen_providers), tuple(cases.values()), suites_of_case,
                strict=strict, repeat=repeat)  # fmt: skip


def _quantities_for(spec: KernelSpec, suite: Suite, case: Case) -> tuple[str, ...]:
    """The suite's quantities that apply to the case (the kernel spec's `applies` says when)."""
    return tuple(q for q in suite.quantities if q not in spec.applies or spec.applies[q](case))


def run_plan(
    plan: Plan,
    registry: Registry,
    *,
    run_id: str,
    seed: int,
    device: torch.device,
    writer: RecordWriter,
    on_case: Callable[[Case], None] = lambda c: None,
) -> None:
    spec = registry.kernels[plan.kernel]
    suites = {s.name: s for s in plan.suites}
    reasons = {p.name: p.unavailable(device.type) for p in plan.providers}
    for case in plan.cases:
        case_suites = [suites[name] for name in plan.suites_of_case[case.id]]

        def record(provider: Provider, suite: str, quantity: str, _case=case, **fields) -> None:
            """One row of the case: a provider's quantity in a suite, with its settings."""
            writer.write(Record.for_case(_case, run_id=run_id, suite=suite, provider=provider.name, quantity=quantity,
                                         settings=settings_text(provider.settings), **fields))  # fmt: skip

        def rows(provider: Provider, verdict: str, message: str, _case=case, _suites=case_suites) -> None:
            """Rows without a measurement (skip/error) for every quantity the case's suites check."""
            for suite in _suites:
                for q in _quantities_for(spec, suite, _case):
                    record(provider, suite.name, q, metric="", value=float("nan"), unit="", limit=float("nan"),
                           verdict=verdict, message=message)  # fmt: skip

        try:
            problem = spec.make_problem(case, seed, device)
            if _needs_truth(case_suites):
                ref = spec.reference(problem)
                draws = _float32_draws(spec, problem, device) if DTYPES[case.dtype] == torch.float32 else ()
                yard = Yardsticks(spec.eager(problem), spec.textbook(problem) if spec.textbook else None, draws)
            else:  # only same-row suites list the case: two calls compared, no float64 truth formed
                ref = yard = None
        except Exception as exc:  # the case itself could not be set up: every row is an error
            for provider in plan.providers:
                rows(provider, "error", f"reference/yardstick failed: {_describe(exc)}")
            _free(device)
            on_case(case)
            continue
        for provider in plan.providers:
            reason = reasons[provider.name] or provider.supports(case)
            if reason:
                rows(provider, "skip", reason)
                continue
            try:
                outcome = spec.run(provider.load(), problem)
            except NotRun as exc:  # the provider cannot run this case as itself: not a check
                rows(provider, "skip", str(exc))
                _free(device)
                continue
            except Exception as exc:
                rows(provider, "error", _describe(exc))
                _free(device)
                continue
            strict = plan.strict or provider.strict or provider.mutant  # a planted bug is ours, broken
            hints = spec.hints or _no_hints
            promised = None if strict else _promised(provider, problem)
            for suite in case_suites:
                for q in _quantities_for(spec, suite, case):
                    if q in invariance.QUANTITIES:
                        for name, fields in _same_row(q, spec, provider, problem, outcome):
                            record(provider, suite.name, name, **fields)
                        continue
                    fields = _compare(q, case, provider, outcome, ref, yard, strict=strict, hints=hints,
                                      promised=promised)  # fmt: skip
                    record(provider, suite.name, q, **fields)
            if plan.repeat > 1:
                record(provider, REPEAT_SUITE, "bitwise", **_repeat(spec, provider, problem, outcome, plan.repeat))
            del outcome
        del problem, ref, yard
        on_case(case)


def _needs_truth(suites: list[Suite]) -> bool:
    """Whether a suite of the case compares with the float64 truth (all but the same-row ones)."""
    return any(q not in invariance.QUANTITIES for suite in suites for q in suite.quantities)


def _same_row(quantity: str, spec: KernelSpec, provider: Provider, problem, outcome) -> list[tuple[str, dict]]:
    """The determinism or batch-invariance records of one provider on one case
    (ligerbench/verify/invariance.py); a call that raises is one error record."""
    fn = provider.load()
    try:
        if quantity == invariance.DETERMINISM:
            return invariance.determinism(lambda: spec.run(fn, problem), outcome, promised=provider.deterministic)
        if spec.rows is None:
            return [(quantity, invariance.unmeasured("skip", f"kernel {spec.name} declares no rows", float("nan")))]
        if quantity == invariance.RANK_COUNT:
            if spec.rows.ranks is None:
                why = f"kernel {spec.name} splits no vocabulary"
                return [(quantity, invariance.unmeasured("skip", why, float("nan")))]
            return invariance.rank_count(lambda p: spec.run(fn, p), problem, outcome, spec.rows.ranks, spec.rows)
        batches = LAST if quantity == LAST_ROWS else BATCHES
        return invariance.batch_invariance(lambda p: spec.run(fn, p), problem, outcome, spec.rows,
                                           ours=provider.strict or provider.mutant, batches=batches,
                                           describe=_describe)  # fmt: skip
    except Exception as exc:  # a call that raises is an error row, the run goes on
        return [(quantity, invariance.unmeasured("error", _describe(exc)))]


def _promised(provider: Provider, problem):
    """The provider's own promised reference on this case (Provider.promise), or None where it
    declares none or it cannot run here (then the provider is judged without it)."""
    if provider.promise is None:
        return None
    try:
        return provider.promise(problem)
    except Exception:  # noqa: BLE001 -- a promise that cannot run widens nothing
        return None


def _float32_draws(spec: KernelSpec, problem, device: torch.device) -> tuple:
    """More draws of the careful yardstick's float32 roundings (ligerbench/tolerance.py): on
    inputs nudged one ulp, and on a GPU once more on a CPU copy where that copy can run."""
    draws = tuple(spec.eager(tolerance.nudged(problem, seed)) for seed in range(tolerance.NUDGES))
    if device.type == "cpu" or (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return draws  # ranks: a CPU copy could call a collective one rank skips
    try:
        copy = tolerance.on_cpu(problem)
        return draws if copy is None else (*draws, spec.eager(copy))
    except Exception:  # a problem that only runs where it was made (a rank's share): no CPU draw
        return draws


@dataclass(frozen=True)
class Yardsticks:
    """The two yardsticks' outcomes on one case (ligerbench/tolerance.py); textbook None where
    the kernel declares none."""

    careful: object
    textbook: object | None
    # float32 cases: more draws of the careful yardstick's roundings (nudged inputs; on a GPU a
    # CPU copy); the largest error counts where it is the larger (up to NUDGE_COUNTS_UP_TO)
    draws: tuple = ()
    # quantity -> (careful error, textbook error): formed once a case, whatever the providers
    # (a 2**31-element gradient is compared a block at a time, seconds each)
    _errors: dict = field(default_factory=dict, compare=False, repr=False)

    def errors(self, quantity: str, truth: torch.Tensor, scale: float | None = None,
               excluded: tuple[str, ...] = ()) -> tuple[float, float]:  # fmt: skip
        """(careful error, textbook error); `excluded`: textbook forms (Outcome.form) a provider's
        promise rules out (Provider.promises_float32_logits)."""
        key = (quantity, excluded)
        if key not in self._errors:
            careful = tolerance.rel_error(self.careful.values.get(quantity), truth, scale)
            for outcome in self.draws:
                moved = tolerance.rel_error(outcome.values.get(quantity), truth, scale)
                careful = max(careful, moved) if moved <= tolerance.NUDGE_COUNTS_UP_TO else careful
            self._errors[key] = (careful, self._textbook_error(quantity, truth, scale, excluded))
        return self._errors[key]

    def _textbook_error(self, quantity: str, truth: torch.Tensor, scale: float | None,
                        excluded: tuple[str, ...] = ()) -> float:  # fmt: skip
        """The textbook yardstick's error; a kernel that declares several ways users write it
        (a tuple of outcomes) gets the largest finite one: none of them may fail."""
        forms = self.textbook if isinstance(self.textbook, (tuple, list)) else (self.textbook,)
        errors = [tolerance.rel_error(f.values[quantity], truth, scale) for f in forms
                  if f is not None and quantity in f.values and getattr(f, "form", "") not in excluded]  # fmt: skip
        finite = [e for e in errors if math.isfinite(e)]
        return max(finite) if finite else (errors[0] if errors else math.nan)


REPEAT_SUITE = "repeat"  # the rows of --repeat N: suite "repeat", quantity "bitwise"


def _no_hints(case: Case, quantity: str, error: float | None = None) -> tuple[str, ...]:
    return ()


def _repeat(spec: KernelSpec, provider: Provider, problem, first, runs: int) -> dict:
    """Run a deterministic provider runs - 1 more times on the same problem and count the runs
    whose outputs differ from the first in any bit (NaN payloads included)."""
    if not provider.deterministic:
        return dict(metric="runs_differing", value=float("nan"), unit="", limit=float("nan"), verdict="skip",
                    message=f"{provider.name} does not declare itself deterministic")  # fmt: skip
    differing, where = 0, []
    for i in range(runs - 1):
        try:
            again = spec.run(provider.load(), problem)
        except Exception as exc:  # a rerun that raises is an error row, the run goes on
            return dict(metric="runs_differing", value=float("nan"), unit="", limit=0.0, verdict="error",
                        message=f"rerun {i + 1} of {runs - 1}: {_describe(exc)}")  # fmt: skip
        names = [q for q, v in first.values.items() if not _same_outputs(v, again.values.get(q))]
        if names:
            differing += 1
            where.extend(n for n in names if n not in where)
        del again
    message = f"{differing} of {runs - 1} reruns differ from the first in {', '.join(where)}" if differing else ""
    return dict(metric="runs_differing", value=float(differing), unit="count", limit=0.0,
                verdict="fail" if differing else "pass", message=message)  # fmt: skip


def _same_outputs(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Two runs' values of one quantity, bit for bit (problems.same_bits), None only with None."""
    if a is None or b is None:
        return a is None and b is None
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return False
    return same_bits(a.detach(), b.detach())


def _layout(outcome) -> dict:
    """input_layout: every input reached the provider's callable with the shape, strides and
    storage offset the case built it with (not a dense copy made on the way)."""
    if outcome.built is None:
        return dict(metric="layout", value=float("nan"), unit="", limit=float("nan"), verdict="skip",
                    message="this kernel's run records no input layouts")  # fmt: skip
    got = outcome.received or {}
    wrong = [
        f"{name}: built {want}, received {got.get(name, 'nothing')}"
        for name, want in outcome.built.items()
        if got.get(name) != want
    ]
    return dict(
        metric="layouts_differing",
        value=float(len(wrong)),
        unit="count",
        limit=0.0,
        verdict="fail" if wrong else "pass",
        message="; ".join(wrong)[:500],
    )


def _compare(quantity: str, case: Case, provider: Provider, outcome, ref, yard: Yardsticks, *, strict: bool = False,
             hints: Callable[[Case, str, float], tuple[str, ...]] = _no_hints, promised=None) -> dict:  # fmt: skip
    if quantity == "input_layout":
        return _layout(outcome)
    if quantity == "input_unchanged":
        mutated = outcome.input_mutated
        ok = not mutated or provider.mutates_input
        msg = ""
        if mutated and not provider.mutates_input:
            names = ", ".join(getattr(outcome, "mutated_inputs", ())) or "an input"
            msg = f"modified {names} it was handed (whole storage compared) without declaring mutates_input"
        return dict(
            metric="mutated",
            value=float(mutated),
            unit="bool",
            limit=float(provider.mutates_input),
            verdict="pass" if ok else "fail",
            message=msg,
        )
    refusal = getattr(outcome, "refusals", {}).get(quantity)
    if refusal is not None and quantity not in outcome.values:  # a refusal its contract allows
        return dict(metric="refused", value=1.0, unit="bool", limit=float("nan"), verdict="pass",
                    message=f"refused: {refusal}"[:500])  # fmt: skip
    if quantity not in outcome.values:
        return dict(
            metric="rel_l2",
            value=float("nan"),
            unit="",
            limit=float("nan"),
            verdict="skip",
            message=f"{provider.name} does not report {quantity}",
        )
    got, truth = outcome.values[quantity], ref.values[quantity]
    scale = getattr(ref, "scales", {}).get(quantity)  # a truth exactly 0: errors relative to its natural size
    excluded = (MODEL_CODE,) if provider.promises_float32_logits else ()
    careful, textbook = yard.errors(quantity, truth, scale, excluded)
    rule = "strict" if strict else "default"
    promise = math.nan
    if promised is not None and promised.values.get(quantity) is not None:
        promise = tolerance.rel_error(promised.values[quantity], truth, scale)
    widest = max((e for e in (textbook, promise) if math.isfinite(e)), default=textbook)
    limit = tolerance.limit_for(careful, DTYPES[case.dtype], widest, strict=strict)
    unit = "relative" if scale is None else "relative to natural magnitude"
    figures = dict(metric="rel_l2", unit=unit, limit=limit, careful=careful, textbook=textbook, rule=rule,
                   promise=promise)  # fmt: skip
    if got is not None and got.numel() != truth.numel():  # no element lines up with the truth
        message = f"shape {tuple(got.shape)} where the float64 reference has {tuple(truth.shape)}"
        return dict(value=math.inf, verdict="fail", message=message, **figures)
    err = tolerance.rel_error(got, truth, scale)
    message = ""
    if not err <= limit:
        yardsticks = f"careful {careful:.3g}" + ("" if math.isnan(textbook) else f", textbook {textbook:.3g}")
        yardsticks += "" if math.isnan(promise) else f", its promise {promise:.3g}"
        if scale is not None:
            yardsticks += f"; the truth is 0: errors relative to the natural magnitude {scale:.3g}"
        message = f"error {err:.3g} > limit {limit:.3g} ({rule}: {yardsticks}); {explain(got, truth)}"
        known = hints(case, quantity, err)
        if known:
            message += "; known pattern: " + "; ".join(known)
    return dict(value=err, verdict=tolerance.verdict(err, limit), message=message, **figures)


def _at(index: tuple[int, ...]) -> str:
    if not index:
        return ""
    if len(index) == 1:
        return f" at row {index[0]}"
    if len(index) == 2:
        return f" at row {index[0]}, column {index[1]}"
    return f" at index {list(index)}"


def explain(got: torch.Tensor | None, truth: torch.Tensor) -> str:
    """What went wrong in the numbers, for a failing check's message: a NaN or inf where the
    float64 reference is finite (or a finite value where it is not), else the element farthest
    from the reference; each with its row (and column) and both values."""
    if got is None:
        return "no value came back (None: no gradient reached this input)"
    ref = truth.detach().double()
    out = got.detach().to(device=ref.device, dtype=torch.float64).reshape(ref.shape)
    out_finite, ref_finite = torch.isfinite(out), torch.isfinite(ref)

    def first(bad: torch.Tensor) -> tuple[tuple[int, ...], str]:
        where = tuple(int(i) for i in bad.nonzero()[0].tolist())
        count = "" if bad.numel() == 1 else f" ({int(bad.sum())} of {bad.numel()} elements; first{_at(where)})"
        return where, count

    # non-finite where the truth is finite: NaN first (the commonest), then +-inf
    for label, bad in (("NaN", torch.isnan(out) & ref_finite), ("inf", torch.isinf(out) & ref_finite)):
        if bad.any():
            where, count = first(bad)
            sign = "-" if label == "inf" and float(out[where]) < 0 else ""
            return f"{sign}{label} where the float64 reference is {float(ref[where]):.6g}{count}"
    bad = ~ref_finite & ~((out == ref) | (torch.isnan(out) & torch.isnan(ref)))
    if bad.any():
        where, count = first(bad)
        ref_v = float(ref[where])
        hint = " (a mean over no counted target)" if math.isnan(ref_v) else ""
        return f"{float(out[where]):.6g} where the float64 reference is {ref_v}{hint}{count}"
    diff = torch.where(ref_finite & out_finite, (out - ref).abs(), 0.0)
    if diff.numel() == 0:
        return "no elements"
    where = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
    worst = f"worst element{_at(where)}: " if where else ""
    return f"{worst}got {float(out[where]):.6g}, float64 reference {float(ref[where]):.6g}"


def _describe(exc: BaseException) -> str:
    last = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" at {last.filename.rsplit('/', 1)[-1]}:{last.lineno}" if last else ""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}{where}"[:500]


def _free(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()

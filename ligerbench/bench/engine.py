"""The bench engine: for each sweep point, draw one set of inputs, then time and measure every
selected provider on those same inputs, and write one record per (provider, case, metric).

    plan = make_plan(default_registry(), kernel="ce", sweep="vocab", mode="full", dtype="bf16", ...)
    run_plan(plan, run_id=..., writer=RecordWriter(path / "records.csv"))

What is timed (quantity = the mode):
    full      forward + backward: the only fair comparison, since several peers (Liger,
              ours_inplace) compute the gradient inside forward, so their forward carries
              backward's work and their backward is almost free;
    forward   the forward alone (inputs require grad, as in training);
    backward  the backward alone, its forward run untimed just before.
A provider that destroys its input (declares mutates_input) gets the input restored from a
pristine copy before each run, outside the timed region; the clone a caller would need to keep
its logits is timed on its own (quantity "clone") and reported beside, never inside, the time.
Memory is always that of a full step (memory.py). A provider that raises (CUDA out-of-memory
included) yields one error row for that point and the run goes on.

On several ranks (`bench --nproc N`: `plan.ranks` is a ranks.Group, ligerbench/distributed/)
every rank runs the same provider on its own inputs at the same time: the ranks meet before each
timed run (and before the memory step), and each figure is the worst rank's (max over ranks:
the step ends with its slowest rank). A provider's rows are written only once every rank has
said it succeeded; if any rank failed, the point gets one error row. Only rank 0 writes. A
failed or timed-out collective ends the run (the ranks are out of step); so does, at the
collective timeout, a provider that fails on some ranks only, while the others wait in its
collective.
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ligerbench.bench import memory as mem
from ligerbench.bench.ranks import LOCAL, Local, collective_failure
from ligerbench.bench.spec import BenchInputs, BenchSpec, SweepPoint, call
from ligerbench.bench.timing import Timing, TimingBudget, time_region
from ligerbench.records import Record, RecordWriter, settings_text
from ligerbench.registry import Provider

SUITE = "bench"
MEASURED = "measured"
NOT_A_MEASUREMENT = "not_a_measurement"  # verdict of every --smoke row
SMOKE_MESSAGE = "NOT A MEASUREMENT: tiny shapes through Triton's interpreter on CPU (--smoke)"


@dataclass(frozen=True)
class Plan:
    spec: BenchSpec
    providers: tuple[Provider, ...]
    points: tuple[SweepPoint, ...]
    mode: str
    device: torch.device
    seed: int
    budget: TimingBudget
    smoke: bool
    ranks: Local = LOCAL  # this process alone, or a ranks.Group (same interface)


def run_plan(plan: Plan, *, run_id: str, writer: RecordWriter, on_step: Callable[[str], None] = lambda s: None) -> None:
    """Every provider at every point; `on_step("<point> <provider>")` once a provider's rows at a
    point are written (a step: what the manifest's `completed` counts, and where a run stops
    when told to: lifecycle's Life.done)."""
    verdict = NOT_A_MEASUREMENT if plan.smoke else MEASURED
    note = SMOKE_MESSAGE if plan.smoke else ""
    reasons = plan.ranks.agree_unavailable({p.name: p.unavailable(plan.device.type) for p in plan.providers})
    settings = {p.name: settings_text(p.settings) for p in plan.providers}
    for point in plan.points:
        case = point.case

        def emit(provider: str, quantity: str, metric: str, value: float, unit: str, case=case, **kw) -> None:
            writer.write(
                Record.for_case(
                    case,
                    run_id=run_id,
                    suite=SUITE,
                    provider=provider,
                    quantity=quantity,
                    metric=metric,
                    value=value,
                    unit=unit,
                    limit=math.nan,
                    settings=settings.get(provider, ""),
                    **kw,
                )
            )

        inputs: BenchInputs | None = None
        for provider in plan.providers:
            step = f"{point.label} {provider.name}"
            reason = reasons[provider.name] or provider.supports(case)
            if reason:
                emit(provider.name, plan.mode, "time_ms", math.nan, "ms", verdict="skip", message=reason)
                on_step(step)
                continue
            error = ""
            try:
                if inputs is None:
                    inputs = plan.spec.make_inputs(case, plan.seed, plan.device)
                fn = provider.load()
                rows = list(measure_provider(fn, provider, inputs, plan))
            except Exception as exc:  # noqa: BLE001 -- any failure becomes an error row
                if plan.ranks.world > 1 and collective_failure(exc):
                    raise  # the ranks are out of step: the run ends here (the launcher names it)
                error = traceback.format_exception_only(type(exc), exc)[-1].strip()
                if plan.ranks.world > 1:  # into the ranks' log (launch.log)
                    print(f"ligerbench: rank {plan.ranks.rank}: {provider.name} at {case.id}: {error}", flush=True)
                if plan.device.type == "cuda":
                    torch.cuda.empty_cache()
            if plan.ranks.max([1.0 if error else 0.0])[0] > 0:  # did any rank fail?
                error = error or "another rank failed (its error is in launch.log)"
                emit(provider.name, plan.mode, "time_ms", math.nan, "ms", verdict="error", message=error[:300])
                on_step(step)
                continue
            for quantity, metric, value, unit, msg in rows:
                message = "; ".join(m for m in (msg, note) if m)
                emit(provider.name, quantity, metric, value, unit, verdict=verdict, message=message)
            on_step(step)
        del inputs
        if plan.device.type == "cuda":
            torch.cuda.empty_cache()


def measure_provider(fn: Callable, provider: Provider, inputs: BenchInputs, plan: Plan):
    """Yields (quantity, metric, value, unit, message) for one provider on one set of inputs;
    leaves the inputs as it found them."""
    leaves = inputs.leaves
    pristine = [t.detach().clone() for t in leaves] if provider.mutates_input else []
    state: dict = {}

    def reset() -> None:
        for t in leaves:
            t.grad = None
        with torch.no_grad():
            # pristine is empty unless the provider mutates its inputs
            for t, p in zip(leaves, pristine, strict=False):
                t.copy_(p)

    def forward() -> torch.Tensor:
        return call(fn, inputs)

    def full() -> torch.Tensor:
        loss = forward()
        loss.backward()
        return loss

    def setup_backward() -> None:
        reset()
        state["loss"] = forward()

    steps = {
        "full": (reset, full),
        "forward": (reset, forward),
        "backward": (setup_backward, lambda: state.pop("loss").backward()),
    }
    setup, timed = steps[plan.mode]
    ranks = plan.ranks
    many = f"; the slowest of {ranks.world} ranks" if ranks.world > 1 else ""

    def met(before: Callable[[], None]) -> Callable[[], None]:
        """before(), then every rank meets: outside the timed region."""
        return lambda: (before(), ranks.sync())

    def agree(x: float) -> float:
        return ranks.max([x])[0]

    try:
        t: Timing = time_region(timed, device=plan.device, setup=met(setup), budget=plan.budget, agree=agree)
        median, p20, p80, host = ranks.max([t.median_ms, t.p20_ms, t.p80_ms, t.host_ms])
        spread = f"p20 {p20:.4g} / p80 {p80:.4g} ms over {t.runs} runs{many}"
        yield plan.mode, "time_ms", median, "ms", spread
        yield plan.mode, "p20_ms", p20, "ms", ""
        yield plan.mode, "p80_ms", p80, "ms", ""
        if math.isfinite(host):
            yield plan.mode, "host_ms", host, "ms", "host time to issue one call (GPU idle at its start)"
        m = mem.measure(full, device=plan.device, input_bytes=mem.tensor_bytes(*inputs.positional), setup=met(reset))
        peak, extra, inputs_mib = ranks.max([m.peak_mib, m.extra_mib, m.inputs_mib])
        per_rank = f" (per rank: the largest of {ranks.world})" if ranks.world > 1 else ""
        yield "full", "peak_mib", peak, "MiB", per_rank.strip()
        yield "full", "extra_mib", extra, "MiB", f"over inputs, gradients included{per_rank}"
        yield "full", "inputs_mib", inputs_mib, "MiB", per_rank.strip()
        met(reset)()
        loss = full().detach().float().item()  # the same inputs give every peer the same loss
        yield "full", "loss", loss, "nats", "" if math.isfinite(loss) else "loss is not finite"
        if pristine:
            c = time_region(
                lambda: [p.clone() for p in pristine], device=plan.device, setup=ranks.sync, budget=plan.budget,
                agree=agree,
            )  # fmt: skip
            (clone_ms,) = ranks.max([c.median_ms])
            yield "clone", "clone_ms", clone_ms, "ms", "input clone a caller keeping its inputs would add"
    finally:
        reset()  # the next provider sees the original inputs, without gradients
        state.clear()

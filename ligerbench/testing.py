"""Check your own loss kernel from your own tests: no CLI, no package, no plugin needed.

    from ligerbench.testing import verify_provider

    def test_my_ce_matches_float64():
        verify_provider("ce", my_ce)                                  # the quick grid, on CPU
        verify_provider("ce", my_ce, reduction=["none"], dtype="fp32")  # a slice of it

The kernel's case grid (the `ligerbench verify` one: a preset, optionally filtered by any case
field) runs for the callable against the float64 reference, with the same tolerance rule. Any
failing or erroring check fails the test (AssertionError) naming each case with its error, the
limit and what went wrong in the numbers (the float64 reference's value, NaN/inf, the worst
element's row and column); a run that compared nothing fails too, with the reasons. The callable
follows the kernel's provider contract (docs/providers.md), and may carry `supports` (case ->
reason or None) to skip cases it does not handle. A registered `Provider` may be passed instead.

For one test per case:

    @pytest.mark.parametrize("case", cases("ce", reduction="none"), ids=lambda c: c.id)
    def test_each_case(case):
        verify_provider("ce", my_ce, cases=[case])

`run_provider` is the same without the assertion: it returns the Result to inspect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import pandas as pd

from ligerbench import device as devices
from ligerbench.builtin import default_registry
from ligerbench.cases import Case
from ligerbench.records import Record, to_frame
from ligerbench.registry import Provider, Registry
from ligerbench.verify.engine import make_plan, run_plan

COMPARED = ("pass", "fail")
MAX_LINES = 40  # failing checks listed in the assertion message; the Result has them all


@dataclass
class Result:
    """One run of a provider over a kernel's cases: its records (the columns of records.csv)."""

    provider: str
    kernel: str
    records: pd.DataFrame
    where: str  # "preset quick, cpu, seed 0"

    @property
    def failures(self) -> pd.DataFrame:
        return self.records[self.records["verdict"].isin(["fail", "error"])]

    @property
    def compared(self) -> int:
        return int(self.records["verdict"].isin(COMPARED).sum())

    @property
    def passed(self) -> bool:
        return self.compared > 0 and len(self.failures) == 0

    def explain(self) -> str:
        """Why this is not a pass ('' when it is)."""
        if self.passed:
            return ""
        if self.compared == 0 and len(self.failures) == 0:
            skips = self.records.drop_duplicates("message")["message"].tolist()
            reasons = "; ".join(m for m in skips[:5] if m) or "no case was selected"
            return f"{self.provider}: nothing was compared on kernel {self.kernel} ({self.where}): {reasons}"
        bad = self.failures
        head = f"{self.provider} failed {len(bad)} of {len(self.records)} checks on kernel {self.kernel}"
        lines = [f"{head} ({self.where}):"]
        for _, r in bad.head(MAX_LINES).iterrows():
            lines.append(f"  {r['verdict'].upper()} {r['suite']}/{r['quantity']} {r['case']}: {r['message']}")
        if len(bad) > MAX_LINES:
            lines.append(f"  ... and {len(bad) - MAX_LINES} more (Result.failures has them all)")
        return "\n".join(lines)


class _Rows:
    """The records of an in-memory run (verify's engine writes through `write`)."""

    def __init__(self) -> None:
        self.rows: list[Record] = []

    def write(self, record: Record) -> None:
        self.rows.append(record)


def _values(value) -> set[str]:
    items = [value] if isinstance(value, (str, int, float, bool)) else list(value)
    return {str(v) for v in items}


def cases(
    kernel: str, preset: str = "quick", device: str = "cpu", *, registry: Registry | None = None, **filters
) -> list[Case]:
    """The kernel's grid for a preset and device, narrowed by case fields (each a value or a list
    of values, e.g. reduction="none", dtype=["fp32", "bf16"]). A field or value the grid does not
    have is a ValueError naming the ones it has: a typo never selects nothing quietly."""
    return _select(registry or default_registry(), kernel, preset, devices.resolve(device).type, filters)


def _select(registry: Registry, kernel: str, preset: str, device_type: str, filters: dict) -> list[Case]:
    if kernel not in registry.kernels:
        broken = "".join(f"; plugin {n!r} failed to load: {e}" for n, e in registry.plugin_errors)
        raise ValueError(f"unknown kernel {kernel!r}; choose from {', '.join(registry.kernels)}{broken}")
    spec = registry.kernel(kernel)
    grid = spec.grid(preset, device_type)
    fields = [a.name for a in spec.axes]
    for name, value in filters.items():
        if name not in fields:
            raise ValueError(f"{name!r} is not an axis of kernel {kernel}; choose from {', '.join(fields)}")
        known = list(dict.fromkeys(str(getattr(c, name)) for c in grid))
        unknown = _values(value) - set(known)
        if unknown:
            choose = ", ".join(known)
            raise ValueError(f"{sorted(unknown)}: not a {name} of kernel {kernel}'s grid; choose from {choose}")
    return [c for c in grid if all(str(getattr(c, k)) in _values(v) for k, v in filters.items())]


def _as_provider(kernel: str, fn: Callable | Provider, *, mutates_input: bool, supports, name: str | None) -> Provider:
    if isinstance(fn, Provider):
        if fn.kernel != kernel:
            raise ValueError(f"provider {fn.name!r} is for kernel {fn.kernel!r}, not {kernel!r}")
        return fn
    if not callable(fn):
        raise TypeError(f"expected a callable or a ligerbench.registry.Provider, got {type(fn).__name__}")
    label = name or f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', type(fn).__name__)}"
    supports = supports or getattr(fn, "supports", None) or (lambda case: None)
    return Provider(
        name=label,
        kernel=kernel,
        description="under test (ligerbench.testing)",
        load=lambda: fn,
        mutates_input=mutates_input,
        supports=supports,
    )


def run_provider(
    kernel: str,
    fn: Callable | Provider,
    *,
    preset: str = "quick",
    device: str = "cpu",
    seed: int = 0,
    cases: Iterable[Case] | None = None,
    suites: list[str] | None = None,
    mutates_input: bool = False,
    supports: Callable[[Case], str | None] | None = None,
    name: str | None = None,
    registry: Registry | None = None,
    strict: bool = False,
    **filters,
) -> Result:
    """Run `fn` over the kernel's cases (all of the preset's grid, those matching `filters`, or
    exactly `cases`) and return the records; asserts nothing (verify_provider does)."""
    registry = registry or default_registry()
    dev = devices.resolve(device)
    grid = {c.id for c in _select(registry, kernel, preset, dev.type, filters)}
    provider = _as_provider(kernel, fn, mutates_input=mutates_input, supports=supports, name=name)
    registry.providers[(kernel, provider.name)] = provider  # the one under test, even over a namesake
    keep = grid
    if cases is not None:
        keep = {c.id for c in cases}
        if keep - grid:
            raise ValueError(f"not cases of kernel {kernel}'s {preset} grid on {dev.type}: {sorted(keep - grid)[:3]}")
    known_suites = [s.name for s in registry.suites_for(kernel)]
    for s in suites or []:
        if s not in known_suites:
            raise ValueError(f"unknown suite {s!r} of kernel {kernel}; choose from {', '.join(known_suites)}")
    plan = make_plan(
        registry,
        kernel=kernel,
        preset=preset,
        device_type=dev.type,
        suites=suites,
        providers=[provider.name],
        case_filter=lambda c: c.id in keep,
        strict=strict,
    )
    rows = _Rows()
    run_plan(plan, registry, run_id=f"testing-{kernel}", seed=seed, device=dev, writer=rows)  # type: ignore[arg-type]
    return Result(provider.name, kernel, to_frame(rows.rows), f"preset {preset}, {dev.type}, seed {seed}")


def verify_provider(kernel: str, fn: Callable | Provider, **options) -> Result:
    """`run_provider(kernel, fn, **options)`, then fail (AssertionError) unless every check ran
    passed and at least one was compared. Returns the Result when it passes."""
    result = run_provider(kernel, fn, **options)
    if not result.passed:
        raise AssertionError(result.explain())
    return result

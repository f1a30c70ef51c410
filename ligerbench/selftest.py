"""The selftest engine: run every planted bug (mutant) through the checks that exist to catch it.

    from ligerbench.selftest import collect, run
    mutants = collect(registry, device_type="cpu")
    run(registry, mutants, Context(preset="quick", device=torch.device("cpu"), seed=0, run_id=..., writer=...))

Mutants come from campaigns, one per engine that can run them:
  kernels   every provider registered with `mutant=True` for a registered kernel, run by the
            verify engine on the cases its `targets` select (all of the preset's grid when it
            declares none), beside the kernel's control provider on the same cases and inputs.
  converge  converge's planted patch bugs (a patch not applied, not reverted, `logits_to_keep`
            in eval only, ...) through the convergence suite: ligerbench/selftest_converge.py.
Another engine joins by adding its `Campaign` to `campaigns()`: `mutants(registry, device_type)`
names them, with their control and the suites they are meant for, and `run(...)` writes Records
whose provider is the mutant's name (and the control's rows beside them). The kill matrix
(ligerbench/killmatrix.py) reads only records.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ligerbench.cases import Case
from ligerbench.records import RecordWriter
from ligerbench.registry import Provider, Registry


@dataclass(frozen=True)
class Mutant:
    name: str
    campaign: str
    description: str
    # The correct implementation run on the same cases and inputs. A failed check counts as a
    # kill only where the control passes it: a failure both share is the check's, not the bug's.
    control: str
    suites: tuple[str, ...]  # the suites meant to see it; the matrix shows the others as n/a


@dataclass(frozen=True)
class Context:
    preset: str
    device: torch.device
    seed: int
    run_id: str
    writer: RecordWriter
    on_step: Callable[[str], None] = field(default=lambda s: None)


@dataclass(frozen=True)
class Campaign:
    name: str
    description: str
    mutants: Callable[[Registry, str], list[Mutant]]  # (registry, device type) -> its mutants
    run: Callable[[Registry, list[Mutant], Context], None]  # writes the records of those mutants


# ----------------------------------------------------------------------------- case slices


def in_slice(case: Case, target: dict) -> bool:
    """A case is in a slice when each named field has the value, or one of the tuple of values."""
    for name, allowed in target.items():
        values = allowed if isinstance(allowed, (tuple, list, set, frozenset)) else (allowed,)
        if getattr(case, name) not in values:
            return False
    return True


def check_targets(provider: Provider) -> None:
    """A misspelt field would silently select no case; refuse it instead."""
    known = set(Case.__dataclass_fields__)
    for target in provider.targets:
        unknown = set(target) - known
        if unknown:
            raise ValueError(
                f"mutant {provider.name}: unknown case field(s) {sorted(unknown)} in targets; "
                f"choose from {sorted(known)}"
            )


def targeted(provider: Provider) -> Callable[[Case], bool]:
    if not provider.targets:
        return lambda case: True
    return lambda case: any(in_slice(case, t) for t in provider.targets)


# ----------------------------------------------------------------------------- kernel mutants


def control_for(registry: Registry, kernel: str, device_type: str) -> Provider | None:
    """The first registered non-mutant provider of the kernel that runs here: registration order
    puts our own kernel first (`ours`, `flce_ours`), the implementation the mutants are built on."""
    for p in registry.providers_for(kernel):
        if p.unavailable(device_type) is None:
            return p
    return None


def _kernel_mutants(registry: Registry, device_type: str) -> list[Mutant]:
    found = []
    for p in registry.providers.values():
        if not p.mutant or p.kernel not in registry.kernels:
            continue
        check_targets(p)
        control = control_for(registry, p.kernel, device_type)
        found.append(
            Mutant(
                name=p.name,
                campaign="kernels",
                description=p.description,
                control=control.name if control else "",
                suites=tuple(s.name for s in registry.suites_for(p.kernel)),
            )
        )
    return found


def _union(providers: list[Provider]) -> Callable[[Case], bool]:
    filters = [targeted(p) for p in providers]
    return lambda case: any(f(case) for f in filters)


def _run_kernel_mutants(registry: Registry, mutants: list[Mutant], ctx: Context) -> None:
    from ligerbench.verify import make_plan, run_plan

    by_kernel: dict[str, list[Provider]] = {}
    for m in mutants:
        p = registry.providers[m.name]
        by_kernel.setdefault(p.kernel, []).append(p)
    for kernel, providers in by_kernel.items():
        control = control_for(registry, kernel, ctx.device.type)
        common = dict(kernel=kernel, preset=ctx.preset, device_type=ctx.device.type)
        run = dict(run_id=ctx.run_id, seed=ctx.seed, device=ctx.device, writer=ctx.writer)
        if control is not None:
            # once over the union of the mutants' slices: every mutant's cases have control rows
            plan = make_plan(registry, **common, providers=[control.name], case_filter=_union(providers))
            run_plan(plan, registry, **run, on_case=lambda c, name=control.name: ctx.on_step(f"{name} {c.id}"))
        for p in providers:
            plan = make_plan(registry, **common, providers=[p.name], case_filter=targeted(p))
            run_plan(plan, registry, **run, on_case=lambda c, p=p: ctx.on_step(f"{p.name} {c.id}"))


KERNEL_CAMPAIGN = Campaign(
    name="kernels",
    description="planted bugs of registered kernels, through the verify suites on their targeted cases",
    mutants=_kernel_mutants,
    run=_run_kernel_mutants,
)


def campaigns() -> tuple[Campaign, ...]:
    """Every campaign, as an explicit list: an engine's owner adds theirs here. A function, not a
    constant, because campaigns import this module for Campaign and Mutant."""
    from ligerbench import selftest_converge

    return (KERNEL_CAMPAIGN, selftest_converge.CAMPAIGN)


def collect(registry: Registry, device_type: str, chosen: tuple[Campaign, ...] | None = None) -> list[Mutant]:
    return [m for c in chosen or campaigns() for m in c.mutants(registry, device_type)]


def run(registry: Registry, mutants: list[Mutant], ctx: Context, chosen: tuple[Campaign, ...] | None = None) -> None:
    for c in chosen or campaigns():
        mine = [m for m in mutants if m.campaign == c.name]
        if mine:
            c.run(registry, mine, ctx)

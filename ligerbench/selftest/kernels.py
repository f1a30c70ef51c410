"""selftest's kernel campaign: every provider registered with `mutant=True`, run by the verify
engine on the cases its `targets` select (all of the preset's grid when it declares none), then
the kernel's control provider (`KernelSpec.control`, our kernel unless a plugin names its own, or
the one `selftest --control NAME` names: `use_control`) on the cases that judge its kills, with
the same inputs (`control_cases`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pandas as pd

from ligerbench.cases import Case
from ligerbench.records import to_frame
from ligerbench.registry import Campaign, Provider, Registry
from ligerbench.selftest import killmatrix
from ligerbench.selftest.model import Context, Mutant, check_targets, describe_targets, targeted
from ligerbench.verify.engine import make_plan, run_plan


def use_control(registry: Registry, kernel: str, name: str) -> None:
    """Judge the kernel's mutants against provider `name` (a plugin's own correct kernel, so its
    mutants are tested against it) instead of the registered `KernelSpec.control`."""
    p = registry.provider(kernel, name)  # KeyError naming the known ones
    if p.mutant or p.bench_only:
        raise ValueError(f"{name!r} is a {'planted bug' if p.mutant else 'bench-only setting'}, not a correct provider")
    registry.kernels[kernel] = dataclasses.replace(registry.kernels[kernel], control=name)


def control_for(registry: Registry, kernel: str, device_type: str) -> Provider | None:
    """The kernel's declared control (`KernelSpec.control`) when it runs here, else None (then
    no kill can be counted, and the matrix says so)."""
    name = registry.kernels[kernel].control
    p = registry.providers.get((kernel, name))
    return p if p is not None and p.unavailable(device_type) is None else None


def _kernel_mutants(registry: Registry, device_type: str) -> list[Mutant]:
    found = []
    for p in registry.providers.values():
        if not p.mutant:
            continue
        check_targets(p, registry.kernels[p.kernel].axes)
        control = control_for(registry, p.kernel, device_type)
        found.append(
            Mutant(
                name=p.name,
                campaign="kernels",
                description=p.description,
                control=control.name if control else "",
                suites=tuple(s.name for s in registry.suites_for(p.kernel)),
                kernel=p.kernel,
                needs=describe_targets(p),
            )
        )
    return found


def _union(providers: list[Provider]) -> Callable[[Case], bool]:
    filters = [targeted(p) for p in providers]
    return lambda case: any(f(case) for f in filters)


def _run_kernel_mutants(registry: Registry, mutants: list[Mutant], ctx: Context) -> None:
    by_kernel: dict[str, list[Mutant]] = {}
    for m in mutants:
        by_kernel.setdefault(m.kernel, []).append(m)
    for kernel, mine in by_kernel.items():
        control = control_for(registry, kernel, ctx.device.type)
        # planted bugs are variants of our kernels: judged as ours are, by the strict verdict (each
        # row keeps both yardsticks' errors, so the kill matrix also says which the default kills)
        common = dict(kernel=kernel, preset=ctx.preset, device_type=ctx.device.type, strict=True)
        run = dict(run_id=ctx.run_id, seed=ctx.seed, device=ctx.device, writer=ctx.writer)
        done: set[str] = set()  # the cases the control has run
        # the control's plan over every mutant's cases, made once; each round runs a part of it
        judge = None
        if control is not None:
            providers = [registry.provider(kernel, m.name) for m in mine]
            judge = make_plan(registry, **common, providers=[control.name], case_filter=_union(providers))
        for m in mine:
            p = registry.provider(kernel, m.name)
            plan = make_plan(registry, **common, providers=[p.name], case_filter=targeted(p))
            run_plan(plan, registry, **run, on_case=lambda c, p=p: ctx.on_step(f"{p.name} {c.id}"))
            # then the control on the cases that judge its kills, round by round, so a run stopped
            # later holds every judgment of the mutants it finished
            while judge is not None and (wanted := control_cases(_rows_of(ctx, kernel, m, control), [m], done)):
                done |= wanted
                part = dataclasses.replace(judge, cases=tuple(c for c in judge.cases if c.id in wanted))
                run_plan(part, registry, **run, on_case=lambda c, name=control.name: ctx.on_step(f"{name} {c.id}"))


def _rows_of(ctx: Context, kernel: str, mutant: Mutant, control: Provider) -> pd.DataFrame:
    """The records of the mutant and of its control so far (not the whole run's, each time)."""
    names = (mutant.name, control.name)
    return to_frame([r for r in ctx.writer.rows if r.kernel == kernel and r.provider in names])


def control_cases(df: pd.DataFrame, mutants: list[Mutant], done: set[str]) -> set[str]:
    """The cases the control must run on next, beyond `done`, for the kill matrix to be what it
    would be with the control run on every case of every mutant.

    A failing check is a kill only where the control passes it, and the matrix reads, per mutant
    and suite, whether some failing check is a kill (the evidence table: the first one, in the
    order the mutant's checks ran), and per mutant whether some kill also fails the default
    verdict. So each (mutant, suite) needs the control on its first failing check's case, and
    on the next one's only where the control fails that check; the same for each mutant's
    failing checks that fail the default verdict. Checks the mutant passes need no control: they
    are no kill whatever the control does. Our kernel is verified on every case by `verify`; here
    it is the yardstick of kills (the control ran on every targeted case until 2026-11-29: all 11
    kernels' selftests took 221 CPU-s, 170 with this, for the same matrices)."""
    rows = killmatrix.Rows(df)
    wanted: set[str] = set()
    for m in mutants:
        failing = rows.of(m.kernel, m.name)
        failing = failing[failing["verdict"].isin(["fail", "error"])]
        groups = [g for _, g in failing.groupby("suite", sort=False)]
        by_default = [killmatrix.fails_default(r) for _, r in failing.iterrows()]
        groups.append(failing[by_default] if len(failing) else failing)
        for group in groups:
            for _, row in group.iterrows():
                if row["case"] not in done:
                    wanted.add(row["case"])
                    break
                if rows.control_passes(m.kernel, m.control, row):
                    break
    return wanted


KERNEL_CAMPAIGN = Campaign(
    name="kernels",
    description="planted bugs of registered kernels, through the verify suites on their targeted cases",
    mutants=_kernel_mutants,
    run=_run_kernel_mutants,
)

"""selftest's kernel campaign: every provider registered with `mutant=True`, run by the verify
engine on the cases its `targets` select (all of the preset's grid when it declares none),
beside the kernel's control provider (`KernelSpec.control`, our kernel unless a plugin names
its own, or the one `selftest --control NAME` names: `use_control`) on the same cases and inputs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ligerbench.cases import Case
from ligerbench.registry import Campaign, Provider, Registry
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
    by_kernel: dict[str, list[Provider]] = {}
    for m in mutants:
        p = registry.provider(m.kernel, m.name)
        by_kernel.setdefault(p.kernel, []).append(p)
    for kernel, providers in by_kernel.items():
        control = control_for(registry, kernel, ctx.device.type)
        # planted bugs are variants of our kernels: judged as ours are, by the strict verdict (each
        # row keeps both yardsticks' errors, so the kill matrix also says which the default kills)
        common = dict(kernel=kernel, preset=ctx.preset, device_type=ctx.device.type, strict=True)
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

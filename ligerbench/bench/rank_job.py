"""What each rank of `bench --nproc N` runs (ligerbench/commands/ranks.py hands it the job and the
registry, the job's ad-hoc providers already added to it):

    bench_job(job, registry, rank=..., world=..., device=..., backend=..., progress=...)

The rank rebuilds the parent's plan (the kernel's sweep, split over the ranks, the same case ids
and providers, in order) and runs it with the bench engine on ranks.Group: every rank times the
same provider at once and each figure is the slowest rank's. Rank 0 writes the records into
the run folder and, once every step is done, ranks_done.json (`completed_steps`). Each rank's
marker (ligerbench/distributed/progress.py) names the step it is on.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ligerbench.bench.engine import Plan, run_plan
from ligerbench.bench.ranks import Group
from ligerbench.bench.spec import on_ranks
from ligerbench.bench.timing import SMOKE_BUDGET, TimingBudget
from ligerbench.distributed.jobs import BenchRankJob
from ligerbench.distributed.launch import PROGRESS, ranks_done
from ligerbench.distributed.progress import RankProgress, rank_writer
from ligerbench.registry import Registry


def bench_plan(job: BenchRankJob, registry: Registry, *, world: int, device: torch.device) -> Plan:
    kernel = job.kernel
    spec = registry.kernels[kernel].bench
    points = on_ranks(spec.sweeps[job.sweep](job.dtype, job.tokens, job.smoke), world)
    by_id = {p.case.id: p for p in points}
    missing = [c for c in job.cases if c not in by_id]
    if missing:
        raise RuntimeError(f"this rank's sweep lacks {len(missing)} of the job's points: {', '.join(missing)}")
    budget = SMOKE_BUDGET if job.smoke else TimingBudget(rep_ms=job.rep_ms)
    return Plan(
        spec=spec,
        providers=tuple(registry.provider(kernel, n) for n in job.providers),
        points=tuple(by_id[c] for c in job.cases),
        mode=job.mode,
        device=device,
        seed=job.seed,
        budget=budget,
        smoke=job.smoke,
        ranks=Group(device),
    )


def steps_of(plan: Plan) -> list[str]:
    """The plan's steps in the order the engine runs them, named as its `on_step` names them."""
    return [f"{point.label} {provider.name}" for point in plan.points for provider in plan.providers]


def bench_job(
    job: BenchRankJob,
    registry: Registry,
    *,
    rank: int,
    world: int,
    device: torch.device,
    backend: str,
    progress: RankProgress | None = None,
) -> None:
    plan = bench_plan(job, registry, world=world, device=device)
    run_path = Path(job.run_path)
    writer = rank_writer(run_path, rank)
    steps = steps_of(plan)
    progress = progress or RankProgress(run_path, rank, unit="steps")
    progress.plan(steps)
    done = 0

    def on_step(step: str) -> None:
        nonlocal done
        done += 1
        if rank == 0:
            print(f"{PROGRESS}{done}/{len(steps)}] {step}", flush=True)
        progress.start(done)  # the engine goes on to the next step

    try:
        progress.start(0)
        run_plan(plan, run_id=job.run_id, writer=writer, on_step=on_step)
    finally:
        writer.close()
    ranks_done(run_path, rank, completed_steps=done, world=world, backend=backend)

"""The internal entry point every rank runs, started by torch.distributed.run on behalf of
`verify --nproc N`, `bench --nproc N` and `converge --nproc N --parallel PLAN` (the job's type
picks: verify and converge here, bench in ligerbench/bench/rank_job.py; the job file it reads is
one dataclass of ligerbench/distributed/jobs.py, written by ligerbench/distributed/launch.py):

    python -m torch.distributed.run --nproc-per-node 2 --standalone -m ligerbench.commands.ranks JOB.json

Each rank joins the default group (gloo on CPU, NCCL on its GPU), rebuilds the parent's plan
(the same registry, suites, providers and case ids) and runs it with the verify engine, in
lockstep with the others: a provider's run is collective. Rank 0 writes the records into the
run folder and, once every case is done, ranks_done.json; the other ranks compare nothing.
A converge job runs each dtype's case of suites/converge_parallel.py on every rank the same way.

Fault injection for tests (LIGERBENCH_FAULT): "die:R" makes rank R exit with status 3 right after
joining the group, "hang:R" makes it sleep; either must end the run with a clear error.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from ligerbench import device as devices
from ligerbench import named
from ligerbench.bench.rank_job import bench_job
from ligerbench.builtin import default_registry
from ligerbench.converge.checker import ConvergeCase
from ligerbench.converge.models import PRESETS
from ligerbench.converge.mutants import PARALLEL_MUTANTS
from ligerbench.converge.parallel import CORRECT
from ligerbench.distributed.jobs import BenchRankJob, ConvergeRankJob, RankJob, VerifyRankJob, load
from ligerbench.distributed.launch import FAULT_ENV, PROGRESS, WARNINGS_LOG, ranks_done, warnings_to_file
from ligerbench.records import RecordWriter
from ligerbench.suites import converge_rl
from ligerbench.suites.converge_parallel import run_parallel_case
from ligerbench.verify.engine import make_plan, run_plan


def _fault(rank: int) -> None:
    kind, _, who = os.environ.get(FAULT_ENV, "").partition(":")
    if not kind or who != str(rank):
        return
    print(f"ligerbench: fault injection: rank {rank} {kind}s", flush=True)
    if kind == "die":
        os._exit(3)
    if kind == "hang":
        while True:
            time.sleep(60)


@record
def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    job = load(Path(args[0]))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if job.device_type == "cuda":
        dev = torch.device("cuda", local_rank)
        torch.cuda.set_device(dev)
    else:
        dev = torch.device("cpu")
    devices.prepare(dev)  # Triton's mode, before any kernel is imported
    backend = "nccl" if dev.type == "cuda" else "gloo"
    timeout = datetime.timedelta(seconds=job.collective_timeout_s)
    kw = {"device_id": dev} if dev.type == "cuda" else {}
    dist.init_process_group(backend, timeout=timeout, **kw)
    try:
        _fault(rank)
        with warnings_to_file(Path(job.run_path) / WARNINGS_LOG.format(rank=rank)):
            JOBS[type(job)](job, rank, world, dev, backend)
        # Every rank tears down together (bounded by the group's timeout). Without it a rank that
        # compared nothing reached destroy_process_group while rank 0 still wrote its results,
        # and gloo aborted it ("terminate called without an active exception", SIGABRT: the CI
        # runs of sessions 11 and 12, after every case had passed).
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _verify(job: VerifyRankJob, rank: int, world: int, dev: torch.device, backend: str) -> None:
    registry = default_registry()
    wanted = set(job.cases)
    plan = make_plan(
        registry,
        kernel=job.kernel,
        preset=job.preset,
        device_type=dev.type,
        suites=list(job.suites),
        providers=list(job.providers),
        case_filter=lambda c: c.id in wanted,
        strict=job.strict,
        repeat=job.repeat,
    )
    if len(plan.cases) != len(wanted):
        raise RuntimeError(f"rank {rank} rebuilt {len(plan.cases)} of the {len(wanted)} cases of the job")
    run_path = Path(job.run_path)
    writer = RecordWriter(run_path / "records.csv" if rank == 0 else Path(os.devnull))
    done = 0

    def on_case(case) -> None:
        nonlocal done
        done += 1
        if rank == 0:
            print(f"{PROGRESS}{done}/{len(plan.cases)}] {case.id}", flush=True)

    try:
        run_plan(plan, registry, run_id=job.run_id, seed=job.seed, device=dev, writer=writer, on_case=on_case)
    finally:
        writer.close()
    ranks_done(run_path, rank, completed_cases=done, world=world, backend=backend)


def _bench(job: BenchRankJob, rank: int, world: int, dev: torch.device, backend: str) -> None:
    registry = default_registry()
    named.add_adhoc(registry, job.kernel, list(job.providers), mutates_input=job.mutates_input)
    bench_job(job, registry, rank=rank, world=world, device=dev, backend=backend)


def _converge(job: ConvergeRankJob, rank: int, world: int, dev: torch.device, backend: str) -> None:
    """`converge --nproc N --parallel PLAN`: each dtype's case on every rank (suites/converge_parallel.py);
    rank 0 writes the records, then ranks_done.json with the loss curves for the plots."""
    preset = dataclasses.replace(PRESETS[job.preset], steps=job.steps, batch=job.batch)
    norm = PARALLEL_MUTANTS[job.mutant] if job.mutant else CORRECT
    run_path = Path(job.run_path)
    writer = RecordWriter(run_path / "records.csv" if rank == 0 else Path(os.devnull))
    curves, done = {}, 0
    try:
        for dt in job.dtypes:
            case = ConvergeCase(
                job.model, preset, dt, job.patch, seed=job.seed, device=dev.type,
                parallel=job.parallel, nproc=world, accum=job.accum,
            )  # fmt: skip
            run = converge_rl.run_parallel_case if job.rl else run_parallel_case
            result = run(case, run_id=job.run_id, norm=norm, sink=writer.write)
            curves[dt] = {"ref": result.ref.losses, "ours": result.ours.losses, "truth": result.truth.losses}
            done += 1
            if rank == 0:
                print(f"{PROGRESS}{done}/{len(job.dtypes)}] {case.id}", flush=True)
    finally:
        writer.close()
    ranks_done(run_path, rank, completed_cases=done, world=world, backend=backend, curves=curves)


# the job's type -> what each rank runs
JOBS: dict[type[RankJob], object] = {VerifyRankJob: _verify, BenchRankJob: _bench, ConvergeRankJob: _converge}


if __name__ == "__main__":
    main()

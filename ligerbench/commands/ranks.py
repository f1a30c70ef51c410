"""The internal entry point every rank runs, started by torch.distributed.run on behalf of
`verify --nproc N`, `bench --nproc N` and `converge --nproc N --parallel PLAN` (the job's type
picks: verify and converge here, bench in ligerbench/bench/rank_job.py; the job file it reads is
one dataclass of ligerbench/distributed/jobs.py, written by ligerbench/distributed/launch.py):

    python -m torch.distributed.run --nproc-per-node 2 --standalone -m ligerbench.commands.ranks JOB.json

Each rank joins the default group (gloo on CPU, NCCL on its GPU), rebuilds the parent's plan
(the same registry, suites, providers and case ids) and runs it with the verify engine, in
lockstep with the others: a provider's run is collective. Rank 0 writes the records into the
run folder and, once every case is done, ranks_done.json; the other ranks compare nothing.
A converge job runs each dtype's case of suites/converge/parallel.py on every rank the same way.

Every rank keeps a marker of the unit it is on (a verify case, a bench step, a converge dtype) in
the run folder (ligerbench/distributed/progress.py) and has faulthandler write its Python stacks
there when it is stopped or aborts, so that the parent names the rank that stalled or raised,
its unit and where it was. A rank that raises leaves at once, without the group's teardown: a
graceful teardown waits for peers that are gone or stuck (NCCL's finalize does), and
torch.distributed.run stops the others only once this rank has exited.

Fault injection for tests (LIGERBENCH_FAULT=KIND:R or KIND:R@K): rank R exits with status 3
(die), sleeps forever (hang) or raises (raise), right after joining the group, or with @K as it
starts its K-th unit (the K-1 before it finished, their rows written), or with @0 before it
joins the group. Each must end the run with a clear error naming the rank and its unit.
"""

from __future__ import annotations

import dataclasses
import datetime
import faulthandler
import os
import signal
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
from ligerbench.distributed.launch import (
    FAULT_ENV,
    PROGRESS,
    WARNINGS_LOG,
    ranks_done,
    warnings_to_file,
)
from ligerbench.distributed.progress import RankProgress, rank_writer, stack_file
from ligerbench.suites.converge import rl as converge_rl
from ligerbench.suites.converge.parallel import run_parallel_case
from ligerbench.verify.engine import make_plan, run_plan


def _fault(rank: int, unit: int | None = None) -> None:
    """The planted fault of LIGERBENCH_FAULT (module docstring) if it is this rank's at this
    point: `unit` None right after joining, 0 before joining, else the 1-based unit it starts."""
    kind, _, where = os.environ.get(FAULT_ENV, "").partition(":")
    who, _, at = where.partition("@")
    if not kind or who != str(rank) or (int(at) if at else None) != unit:
        return
    print(
        f"ligerbench: fault injection: rank {rank} {kind}s" + (f" at unit {unit}" if unit is not None else ""),
        flush=True,
    )
    if kind == "die":
        os._exit(3)
    if kind == "raise":
        raise RuntimeError(f"planted by {FAULT_ENV}: rank {rank} raises")
    if kind == "hang":
        while True:
            time.sleep(60)


# what each kind of job counts as its units (the parent's `planned`/`completed`)
UNITS = {VerifyRankJob: "cases", BenchRankJob: "steps", ConvergeRankJob: "dtypes"}


def _dump_stacks_when_stopped(run_path: Path, rank: int):
    """faulthandler writes every Python thread's stack to ranks/rank<R>-stack.txt when this rank
    is stopped (SIGTERM from torch.distributed.run ending the run, or from the launcher's wall
    clock; then it ends as SIGTERM would) or aborts (SIGABRT: NCCL's watchdog past the collective
    timeout). Returns the open file (faulthandler writes to its descriptor)."""
    sink = open(stack_file(run_path, rank), "w")  # noqa: SIM115 -- open until the rank's end
    faulthandler.enable(file=sink, all_threads=True)
    faulthandler.register(signal.SIGTERM, file=sink, all_threads=True, chain=True)
    return sink


def _stop_dumping_stacks(sink) -> None:
    """A rank that ends on its own has no stack to show: its empty file goes."""
    faulthandler.unregister(signal.SIGTERM)
    faulthandler.disable()
    sink.close()
    path = Path(sink.name)
    if path.exists() and path.stat().st_size == 0:
        path.unlink()


@record
def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    job = load(Path(args[0]))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    run_path = Path(job.run_path)
    progress = RankProgress(run_path, rank, unit=UNITS[type(job)], on_start=lambda index: _fault(rank, index + 1))
    stacks = _dump_stacks_when_stopped(run_path, rank)
    try:
        if job.device_type == "cuda":
            dev = torch.device("cuda", local_rank)
            torch.cuda.set_device(dev)
        else:
            dev = torch.device("cpu")
        devices.prepare(dev)  # Triton's mode, before any kernel is imported
        backend = "nccl" if dev.type == "cuda" else "gloo"
        # the bound on every collective wait, joining the group included (a rank that never
        # starts is waited for this long)
        timeout = datetime.timedelta(seconds=job.collective_timeout_s)
        kw = {"device_id": dev} if dev.type == "cuda" else {}
        _fault(rank, 0)
        dist.init_process_group(backend, timeout=timeout, **kw)
        progress.joined()
        _fault(rank)
        with warnings_to_file(run_path / WARNINGS_LOG.format(rank=rank)):
            JOBS[type(job)](job, rank, world, dev, backend, progress)
        # Every rank tears down together (bounded by the group's timeout). Without it a rank that
        # compared nothing reached destroy_process_group while rank 0 still wrote its results,
        # and gloo aborted it ("terminate called without an active exception", SIGABRT: seen
        # in CI after every case had passed).
        dist.barrier()
    except BaseException as exc:
        progress.failed(exc)
        _stop_dumping_stacks(stacks)  # its traceback says where it was
        raise
    dist.destroy_process_group()
    progress.finished()
    _stop_dumping_stacks(stacks)


def _verify(job: VerifyRankJob, rank: int, world: int, dev: torch.device, backend: str, progress: RankProgress) -> None:
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
    progress.plan([c.id for c in plan.cases])
    run_path = Path(job.run_path)
    writer = rank_writer(run_path, rank)
    done = 0

    def on_case(case) -> None:
        nonlocal done
        done += 1
        if rank == 0:
            print(f"{PROGRESS}{done}/{len(plan.cases)}] {case.id}", flush=True)
        progress.start(done)

    try:
        progress.start(0)
        run_plan(plan, registry, run_id=job.run_id, seed=job.seed, device=dev, writer=writer, on_case=on_case)
    finally:
        writer.close()
    ranks_done(run_path, rank, completed_cases=done, world=world, backend=backend)


def _bench(job: BenchRankJob, rank: int, world: int, dev: torch.device, backend: str, progress: RankProgress) -> None:
    registry = default_registry()
    named.add_adhoc(registry, job.kernel, list(job.providers), mutates_input=job.mutates_input)
    bench_job(job, registry, rank=rank, world=world, device=dev, backend=backend, progress=progress)


def _converge(
    job: ConvergeRankJob, rank: int, world: int, dev: torch.device, backend: str, progress: RankProgress
) -> None:
    """`converge --nproc N --parallel PLAN`: each dtype's case on every rank (suites/converge/parallel.py);
    rank 0 writes the records, then ranks_done.json with the loss curves for the plots."""
    preset = dataclasses.replace(PRESETS[job.preset], steps=job.steps, batch=job.batch)
    norm = PARALLEL_MUTANTS[job.mutant] if job.mutant else CORRECT
    run_path = Path(job.run_path)
    writer = rank_writer(run_path, rank)
    curves, done = {}, 0
    progress.plan(job.dtypes)
    try:
        for dt in job.dtypes:
            progress.start(done)
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
        progress.start(done)
    finally:
        writer.close()
    ranks_done(run_path, rank, completed_cases=done, world=world, backend=backend, curves=curves)


# the job's type -> what each rank runs
JOBS: dict[type[RankJob], object] = {VerifyRankJob: _verify, BenchRankJob: _bench, ConvergeRankJob: _converge}


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        # printed as Python would (torch.distributed's hook prefixes "[rank<R>]: "), then gone
        # without the interpreter's teardown, which would destroy the process group (module
        # docstring: it can wait for peers that never come)
        sys.excepthook(*sys.exc_info())
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)

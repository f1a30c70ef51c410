"""The internal entry point every rank runs, started by torch.distributed.run on behalf of
`verify --nproc N` or `bench --nproc N` (ligerbench/distributed/launch.py writes the job file
it reads; its "command" picks the job: verify here, bench in bench_worker.py):

    python -m torch.distributed.run --nproc-per-node 2 --standalone -m ligerbench.distributed.command JOB.json

Each rank joins the default group (gloo on CPU, NCCL on its GPU), rebuilds the parent's plan
(the same registry, suites, providers and case ids) and runs it with the verify engine, in
lockstep with the others: a provider's run is collective. Rank 0 writes the records into the
run folder and, once every case is done, ranks_done.json; the other ranks compare nothing.

Fault injection for tests (LIGERBENCH_FAULT): "die:R" makes rank R exit with status 3 right after
joining the group, "hang:R" makes it sleep; either must end the run with a clear error.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from ligerbench import device as devices
from ligerbench.builtin import default_registry
from ligerbench.distributed.bench_worker import bench_job
from ligerbench.distributed.launch import DONE_FILE, FAULT_ENV, PROGRESS
from ligerbench.records import RecordWriter
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
    job = json.loads(Path(args[0]).read_text())
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if job["device_type"] == "cuda":
        dev = torch.device("cuda", local_rank)
        torch.cuda.set_device(dev)
    else:
        dev = torch.device("cpu")
    devices.prepare(dev)  # Triton's mode, before any kernel is imported
    backend = "nccl" if dev.type == "cuda" else "gloo"
    timeout = datetime.timedelta(seconds=float(job["collective_timeout_s"]))
    kw = {"device_id": dev} if dev.type == "cuda" else {}
    dist.init_process_group(backend, timeout=timeout, **kw)
    try:
        _fault(rank)
        JOBS[job["command"]](job, rank, world, dev, backend)
    finally:
        dist.destroy_process_group()


def _verify(job: dict, rank: int, world: int, dev: torch.device, backend: str) -> None:
    registry = default_registry()
    wanted = set(job["cases"])
    plan = make_plan(
        registry,
        kernel=job["kernel"],
        preset=job["preset"],
        device_type=dev.type,
        suites=job["suites"],
        providers=job["providers"],
        case_filter=lambda c: c.id in wanted,
    )
    if len(plan.cases) != len(wanted):
        raise RuntimeError(f"rank {rank} rebuilt {len(plan.cases)} of the {len(wanted)} cases of the job")
    run_path = Path(job["run_path"])
    writer = RecordWriter(run_path / "records.csv" if rank == 0 else Path(os.devnull))
    done = 0

    def on_case(case) -> None:
        nonlocal done
        done += 1
        if rank == 0:
            print(f"{PROGRESS}{done}/{len(plan.cases)}] {case.id}", flush=True)

    try:
        run_plan(plan, registry, run_id=job["run_id"], seed=job["seed"], device=dev, writer=writer, on_case=on_case)
    finally:
        writer.close()
    dist.barrier()  # every rank finished every case
    if rank == 0:
        facts = {"completed_cases": done, "world": world, "backend": backend}
        (run_path / DONE_FILE).write_text(json.dumps(facts) + "\n")


def _bench(job: dict, rank: int, world: int, dev: torch.device, backend: str) -> None:
    bench_job(job, default_registry(), rank=rank, world=world, device=dev, backend=backend)


JOBS = {"verify": _verify, "bench": _bench}  # the job file's "command" -> what each rank runs

if __name__ == "__main__":
    main()

"""Starting real process groups: `verify --nproc N` and `bench --nproc N` run their plan on N
ranks started through torch's own launcher,

    python -m torch.distributed.run --nproc-per-node N --standalone -m ligerbench.commands.ranks JOB

gloo on CPU (Triton's interpreter; how CI tests it), NCCL on GPUs (one rank per GPU). Rank 0
writes the records into the run folder; this process then reads them.

Never a hang, never a silent green:
  - every collective wait is bounded, joining the group included (init_process_group's timeout,
    `collective_timeout`: at most 40 s), so a rank that stalls or raises ends the whole run
    within a minute: the others give up waiting for it and exit, then torch.distributed.run
    stops it (NCCL's watchdog enforces the bound: TORCH_NCCL_ASYNC_ERROR_HANDLING);
  - the launcher itself runs under a wall-clock timeout; past it the launcher's session and each
    rank's (torch.distributed.run starts every rank in a session of its own) are killed, and
    nothing else is touched;
  - a rank that raises or dies makes torch.distributed.run stop the others and exit non-zero;
  - whatever went wrong (non-zero exit, timeout, fewer cases completed than planned) is written
    as an `error` record naming it: the rank that stalled, raised or died and the unit it was on
    (each rank's marker, ligerbench/distributed/progress.py), with the launcher's last lines, so
    the run fails. The rows rank 0 had written stay in records.csv.
The launcher's whole output is kept in the run folder as launch.log; each rank's marker, and its
Python stacks when it was stopped, in ranks/.

Children always get NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
NVSHMEM_DISABLE_NVLS=1 (NVLink multicast stays off).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import ligerbench
from ligerbench.distributed import jobs, progress
from ligerbench.records import Record, append_record

CHILD_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    # NCCL's watchdog tears a rank down once a collective has waited past the group's timeout
    # (3: without aborting the communicator first, which can itself wait on a stuck peer); its
    # main thread may be blocked in a CUDA sync behind that collective and never see an error.
    # At once: no flight-recorder dump first (its wait can outlast the run's minute; each
    # rank's stack is written to the run folder instead)
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "0",
}
# fault injection for tests: "die:<rank>", "hang:<rank>", "raise:<rank>", each optionally
# "@<K>" (at the rank's K-th unit): commands/ranks.py
FAULT_ENV = "LIGERBENCH_FAULT"
# what each rank runs: named, not imported (it sits above this machinery: ligerbench/commands/)
WORKER = "ligerbench.commands.ranks"
JOB_FILE, LOG_FILE, DONE_FILE = "job.json", "launch.log", "ranks_done.json"


@dataclass
class Launched:
    returncode: int
    timed_out: bool
    seconds: float
    log: Path
    watchdog_ended: bool = False  # ended by the launcher after a rank's NCCL watchdog fired

    def tail(self, lines: int = 25) -> str:
        text = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        return "\n".join(text[-lines:])

    def diagnosis(self) -> str:
        """What each rank reported: fault injections, each rank's last exception, and the exit
        codes torch.distributed.run gives for the failed ranks; the log's tail if none."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        found = [m.group(0) for m in re.finditer(r"^ligerbench: fault injection.*$", text, re.M)]
        last: dict[str, str] = {}
        for m in re.finditer(r"^\[rank(\d+)\]: ([\w.]*(?:Error|Exception|OutOfStep)\b.*)$", text, re.M):
            last[m.group(1)] = m.group(2)
        found += [f"rank {r}: {msg}" for r, msg in sorted(last.items())]
        found += [f"rank {r} exit code {c}" for r, c in self.exit_codes().items()]
        return "\n".join(found) if found else self.tail()

    def exit_codes(self) -> dict[str, str]:
        """The failed ranks' exit codes, as torch.distributed.run's summary gives them."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return dict(re.findall(r"rank\s*: (\d+) \(local_rank.*\n\s*exitcode\s*: (-?\d+)", text))

    def watchdog_timeouts(self) -> dict[str, str]:
        """Ranks whose NCCL watchdog ended them at the collective timeout (they abort, SIGABRT,
        with no Python exception to mark), each with the watchdog's line."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        found = {}
        for line in re.findall(r"^.*collective operation timeout.*$", text, re.M):
            rank = re.search(r"\[rank(\d+)\]|Rank (\d+)\]", line)
            if rank:
                found.setdefault(rank.group(1) or rank.group(2), line.split("] ")[-1][:300])
        return found


def ranks_done(run_path: Path, rank: int, **facts) -> None:
    """Called by every rank at the end of its job: the ranks meet at a barrier (every rank
    finished every step), then rank 0 writes ranks_done.json with `facts`, which `run_job` reads."""
    import torch.distributed as dist  # the ranks' side only: the launching process needs none

    dist.barrier()
    if rank == 0:
        (run_path / DONE_FILE).write_text(json.dumps(facts) + "\n")


PROGRESS = "ligerbench: ["  # rank 0's line per finished case: "ligerbench: [i/N] case-id"


WARNINGS_LOG = "warnings-rank{rank}.log"  # each rank's Python warnings, in the run folder


@contextlib.contextmanager
def warnings_to_file(path: Path) -> Iterator[None]:
    """While a rank works, its Python warnings (e.g. FSDP2's "returned a view tensor", once per
    rank and step) are written to `path` instead of its output, which the parent echoes."""
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        with open(path, "a") as f:
            f.write(warnings.formatwarning(message, category, filename, lineno, line))

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


def warnings_note(run_path: Path) -> str | None:
    """One line naming the ranks' warning logs, or None when no rank warned."""
    logs = sorted(run_path.glob(WARNINGS_LOG.format(rank="*")))
    if not logs:
        return None
    count = sum(f.read_text(errors="replace").count("Warning: ") for f in logs)
    return f"ligerbench: the ranks raised {count} Python warnings: {run_path / WARNINGS_LOG.format(rank='*')}"


def echo_with(advance: Callable[[str], None]) -> Callable[[str], None]:
    """What to do with each line of the ranks' output: a finished case advances the progress
    bar, anything else is printed (on stderr)."""
    from rich.console import Console

    err = Console(stderr=True)

    def echo(line: str) -> None:
        if line.startswith(PROGRESS):
            advance(line.partition("] ")[2])
        else:
            err.print(line, markup=False, soft_wrap=True, highlight=False)

    return echo


# The longest a rank waits in one collective (joining the group included). A stalled rank ends
# the run this long after the others reach their next collective, plus torch.distributed.run's
# stop (a few seconds): within a minute. Legit waits are far shorter: a wait lasts only as
# long as the ranks' skew between two collectives, and long work (a converge dtype's training,
# a first Triton compile) is done by every rank at once, with collectives in between.
STALL_BOUND_S = 40.0


def collective_timeout(timeout_s: float) -> float:
    """The bound on one collective wait: a quarter of the run's wall clock, 10 s to STALL_BOUND_S."""
    return max(10.0, min(STALL_BOUND_S, timeout_s / 4))


def child_env() -> dict[str, str]:
    env = {**os.environ, **CHILD_ENV}
    # the ranks import ligerbench from where this process did (a source checkout included)
    root = str(Path(ligerbench.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def launch(
    nproc: int, args: list[str], *, log: Path, timeout_s: float, echo: Callable[[str], None] | None = None
) -> Launched:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--standalone"]
    cmd += ["--max-restarts", "0", "-m", WORKER, *args]
    started = time.perf_counter()
    with open(log, "w") as sink:
        sink.write("$ " + " ".join(cmd) + "\n")
        sink.flush()
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=child_env(), start_new_session=True
        )

        watchdog_fired = threading.Event()

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                sink.write(line)
                sink.flush()
                if WATCHDOG_LINE in line:
                    watchdog_fired.set()
                if echo:
                    echo(line.rstrip("\n"))

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        timed_out = False
        run_path = log.parent
        try:
            timed_out = _wait(proc, timeout_s, watchdog_fired)
            if proc.poll() is None:
                _kill_session(proc, run_path)
        except KeyboardInterrupt:  # the ranks live in sessions of their own: Ctrl-C never reaches them
            _kill_session(proc, run_path, graces=INTERRUPTED_GRACES_S)
            raise
        # a rank torch.distributed.run left behind (it gives up on one that ignores SIGKILL) holds
        # the output pipe open: it goes too, and the reader does not wait for it
        _kill_ranks(run_path, signal.SIGKILL)
        reader.join(timeout=10)
    note = warnings_note(log.parent)
    if note and echo:
        echo(note)
    ended = watchdog_fired.is_set() and not timed_out
    return Launched(proc.returncode, timed_out, round(time.perf_counter() - started, 1), log, ended)


# What NCCL's watchdog prints when a collective has waited past the group's timeout. The watchdog
# is meant to end its rank then, but torch 2.11's first signals the other ranks to dump their
# flight recorders and its rank lived on past the timeout: on four H100s, a rank stalled by
# LIGERBENCH_FAULT left the others blocked in a host sync behind the collective, still running
# 24 s after every watchdog had reported, until the wall clock. So the launcher ends the run
# itself WATCHDOG_GRACE_S after the first such line.
WATCHDOG_LINE = "Watchdog caught collective operation timeout"
WATCHDOG_GRACE_S = 5.0


def _wait(proc: subprocess.Popen, timeout_s: float, watchdog_fired: threading.Event) -> bool:
    """Wait for the launcher to exit: at most timeout_s (then True: timed out), and at most
    WATCHDOG_GRACE_S after a rank's NCCL watchdog reported a collective timeout (False: the
    ranks are ended as failed, the diagnosis names who waited and who stalled)."""
    deadline = time.monotonic() + timeout_s
    fired_at = None
    while True:
        now = time.monotonic()
        if now >= deadline:
            return True
        if fired_at is None and watchdog_fired.is_set():
            fired_at = now
        if fired_at is not None and now - fired_at >= WATCHDOG_GRACE_S:
            return False
        try:
            proc.wait(timeout=min(1.0, deadline - now))
            return False
        except subprocess.TimeoutExpired:
            continue


# After the wall clock: 10 s each. After Ctrl-C or SIGTERM: the run has ligerbench/signals.py's 8 s
# grace in all, its write-up included, and the ranks must be gone before it ends.
TIMEOUT_GRACES_S, INTERRUPTED_GRACES_S = (10.0, 10.0), (3.0, 2.0)


def _kill_session(proc: subprocess.Popen, run_path: Path, graces: tuple[float, float] = TIMEOUT_GRACES_S) -> None:
    """SIGTERM, then SIGKILL, to the launcher's own session (started with start_new_session) and
    to each rank's (torch.distributed.run starts every rank in a session of its own: signalling
    the launcher's alone would leave the ranks running once it is gone), each followed by up to
    its grace in seconds for the launcher to exit. On SIGTERM a rank writes its stack first."""
    for sig, grace in zip((signal.SIGTERM, signal.SIGKILL), graces, strict=True):
        _kill_ranks(run_path, sig)
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _kill_ranks(run_path: Path, sig: signal.Signals) -> None:
    """`sig` to the session of every rank of this run still running (their pids from their
    markers, each checked to be this run's rank: progress.rank_pids)."""
    for pid in progress.rank_pids(run_path):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)


def run_plan_on_ranks(
    plan,
    *,
    nproc: int,
    run_id: str,
    run_path: Path,
    seed: int,
    preset: str,
    device_type: str,
    timeout_s: float,
    echo: Callable[[str], None] | None = None,
) -> dict:
    """Run a verify plan on `nproc` real ranks; rank 0 writes run_path/records.csv. Problems are
    appended there as error records. Returns facts for env.json."""
    job = jobs.VerifyRankJob(
        kernel=plan.kernel,
        preset=preset,
        device_type=device_type,
        seed=seed,
        run_id=run_id,
        run_path=str(run_path),
        suites=tuple(s.name for s in plan.suites),
        providers=tuple(p.name for p in plan.providers),
        cases=tuple(c.id for c in plan.cases),
        strict=plan.strict,
        repeat=plan.repeat,
    )
    facts = run_job(job, nproc=nproc, planned=len(plan.cases), unit="cases", timeout_s=timeout_s, echo=echo)
    facts.pop("done")
    return facts


def run_job(
    job: jobs.RankJob,
    *,
    nproc: int,
    planned: int,
    unit: str,
    timeout_s: float,
    echo: Callable[[str], None] | None = None,
) -> dict:
    """Run `job` (ligerbench/distributed/jobs.py: commands/ranks.py picks what to run by its type)
    on `nproc` real ranks. Rank 0 writes run_path/records.csv and, at the end, ranks_done.json
    with `completed_<unit>`; fewer than `planned`, a non-zero exit or the wall clock running out
    is appended there as an error record (its kernel: the job's label). Returns facts for
    env.json (`completed_<unit>` among them) and, under "done", ranks_done.json as rank 0 wrote
    it (callers pop it)."""
    run_path = Path(job.run_path)
    jobs.dump(dataclasses.replace(job, collective_timeout_s=collective_timeout(timeout_s)), run_path / JOB_FILE)
    progress.clear(run_path)  # a folder launched into before: its ranks' markers are not these ranks'
    result = launch(nproc, [str(run_path / JOB_FILE)], log=run_path / LOG_FILE, timeout_s=timeout_s, echo=echo)
    ended = time.time()
    done_path = run_path / DONE_FILE
    done = json.loads(done_path.read_text()) if done_path.exists() else {}
    # ranks stopped before rank 0 reported: count what its records show instead
    completed = int(done[f"completed_{unit}"]) if done else units_with_records(run_path / "records.csv", unit)
    problems = []
    if result.timed_out:
        problems.append(f"the {nproc} ranks did not finish within {timeout_s:.0f} s and were killed")
    elif result.watchdog_ended:
        problems.append(f"a collective waited past its {collective_timeout(timeout_s):.0f} s bound (NCCL's watchdog) "
                        f"and the launcher ended the {nproc} ranks")  # fmt: skip
    elif result.returncode != 0:
        problems.append(f"a rank failed: torch.distributed.run exited {result.returncode}")
    if completed < planned:
        problems.append(
            f"only {completed} of {planned} {unit} completed"
            + ("" if done else " (the ranks never reported: counted from the cases in records.csv)")
        )
    if problems:
        culprits = progress.diagnose(
            run_path, nproc, exit_codes=result.exit_codes(), ended=ended, timed_out=result.watchdog_timeouts()
        )
        message = "; ".join(problems) + ".\n" + "".join(f"{line}\n" for line in culprits)
        message += f"The ranks said (whole output in launch.log):\n{result.diagnosis()}"
        if echo:
            for line in culprits:
                echo(f"ligerbench: {line}")
        _append(run_path / "records.csv", _launch_error(job.label, job.run_id, message))
    return {
        "nproc": nproc,
        "backend": done.get("backend", ""),
        "launch_returncode": result.returncode,
        "launch_timed_out": result.timed_out,
        "launch_s": result.seconds,
        f"completed_{unit}": completed,
        "completed_counted_from": "ranks_done.json" if done else "records.csv",
        "done": done,
    }


def units_with_records(path: Path, unit: str = "cases") -> int:
    """How many units have rows in records.csv (0 when there is none): distinct cases, or for
    bench's steps distinct (case, provider) pairs, a provider at a sweep point."""
    if not path.exists() or path.stat().st_size == 0:
        return 0
    key = ("case", "provider") if unit == "steps" else ("case",)
    with open(path, newline="") as f:
        return len({tuple(row.get(k) for k in key) for row in csv.DictReader(f) if row.get("case")})


def _launch_error(kernel: str, run_id: str, message: str) -> Record:
    return Record(
        run_id=run_id,
        suite="distributed",
        kernel=kernel,
        provider="launcher",
        case="",
        quantity="ranks",
        metric="",
        value=float("nan"),
        unit="",
        limit=float("nan"),
        verdict="error",
        message=message[:4000],
    )


def _append(path: Path, record: Record) -> None:
    append_record(path, record)

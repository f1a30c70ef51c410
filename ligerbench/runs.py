"""Setting up a run and closing it: device and preset resolution, the run folder, the
environment, the record writer and the progress bar. ligerbench/lifecycle.py drives a run
through them (start, work, finish, summary, exit code); commands call it, not these directly.

    dev, mode = runs.resolve_device("auto")
    run = runs.start("verify", "ce", device=dev, triton_mode=mode, seed=0, out=Path("results"), preset="quick")
    with run.progress("verify ce", total=len(cases)) as advance:
        ...  # run.writer.write(record); advance(case.id)
    run.finish(interrupted=False)

A run folder is `OUT/<run-id>/` with records.csv (rows flushed as written, so a killed run keeps
every completed row), env.json (device, versions, commit, seed, and the run manifest: see
below) and whatever the command writes beside them.

The run manifest is env.json's "run" block: what the run is and whether it finished.

    kind      the command (verify, converge, selftest, bench)
    kernel    the kernel (or "all" / a model's name), as the run's label says
    filters   the selection the command was given (filters, -k, --case, providers, mutants ...)
    unit      what `planned` and `completed` count (cases, mutants, dtypes, steps)
    planned, completed, rows (records written), interrupted, stopped_early (-x/--maxfail),
    finished  false from the start until finish() runs: a run killed outright reads unfinished
    duration_s

It lives in env.json, not in a file of its own, because env.json is already the file every
reader opens beside records.csv, it is written when the run starts (so a run killed before its
end says so: finished false) and there is one file fewer to lose or to get out of step.
`problems(env, records)` is THE reading of it that gate, report and the summaries share: the
reasons a run cannot read as passed. Run ids are unique
(time, command, label, random suffix) and folders are created with exist_ok=False, so no run
overwrites another.
"""

from __future__ import annotations

import contextlib
import csv
import datetime
import json
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Column

from ligerbench import device as devices
from ligerbench import env as environment
from ligerbench.exits import ExitCode, UnusableInput, UsageError
from ligerbench.records import VERDICTS, RecordWriter
from ligerbench.registry import Registry

DEFAULT_ROOT = Path("results")
_FIXED = Column(no_wrap=True, min_width=9)
_FLEX = Column(no_wrap=True, overflow="ellipsis", ratio=1)
console = Console(stderr=True)


def resolve_device(choice: str) -> tuple[torch.device, str]:
    """(device, Triton mode) for --device; the mode is set before any kernel is imported."""
    try:
        dev = devices.resolve(choice)
    except ValueError as exc:
        raise UsageError(str(exc), "--device") from exc
    return dev, devices.prepare(dev)


def resolve_preset(choice: str, device: torch.device, known: list[str]) -> str:
    """--preset: `auto` is `full` on a GPU and `quick` on CPU; anything else must be registered."""
    name = ("full" if device.type == "cuda" else "quick") if choice == "auto" else choice
    if name not in known:
        choices = ", ".join(["auto", *known])
        raise UsageError(f"unknown preset {choice!r}; choose from {choices}", "--preset")
    return name


def usage_error(message: str, option: str) -> UsageError:
    """A usage error (exit 2) naming the option it is about."""
    return UsageError(message, option)


def check_kernel(registry: Registry, kernel: str | None) -> str:
    """--kernel: a registered kernel's name (default: the first registered); returns it."""
    if kernel is None:
        return next(iter(registry.kernels))
    if kernel not in registry.kernels:
        raise usage_error(f"unknown kernel {kernel!r}; choose from {', '.join(registry.kernels)}", "--kernel")
    return kernel


def check_simulated(spec, device_type: str, option: str) -> None:
    """A kernel whose ranks cannot be simulated in one process on this device: a usage error
    naming what to run instead (never a run that waits on itself)."""
    if device_type not in spec.simulated_devices:
        raise usage_error(
            f"{spec.name} cannot run on simulated ranks on {device_type}: {spec.simulated_why} Run it on real "
            f"ranks (verify --nproc N, one {device_type} device per rank) or with --device "
            f"{' / '.join(spec.simulated_devices)}",
            option,
        )


def report_plugin_errors(registry: Registry) -> None:
    """Name each plugin that failed to load (once, with its error); the rest work."""
    for name, error in registry.plugin_errors:
        console.print(f"plugin {name!r} failed to load and was left out: {error}", soft_wrap=True, markup=False)


def new_run_dir(root: Path, command: str, label: str) -> tuple[str, Path]:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_id = f"{stamp}-{command}-{label}-{secrets.token_hex(3)}"
    path = Path(root) / run_id
    path.mkdir(parents=True, exist_ok=False)
    return run_id, path


def write_json(path: Path, data: dict) -> None:
    """Whole or not at all (a run killed while its manifest is rewritten keeps the last one)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


@dataclass
class Run:
    id: str
    path: Path
    env: dict
    writer: RecordWriter
    started: float = field(default_factory=time.perf_counter)
    # env.json is written by the main thread (checkpoint, finish) and, for a run that does not
    # stop when told, by the stop watchdog's thread (lifecycle.execute's give_up): one at a time
    lock: threading.RLock = field(default_factory=threading.RLock)

    @contextlib.contextmanager
    def progress(self, title: str, total: int, *, disable: bool = False) -> Iterator[Callable[[str], None]]:
        """A progress bar with a known total; yields advance(description)."""
        # the count and time never squeezed out; the case id (brackets in it: no markup) is cut first
        head = Column(no_wrap=True, min_width=len(title))
        columns = (
            TextColumn(f"[bold]{escape(title)}", table_column=head),
            BarColumn(bar_width=12),
            MofNCompleteColumn(table_column=_FIXED),
        )
        columns += (
            TimeElapsedColumn(table_column=Column(no_wrap=True, min_width=7)),
            TextColumn("{task.description}", markup=False, table_column=_FLEX),
        )
        with Progress(*columns, console=console, disable=disable) as bar:
            task = bar.add_task("", total=total)
            yield lambda description="": bar.update(task, advance=1, description=description)

    def finish(
        self,
        *,
        interrupted: bool,
        planned: int,
        completed: int,
        stopped_early: bool = False,
        rows: int | None = None,
        **facts,
    ) -> None:
        """Close the records and state in env.json's manifest how the run ended. `rows`: the
        rows in records.csv when others wrote them (the ranks of a --nproc run)."""
        with self.lock:
            self.writer.close()
            duration = round(time.perf_counter() - self.started, 1)
            self.env["run"].update(
                planned=planned,
                completed=completed,
                rows=len(self.writer.rows) if rows is None else rows,
                interrupted=interrupted,
                stopped_early=stopped_early,
                finished=True,
                duration_s=duration,
            )
            self.env.update(interrupted=interrupted, duration_s=duration, **facts)
            write_json(self.path / "env.json", self.env)

    def checkpoint(self, completed: int) -> None:
        """The manifest's counts so far, while the run works (finished stays false): a run killed
        outright (SIGKILL, a lost machine) still says how far it got."""
        with self.lock:
            if self.env["run"]["finished"]:
                return
            self.env["run"].update(completed=completed, rows=len(self.writer.rows))
            write_json(self.path / "env.json", self.env)

    def rows_on_disk(self) -> int:
        """The rows records.csv holds now (its writer closed first: the file holds every counted row)."""
        self.writer.close()
        path = self.path / "records.csv"
        if not path.exists():
            return 0
        with open(path, newline="") as f:
            return sum(1 for _ in csv.DictReader(f))

    @property
    def manifest(self) -> dict:
        return self.env["run"]


def start(
    command: str,
    label: str,
    *,
    device: torch.device,
    triton_mode: str,
    seed: int,
    out: Path,
    filters: dict | None = None,
    unit: str = "cases",
    planned: int = 0,
    **env_extra,
) -> Run:
    """Make the run folder, write env.json (its manifest says: not finished) and open records.csv."""
    try:
        run_id, path = new_run_dir(out, command, label)
        env = environment.capture(device, seed, triton_mode=triton_mode, command=command, **env_extra)
        env["run"] = {
            "kind": command,
            "kernel": label,
            "filters": filters or {},
            "unit": unit,
            "planned": planned,
            "completed": 0,
            "rows": 0,
            "interrupted": False,
            "stopped_early": False,
            "finished": False,
            "duration_s": None,
        }
        write_json(path / "env.json", env)
        writer = RecordWriter(path / "records.csv")
    except OSError as exc:
        raise UnusableInput(f"cannot write the run folder under {out}: {exc}") from exc
    return Run(run_id, path, env, writer)


# ----------------------------------------------------------------------------- reading a run


def problems(env: dict, records) -> list[str]:
    """Why a run cannot read as passed, whatever its rows say (empty: nothing stands in the way).
    `records` is the run's records (a DataFrame or a list of rows)."""
    m = env.get("run")
    if not isinstance(m, dict):
        return ["it has no run manifest (env.json 'run'): nothing says what it checked or that it finished"]
    out = []
    if not m.get("finished"):
        out.append("it never finished (killed, or still running): env.json says finished: false")
    if m.get("interrupted"):
        out.append(f"it was interrupted after {m.get('completed')} of {m.get('planned')} {m.get('unit', 'cases')}")
    elif m.get("stopped_early"):
        out.append(f"it stopped early (-x/--maxfail) after {m.get('completed')} of {m.get('planned')} {m.get('unit')}")
    elif m.get("finished") and m.get("completed", 0) < m.get("planned", 0):
        out.append(f"it completed {m.get('completed')} of {m.get('planned')} planned {m.get('unit', 'cases')}")
    if len(records) == 0:
        out.append("it has no records: it checked nothing")
    elif all(v == "skip" for v in _verdicts(records)):
        out.append("every row is a skip: it compared nothing")
    elif all(v in ("skip", "info") for v in _verdicts(records)):
        out.append("it judged nothing: every row is reported as info (a figure no limit applies to) or skipped")
    elif m.get("finished") and m.get("rows") is not None and len(records) != m["rows"]:
        out.append(f"its records.csv has {len(records)} rows where the run wrote {m['rows']}: truncated or edited")
    return out


def _verdicts(records) -> list[str]:
    if hasattr(records, "columns"):
        return records["verdict"].astype(str).tolist() if "verdict" in records.columns else []
    return [r.verdict for r in records]


def verdict_counts(df) -> dict[str, int]:
    """Rows per verdict, every verdict present (zeros included), plus any other verdict the rows use."""
    counts = {v: 0 for v in VERDICTS}
    if len(df):
        for verdict, n in df["verdict"].value_counts().items():
            counts[str(verdict)] = int(n)
    return counts


def json_report(env: dict, *, exit_code: int, status: str, counts: dict, path: Path | None = None, **extra) -> dict:
    """The JSON every command prints with --json: the same keys always (zeros and nulls included)."""
    m = env.get("run") or {}
    return {
        "command": env.get("command") or m.get("kind"),
        "status": status,
        "exit_code": exit_code,
        "run_id": path.name if path else None,
        "results": str(path) if path else None,
        "kernel": m.get("kernel"),
        "filters": m.get("filters", {}),
        "counts": counts,
        "planned": m.get("planned", 0),
        "completed": m.get("completed", 0),
        "unit": m.get("unit"),
        "interrupted": bool(m.get("interrupted", False)),
        "stopped_early": bool(m.get("stopped_early", False)),
        "duration_s": m.get("duration_s"),
        "device": env.get("device_name"),
        "device_type": env.get("device_type"),
        "commit": env.get("git_commit"),
        **extra,
    }


def print_json(data: dict) -> None:
    print(json.dumps(data, indent=2, default=str))


def status_word(code: int) -> str:
    return ExitCode.of(code).status


def say_interrupted(run: Run, how: str = "interrupted") -> None:
    m = run.manifest
    console.print(
        f"[bold yellow]{how}[/] after {m['completed']} of {m['planned']} {m['unit']}: "
        f"the {m['rows']} completed rows and a summary are kept in {run.path}",
        soft_wrap=True,
    )


class StopEarly(Exception):
    """-x / --maxfail: enough failing cases; the run stops and says so (stopped_early)."""


class FailingCases:
    """Counts the cases with a failing or erroring row as they are written; check() raises
    StopEarly once `limit` of them are seen (no limit: never)."""

    def __init__(self, writer: RecordWriter, limit: int | None):
        self.writer, self.limit = writer, limit
        self.cases: set[str] = set()
        self._seen = 0

    @property
    def count(self) -> int:
        return len(self.cases)

    def check(self) -> None:
        rows = self.writer.rows
        for r in rows[self._seen :]:
            if r.verdict in ("fail", "error"):
                self.cases.add(r.case)
        self._seen = len(rows)
        if self.limit is not None and self.count >= self.limit:
            raise StopEarly

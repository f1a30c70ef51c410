"""Setting up a run and closing it: the one helper every command uses for device and preset
resolution, the run folder, the environment, the record writer and the progress bar.

    dev, mode = runs.resolve_device("auto")
    run = runs.start("verify", "ce", device=dev, triton_mode=mode, seed=0, out=Path("results"), preset="quick")
    with run.progress("verify ce", total=len(cases)) as advance:
        ...  # run.writer.write(record); advance(case.id)
    run.finish(interrupted=False)

A run folder is `OUT/<run-id>/` with records.csv (rows flushed as written, so a killed run keeps
every completed row), env.json (device, versions, commit, seed, and once finished: duration and
whether it was interrupted) and whatever the command writes beside them. Run ids are unique
(time, command, label, random suffix) and folders are created with exist_ok=False, so no run
overwrites another.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ligerbench import device as devices
from ligerbench import env as environment
from ligerbench.records import RecordWriter
from ligerbench.registry import Registry

DEFAULT_ROOT = Path("results")
console = Console(stderr=True)


def resolve_device(choice: str) -> tuple[torch.device, str]:
    """(device, Triton mode) for --device; the mode is set before any kernel is imported."""
    try:
        dev = devices.resolve(choice)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--device") from exc
    return dev, devices.prepare(dev)


def resolve_preset(choice: str, device: torch.device, known: list[str]) -> str:
    """--preset: `auto` is `full` on a GPU and `quick` on CPU; anything else must be registered."""
    name = ("full" if device.type == "cuda" else "quick") if choice == "auto" else choice
    if name not in known:
        choices = ", ".join(["auto", *known])
        raise typer.BadParameter(f"unknown preset {choice!r}; choose from {choices}", param_hint="--preset")
    return name


def usage_error(message: str, option: str) -> typer.BadParameter:
    """A usage error (exit 2) naming the option it is about."""
    return typer.BadParameter(message, param_hint=option)


def check_kernel(registry: Registry, kernel: str | None) -> str:
    """--kernel: a registered kernel's name (default: the first registered); returns it."""
    if kernel is None:
        return next(iter(registry.kernels))
    if kernel not in registry.kernels:
        raise usage_error(f"unknown kernel {kernel!r}; choose from {', '.join(registry.kernels)}", "--kernel")
    return kernel


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
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")


@dataclass
class Run:
    id: str
    path: Path
    env: dict
    writer: RecordWriter
    started: float = field(default_factory=time.perf_counter)

    @contextlib.contextmanager
    def progress(self, title: str, total: int, *, disable: bool = False) -> Iterator[Callable[[str], None]]:
        """A progress bar with a known total; yields advance(description)."""
        columns = (TextColumn(f"[bold]{title}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        columns += (TextColumn("{task.description}", markup=False),)  # case ids hold brackets
        with Progress(*columns, console=console, disable=disable) as bar:
            task = bar.add_task("", total=total)
            yield lambda description="": bar.update(task, advance=1, description=description)

    def finish(self, *, interrupted: bool, **facts) -> None:
        """Close the records and state in env.json how the run ended."""
        self.writer.close()
        self.env.update(interrupted=interrupted, duration_s=round(time.perf_counter() - self.started, 1), **facts)
        write_json(self.path / "env.json", self.env)


def start(
    command: str, label: str, *, device: torch.device, triton_mode: str, seed: int, out: Path, **env_extra
) -> Run:
    """Make the run folder, write env.json and open records.csv."""
    try:
        run_id, path = new_run_dir(out, command, label)
        env = environment.capture(device, seed, triton_mode=triton_mode, command=command, **env_extra)
        write_json(path / "env.json", env)
        writer = RecordWriter(path / "records.csv")
    except OSError as exc:
        console.print(f"[bold red]{command}:[/] cannot write the run folder under {out}: {exc}", soft_wrap=True)
        raise typer.Exit(2) from exc
    return Run(run_id, path, env, writer)

"""`ligerbench selftest`: proof that every check fails on the bug it exists for.

    ligerbench selftest --preset quick                       # CPU (Triton's interpreter), CI
    ligerbench selftest --mutant mutant_zloss_no_grad         # one planted bug

The command only orchestrates: campaigns and how mutants run in ligerbench/selftest.py, the kill
matrix in ligerbench/killmatrix.py, the mutants themselves in ligerbench/providers/*mutants.py.
"""

from __future__ import annotations

import random
import time
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from ligerbench import device as devices
from ligerbench import env as environment
from ligerbench import rundir

SelftestPreset = Enum("SelftestPreset", {p: p for p in ("auto", "quick", "full")}, type=str)
SelftestDevice = Enum("SelftestDevice", {d: d for d in devices.DEVICE_CHOICES}, type=str)
console = Console(stderr=True)


def selftest(
    preset: Annotated[
        SelftestPreset,
        typer.Option(
            help="Case sizes: quick (CPU, CI), full (GPU); auto picks by device. Each mutant runs "
            "only on the cases its `targets` select."
        ),
    ] = SelftestPreset.auto,
    mutant: Annotated[
        Optional[list[str]], typer.Option(help="Only these mutants (repeatable); default: every registered one.")
    ] = None,
    device: Annotated[SelftestDevice, typer.Option(help="Where to run: auto prefers CUDA.")] = SelftestDevice.auto,
    seed: Annotated[int, typer.Option(help="Seed of every case's inputs; same seed, same numbers.")] = 0,
    out: Annotated[Path, typer.Option(help="Results root; each run gets a new folder inside.")] = rundir.DEFAULT_ROOT,
):
    """Run every planted bug (mutant) through the suites and print the kill matrix (mutant x suite:
    killed / survived / n/a). A kill counts only where the correct provider passes the
    same check on the same inputs.

    Exit status: 0 when every mutant is killed by some suite, 1 when any survives every suite
    (named), 2 on a usage error. Results go to OUT/<run-id>/: records.csv, kill_matrix.md,
    kill_matrix.csv, env.json.
    """
    try:
        dev = devices.resolve(device.value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--device") from exc
    mode = devices.prepare(dev)  # before any kernel import
    preset_name = ("full" if dev.type == "cuda" else "quick") if preset.value == "auto" else preset.value

    from ligerbench import killmatrix
    from ligerbench import selftest as engine
    from ligerbench.records import RecordWriter
    from ligerbench.registry import default_registry

    registry = default_registry()
    try:
        found = engine.collect(registry, dev.type)
    except ValueError as exc:  # a mutant's targets name no case field
        raise typer.BadParameter(str(exc), param_hint="targets") from exc
    known = [m.name for m in found]
    for name in mutant or []:
        if name not in known:
            raise typer.BadParameter(f"unknown mutant {name!r}; choose from {', '.join(known)}", param_hint="--mutant")
    chosen = [m for m in found if not mutant or m.name in mutant]
    if not chosen:
        raise typer.BadParameter("no mutant is registered", param_hint="--mutant")

    run_id, path = rundir.new_run_dir(out, "selftest", "all")
    env = environment.capture(dev, seed, triton_mode=mode, preset=preset_name, command="selftest")
    rundir.write_json(path / "env.json", env)
    random.seed(seed)
    writer = RecordWriter(path / "records.csv")
    start = time.perf_counter()
    try:
        with console.status("selftest") as status:
            ctx = engine.Context(
                preset=preset_name,
                device=dev,
                seed=seed,
                run_id=run_id,
                writer=writer,
                on_step=lambda s: status.update(f"selftest {s}"),
            )
            engine.run(registry, chosen, ctx)
    finally:
        writer.close()
    df = writer.frame()
    table = killmatrix.matrix(df, chosen)
    table.to_csv(path / "kill_matrix.csv", index=False)
    title = f"ligerbench selftest --preset {preset_name} ({run_id})"
    (path / "kill_matrix.md").write_text(killmatrix.markdown(df, chosen, env, title=title))
    _print(table, killmatrix.control_problems(df, chosen), path, time.perf_counter() - start)
    raise typer.Exit(1 if killmatrix.survivors(table) else 0)


def _print(table, bad_control, path: Path, seconds: float) -> None:
    out = Console()
    t = Table(title="kill matrix (mutant x suite)")
    for c in table.columns.drop("about"):
        t.add_column(str(c), overflow="fold")
    style = {"killed": "green", "survived": "red", "SURVIVED": "bold red"}
    for _, row in table.drop(columns="about").iterrows():  # descriptions live in kill_matrix.md
        t.add_row(*[f"[{style[v]}]{v}[/]" if v in style else str(v) for v in row])
    out.print(t)
    if len(bad_control):
        out.print(f"[yellow]the control fails {len(bad_control)} checks (no kill counted there):[/]")
        for _, r in bad_control.head(20).iterrows():
            out.print(f"  {r['verdict']} {r['suite']} {r['provider']} {r['quantity']} {r['case']}", markup=False)
    left = table.loc[table["verdict"] != "killed", "mutant"].tolist()
    if left:
        out.print(f"[bold red]{len(left)} mutant(s) survived every suite:[/] {', '.join(left)}")
    else:
        out.print(f"[green]every mutant killed[/] ({len(table)} mutants, {seconds:.0f} s)")
    out.print(f"results: {path}")

"""`ligerbench selftest`: proof that every check fails on the bug it exists for.

    ligerbench selftest --preset quick                        # CPU (Triton's interpreter), CI
    ligerbench selftest --mutant mutant_zloss_no_grad          # one planted bug
    ligerbench selftest --kernel flce                          # one kernel's planted bugs
    ligerbench selftest --kernel ce --control mypkg.losses:my_ce   # kills judged against your kernel

The command only orchestrates: campaigns and how mutants run in ligerbench/selftest/, the kill
matrix in ligerbench/selftest/killmatrix.py, the mutants themselves registered by each kernel's
suite module (and converge's in ligerbench/converge/mutants.py).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from ligerbench import named, runs
from ligerbench.builtin import default_registry
from ligerbench.selftest import engine, kernels, killmatrix


def selftest(
    preset: Annotated[
        str,
        typer.Option(
            help="Case sizes: quick (CPU, CI), full (GPU); auto picks by device. Each mutant runs "
            "only on the cases its `targets` select."
        ),
    ] = "auto",
    kernel: Annotated[
        Optional[str], typer.Option(help="Only this kernel's planted bugs (default: every campaign's).")
    ] = None,
    mutant: Annotated[
        Optional[list[str]], typer.Option(help="Only these mutants (repeatable); default: every registered one.")
    ] = None,
    control: Annotated[
        Optional[str],
        typer.Option(
            help="The correct provider kills are judged against (default: the kernel's registered control, "
            "ours for ce and flce); MODULE:FUNCTION or PATH.py:FUNCTION for your own callable. Needs --kernel."
        ),
    ] = None,
    device: Annotated[str, typer.Option(help="Where to run: auto, cpu or cuda; auto prefers CUDA.")] = "auto",
    seed: Annotated[int, typer.Option(help="Seed of every case's inputs; same seed, same numbers.")] = 0,
    out: Annotated[Path, typer.Option(help="Results root; each run gets a new folder inside.")] = runs.DEFAULT_ROOT,
):
    """Run every planted bug (mutant) through the suites and print the kill matrix (mutant x suite:
    killed / survived / n/a). A kill counts only where the correct provider passes the
    same check on the same inputs.

    Exit status: 0 when every mutant is killed by some suite, 1 when any survives every suite
    (named), 2 on a usage error. Results go to OUT/<run-id>/: records.csv, kill_matrix.md,
    kill_matrix.csv, env.json.

    Examples:

      ligerbench selftest --preset quick --device cpu

      ligerbench selftest --kernel ce --mutant mutant_low_precision_target_grad

      ligerbench selftest --kernel ce --control my_ce      # a plugin's mutants against its own kernel
    """
    dev, mode = runs.resolve_device(device)
    registry = default_registry()
    runs.report_plugin_errors(registry)
    preset_name = runs.resolve_preset(preset, dev, list(registry.presets))
    if kernel is not None:
        runs.check_kernel(registry, kernel)
    if control is not None:
        _use_control(registry, kernel, control, dev.type)
    try:
        found = engine.collect(registry, dev.type)
    except ValueError as exc:  # a mutant's targets name no case field
        raise typer.BadParameter(str(exc), param_hint="targets") from exc
    if kernel is not None:
        found = [m for m in found if m.kernel == kernel]
    known = [m.name for m in found]
    for name in mutant or []:
        if name not in known:
            raise typer.BadParameter(f"unknown mutant {name!r}; choose from {', '.join(known)}", param_hint="--mutant")
    chosen = [m for m in found if not mutant or m.name in mutant]
    if not chosen:
        raise typer.BadParameter("no mutant is registered for this selection", param_hint="--mutant")

    run = runs.start("selftest", kernel or "all", device=dev, triton_mode=mode, seed=seed, out=out, preset=preset_name)
    random.seed(seed)
    interrupted = False
    try:
        with runs.console.status("selftest") as status:
            ctx = engine.Context(
                preset=preset_name,
                device=dev,
                seed=seed,
                run_id=run.id,
                writer=run.writer,
                on_step=lambda s: status.update(f"selftest {s}"),
            )
            engine.run(registry, chosen, ctx)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        run.finish(interrupted=interrupted, mutants=len(chosen))
    df = run.writer.frame()
    table = killmatrix.matrix(df, chosen)
    table.to_csv(run.path / "kill_matrix.csv", index=False)
    title = f"ligerbench selftest --preset {preset_name} ({run.id})"
    (run.path / "kill_matrix.md").write_text(killmatrix.markdown(df, chosen, run.env, title=title))
    _print(table, killmatrix.control_problems(df, chosen), run.path, run.env["duration_s"])
    if interrupted:
        raise typer.Exit(130)
    raise typer.Exit(1 if killmatrix.survivors(table) else 0)


def _use_control(registry, kernel: str | None, control: str, device_type: str) -> None:
    """--control: the named provider (registered, or MODULE:FUNCTION) judges the kernel's kills."""
    if kernel is None:
        raise runs.usage_error("--control names a provider of one kernel: give --kernel too", "--control")
    named.add_adhoc(registry, kernel, [control])
    try:
        kernels.use_control(registry, kernel, control)
    except (KeyError, ValueError) as exc:
        raise runs.usage_error(str(exc).strip("'\""), "--control") from exc
    named.require_loadable(registry, kernel, [control], device_type)  # no control, no kill: exit 1
    runs.console.print(f"kills of {kernel}'s mutants are judged against {control}", markup=False)


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

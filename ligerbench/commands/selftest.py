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
from rich.text import Text

from ligerbench import kexpr, named, runs, tables
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
    keyword: Annotated[
        Optional[str], typer.Option("-k", help="Only mutants whose name matches EXPR (and/or/not/( ), as in pytest).")
    ] = None,
    collect_only: Annotated[
        bool, typer.Option("--collect-only", "--dry-run", help="Print the mutants a run would take, run nothing.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON summary on stdout instead of tables.")] = False,
):
    """Run every planted bug (mutant) through the suites and print the kill matrix (mutant x suite:
    killed / survived / n/a). A kill counts only where the correct provider passes the
    same check on the same inputs.

    Exit status: 0 when every mutant is killed by some suite, 1 when any survives every suite
    (named), 2 on a usage error, 130 when interrupted (the kill matrix of the completed mutants
    is kept). Results go to OUT/<run-id>/: records.csv, kill_matrix.md, kill_matrix.csv, env.json.

    Examples:

      ligerbench selftest --preset quick --device cpu

      ligerbench selftest --kernel ce --mutant mutant_low_precision_target_grad

      ligerbench selftest --kernel ce --control my_ce      # a plugin's mutants against its own kernel

      ligerbench selftest -k "upstream or zloss" --collect-only
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
    try:
        matches = kexpr.compile_expr(keyword) if keyword is not None else (lambda name: True)
    except ValueError as exc:
        raise runs.usage_error(str(exc), "-k") from exc
    chosen = [m for m in found if (not mutant or m.name in mutant) and matches(m.name)]
    if not chosen:
        raise typer.BadParameter("no mutant is registered for this selection", param_hint="--mutant")
    selection = {k: v for k, v in {"kernel": kernel, "mutant": mutant, "k": keyword}.items() if v}
    if collect_only:
        _collect(chosen, preset_name, selection, as_json)
        raise typer.Exit(0)

    run = runs.start(
        "selftest",
        kernel or "all",
        device=dev,
        triton_mode=mode,
        seed=seed,
        out=out,
        filters=selection,
        unit="mutants",
        planned=len(chosen),
        preset=preset_name,
    )
    random.seed(seed)
    interrupted = False
    names = {m.name for m in chosen}
    begun: list[str] = []  # mutants in the order they started; all but the last are done
    try:
        with run.progress("selftest", total=len(chosen), disable=as_json) as advance:

            def on_step(step: str) -> None:
                who = step.split(" ", 1)[0]
                if who in names and who not in begun:
                    if begun:
                        advance(f"{begun[-1]} done")
                    begun.append(who)

            ctx = engine.Context(
                preset=preset_name, device=dev, seed=seed, run_id=run.id, writer=run.writer, on_step=on_step
            )
            engine.run(registry, chosen, ctx)
            if begun:
                advance(f"{begun[-1]} done")
    except KeyboardInterrupt:
        interrupted = True
    finally:
        ran = {r.provider for r in run.writer.rows}
        started = sum(m.name in ran for m in chosen)  # the last one started may be partial when interrupted
        run.finish(interrupted=interrupted, planned=len(chosen), completed=started - 1 if interrupted else started)
        df = run.writer.frame()
        done = [m for m in chosen if m.name in ran]
        table = killmatrix.matrix(df, done if interrupted else chosen)
        table.to_csv(run.path / "kill_matrix.csv", index=False)
        title = f"ligerbench selftest --preset {preset_name} ({run.id})"
        (run.path / "kill_matrix.md").write_text(
            killmatrix.markdown(df, done if interrupted else chosen, run.env, title=title)
        )
    left = killmatrix.survivors(table)
    code = runs.INTERRUPTED if interrupted else (1 if left or runs.problems(run.env, df) else 0)
    if as_json:
        counts = {"mutants": len(chosen), "killed": len(table) - len(left), "survived": len(left)}
        counts |= runs.verdict_counts(df)
        extra = {"survivors": left, "problems": runs.problems(run.env, df)}
        runs.print_json(runs.json_report(run.env, exit_code=code, status=runs.status_word(code), counts=counts,
                                         path=run.path, **extra))  # fmt: skip
    else:
        _print(table, killmatrix.control_problems(df, chosen), run.path, run.env["duration_s"])
    if interrupted:
        runs.say_interrupted(run)
    raise typer.Exit(code)


def _collect(chosen, preset: str, selection: dict, as_json: bool) -> None:
    facts = {"command": "selftest", "preset": preset, "filters": selection, "mutants": len(chosen)}
    facts["mutant_names"] = [m.name for m in chosen]
    if as_json:
        runs.print_json(facts)
        return
    for m in chosen:
        print(f"{m.name}  ({m.campaign}, {m.kernel or '-'}; suites {', '.join(m.suites)})")
    print(f"{len(chosen)} mutants; preset {preset}")


STYLES = {"killed": "green", "survived": "red", "SURVIVED": "bold red"}


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
    shown = table.drop(columns="about")  # descriptions live in kill_matrix.md
    if tables.grid_width(list(shown.columns), shown.values.tolist()) <= out.width:
        tables.show(out, "kill matrix (mutant x suite)", list(shown.columns), shown.values.tolist(), styles=STYLES)
    else:  # narrow: one line per mutant, the suites named by what they did (n/a left out)
        out.print(Text("kill matrix (mutant: suites that killed it / it survived; n/a left out)", style="bold"))
        suites = [c for c in shown.columns if c not in ("mutant", "kernel", "verdict")]
        for _, row in shown.iterrows():
            line = Text(f"{row['mutant']} ({row['kernel'] or '-'}): ")
            killed = [x for x in suites if row[x] == "killed"]
            survived = [x for x in suites if row[x] == "survived"]
            if killed:
                line.append("killed by ", style="green")
                line.append(", ".join(killed))
            else:
                line.append(row["verdict"], style=STYLES.get(row["verdict"], ""))
            if survived:
                line.append("; survived " + ", ".join(survived))
            out.print(line)
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

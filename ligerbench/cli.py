"""The ligerbench command line. Commands only orchestrate: the machinery lives in the modules.

ligerbench verify --kernel ce --reduction none
ligerbench list
"""

from __future__ import annotations

import json
import random
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ligerbench import device as devices
from ligerbench import env as environment
from ligerbench import rundir, summary
from ligerbench.bench_cli import bench
from ligerbench.cases import IGNORE_PATTERNS, LOGITS_KINDS, OPTIONS, REDUCTIONS
from ligerbench.converge.command import converge
from ligerbench.gate_cli import gate
from ligerbench.records import RecordWriter
from ligerbench.registry import default_registry
from ligerbench.report_cli import report
from ligerbench.selftest_cli import selftest

app = typer.Typer(
    help="Verify and benchmark Triton loss kernels against a float64 truth and their peers.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console(stderr=True)

KernelName = Enum("KernelName", {"ce": "ce", "flce": "flce"}, type=str)
ReductionName = Enum("ReductionName", {r: r for r in REDUCTIONS}, type=str)
IgnorePattern = Enum("IgnorePattern", {p: p for p in IGNORE_PATTERNS}, type=str)
OptionName = Enum("OptionName", {o: o for o in OPTIONS}, type=str)
LogitsKind = Enum("LogitsKind", {k: k for k in LOGITS_KINDS}, type=str)
DtypeName = Enum("DtypeName", {d: d for d in ("fp32", "bf16", "fp16")}, type=str)
DeviceName = Enum("DeviceName", {d: d for d in devices.DEVICE_CHOICES}, type=str)
PresetName = Enum("PresetName", {p: p for p in ("auto", "quick", "full")}, type=str)


def _values(items) -> list[str] | None:
    return [i.value for i in items] if items else None


@app.command("verify")
def verify(
    kernel: Annotated[KernelName, typer.Option(help="Kernel to verify.")] = KernelName.ce,
    reduction: Annotated[
        Optional[list[ReductionName]], typer.Option(help="Only these reductions (repeatable).")
    ] = None,
    ignore_pattern: Annotated[
        Optional[list[IgnorePattern]], typer.Option(help="Only these ignore-index patterns (repeatable).")
    ] = None,
    dtype: Annotated[Optional[list[DtypeName]], typer.Option(help="Only these logits dtypes (repeatable).")] = None,
    option: Annotated[
        Optional[list[OptionName]], typer.Option(help="Only these loss options (repeatable), e.g. softcap.")
    ] = None,
    logits: Annotated[
        Optional[list[LogitsKind]], typer.Option(help="Only these kinds of logits (repeatable), e.g. confident.")
    ] = None,
    provider: Annotated[
        Optional[list[str]],
        typer.Option(help="Only these providers (repeatable); `ligerbench list` names them. Mutants run only here."),
    ] = None,
    suite: Annotated[Optional[list[str]], typer.Option(help="Only these suites (repeatable).")] = None,
    preset: Annotated[
        PresetName, typer.Option(help="Case sizes: quick (CPU), full (GPU); auto picks by device.")
    ] = PresetName.auto,
    device: Annotated[DeviceName, typer.Option(help="Where to run: auto prefers CUDA.")] = DeviceName.auto,
    seed: Annotated[int, typer.Option(help="Seed of every case's inputs; same seed, same numbers.")] = 0,
    out: Annotated[Path, typer.Option(help="Results root; each run gets a new folder inside.")] = rundir.DEFAULT_ROOT,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON summary on stdout instead of tables.")] = False,
):
    """Check providers' loss and gradients against a float64 reference, case by case.

    Exit status: 0 when every check passes, 1 when any fails or errors (they are named),
    2 on a usage error. Results go to OUT/<run-id>/: records.csv, summary.md, env.json.
    """
    try:
        dev = devices.resolve(device.value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--device") from exc
    mode = devices.prepare(dev)
    preset_name = ("full" if dev.type == "cuda" else "quick") if preset.value == "auto" else preset.value
    registry = default_registry()
    _check_names(registry, kernel.value, provider, suite)

    filters = {
        "reduction": set(_values(reduction) or []),
        "ignore_pattern": set(_values(ignore_pattern) or []),
        "dtype": set(_values(dtype) or []),
        "option": set(_values(option) or []),
        "logits": set(_values(logits) or []),
    }

    def keep(case) -> bool:
        return all(not allowed or getattr(case, field) in allowed for field, allowed in filters.items())

    from ligerbench.verify import make_plan, run_plan

    plan = make_plan(
        registry,
        kernel=kernel.value,
        preset=preset_name,
        device_type=dev.type,
        suites=suite,
        providers=provider,
        case_filter=keep,
    )
    if not plan.cases:
        raise typer.BadParameter("no case matches these filters on this device", param_hint="filters")

    run_id, path = rundir.new_run_dir(out, "verify", kernel.value)
    env = environment.capture(dev, seed, triton_mode=mode, preset=preset_name, command="verify")
    rundir.write_json(path / "env.json", env)
    random.seed(seed)
    writer = RecordWriter(path / "records.csv")
    interrupted = False
    try:
        with Progress(
            TextColumn("[bold]verify {task.fields[kernel]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=console,
            disable=as_json,
        ) as progress:
            task = progress.add_task("", total=len(plan.cases), kernel=kernel.value)
            run_plan(
                plan,
                registry,
                run_id=run_id,
                seed=seed,
                device=dev,
                writer=writer,
                on_case=lambda c: progress.update(task, advance=1, description=c.id),
            )
    except KeyboardInterrupt:
        interrupted = True
    finally:
        writer.close()
        df = writer.frame()
        (path / "summary.md").write_text(
            summary.summary_markdown(
                df, env, title=f"ligerbench verify {kernel.value} ({run_id})", interrupted=interrupted
            )
        )
    code = 130 if interrupted else summary.exit_code(df)
    if as_json:
        print(json.dumps(_json_summary(df, run_id, path, code), indent=2, default=str))
    else:
        _print_tables(df, path)
    raise typer.Exit(code)


def _check_names(registry, kernel: str, providers, suites) -> None:
    known_p = [p.name for p in registry.providers.values() if p.kernel == kernel]
    for p in providers or []:
        if p not in known_p:
            raise typer.BadParameter(
                f"unknown provider {p!r}; choose from {', '.join(known_p)}", param_hint="--provider"
            )
    known_s = [s.name for s in registry.suites_for(kernel)]
    for s in suites or []:
        if s not in known_s:
            raise typer.BadParameter(f"unknown suite {s!r}; choose from {', '.join(known_s)}", param_hint="--suite")


def _json_summary(df, run_id, path, code) -> dict:
    bad = summary.problems(df)
    return {
        "run_id": run_id,
        "results": str(path),
        "exit_code": code,
        "counts": df["verdict"].value_counts().to_dict(),
        "failures": bad[["suite", "provider", "case", "quantity", "value", "limit", "verdict", "message"]].to_dict(
            "records"
        ),
    }


def _print_tables(df, path: Path) -> None:
    out = Console()
    table = Table(title="verify: per suite and provider")
    cols = summary.counts(df)
    for c in cols.columns:
        table.add_column(str(c), justify="right" if c not in ("suite", "provider") else "left")
    for _, row in cols.iterrows():
        table.add_row(*[f"{v:.3g}" if isinstance(v, float) else str(v) for v in row])
    out.print(table)
    bad = summary.problems(df)
    if len(bad):
        # plain lines, not a table: case ids are long and must survive a narrow terminal
        out.print(f"[bold red]{len(bad)} failing checks[/] (suite provider quantity case: error > limit):")
        for _, r in bad.head(50).iterrows():
            detail = r["message"] if r["verdict"] == "error" else f"{r['value']:.3g} > {r['limit']:.3g}"
            out.print(
                f"  {r['verdict'].upper()} {r['suite']} {r['provider']} {r['quantity']} {r['case']}: {detail}",
                soft_wrap=True,
                markup=False,
            )
        if len(bad) > 50:
            out.print(f"  ... and {len(bad) - 50} more in {path / 'records.csv'}")
    out.print(f"results: {path}")


@app.command("list")
def list_registry():
    """Show the registered kernels, providers (with availability), suites and presets."""
    dev = devices.resolve("auto")
    devices.prepare(dev)
    registry = default_registry()
    out = Console()
    t = Table(title="kernels")
    t.add_column("name")
    t.add_column("description")
    for k in registry.kernels.values():
        t.add_row(k.name, k.description)
    out.print(t)
    t = Table(title=f"providers (availability on {dev.type})")
    for c in ("name", "kernel", "mutates input", "status", "description"):
        t.add_column(c, overflow="fold")
    for p in registry.providers.values():
        status = "planted bug" if p.mutant else (p.unavailable(dev.type) or "available")
        t.add_row(p.name, p.kernel, "yes" if p.mutates_input else "no", status, p.description)
    out.print(t)
    t = Table(title="suites")
    for c in ("name", "kernel", "checks", "description"):
        t.add_column(c)
    for s in registry.suites.values():
        t.add_row(s.name, s.kernel, ", ".join(s.quantities), s.description)
    out.print(t)
    t = Table(title="presets")
    for c in ("name", "device", "description"):
        t.add_column(c)
    for p in registry.presets.values():
        t.add_row(p.name, p.device, p.description)
    out.print(t)


# the command's body lives in its own module; registered here so `ligerbench --help` lists it
app.command("bench")(bench)
app.command("converge")(converge)
app.command("selftest")(selftest)
app.command("gate")(gate)
app.command("report")(report)


def main() -> None:
    app()


if __name__ == "__main__":
    main()

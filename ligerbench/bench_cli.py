"""`ligerbench bench`: time and measure the providers of a kernel side by side on a GPU.

    ligerbench bench --kernel ce --sweep vocab
    ligerbench bench --kernel flce --sweep heads --tokens 4096
    ligerbench bench --kernel ce --sweep tokens --provider ours --provider liger
    ligerbench bench --kernel ce --smoke          # CPU, seconds, NOT a measurement (tests)

The command only orchestrates: sweeps in suites/bench_shapes.py, inputs and work models in
suites/bench_<kernel>.py, timing/memory/ceilings/derived figures/report/plots in ligerbench/.
"""

from __future__ import annotations

import shutil
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ligerbench import device as devices
from ligerbench import env as environment
from ligerbench import rundir

BenchKernel = Enum("BenchKernel", {k: k for k in ("ce", "flce")}, type=str)
SweepName = Enum("SweepName", {s: s for s in ("tokens", "vocab", "heads")}, type=str)
ModeName = Enum("ModeName", {m: m for m in ("full", "forward", "backward")}, type=str)
BenchDtype = Enum("BenchDtype", {d: d for d in ("bf16", "fp16", "fp32")}, type=str)
DEFAULT_SWEEP = {"ce": "vocab", "flce": "heads"}
BASELINES = Path("results/baselines")
console = Console(stderr=True)


def bench(
    kernel: Annotated[
        BenchKernel, typer.Option(help="Kernel whose registered providers are compared.")
    ] = BenchKernel.ce,
    provider: Annotated[
        Optional[list[str]], typer.Option(help="Only these providers (repeatable); default: all registered.")
    ] = None,
    sweep: Annotated[
        Optional[SweepName],
        typer.Option(
            help="tokens: N from 1K up; vocab: 32000-256000; heads: llama3-8b, gemma2-2b, qwen2.5-7b, "
            "mistral-7b. Default: vocab for ce, heads for flce."
        ),
    ] = None,
    mode: Annotated[
        ModeName,
        typer.Option(
            help="What is timed. Only full (forward+backward) is fair: several peers compute "
            "the gradient inside forward."
        ),
    ] = ModeName.full,
    dtype: Annotated[
        BenchDtype, typer.Option(help="Dtype of logits (ce) or hidden and weight (flce).")
    ] = BenchDtype.bf16,
    tokens: Annotated[
        Optional[int],
        typer.Option(
            min=1, help="N of the vocab/heads sweeps (default 8192); largest N of the tokens sweep (default 16384)."
        ),
    ] = None,
    rep_ms: Annotated[
        float, typer.Option(min=0, help="Timed milliseconds per provider and point (10 to 200 runs).")
    ] = 600.0,
    seed: Annotated[int, typer.Option(help="Seed of the inputs; every provider at a point gets the same inputs.")] = 0,
    out: Annotated[Path, typer.Option(help="Results root; each run gets a new folder inside.")] = rundir.DEFAULT_ROOT,
    smoke: Annotated[
        bool,
        typer.Option(
            help="Tiny shapes on CPU through Triton's interpreter: checks the harness in seconds. "
            "Its output is marked NOT A MEASUREMENT."
        ),
    ] = False,
    baseline: Annotated[
        bool,
        typer.Option(
            help="Also copy the run folder to BASELINE-ROOT/bench-<kernel>-<sweep>-<mode>/ "
            "(replacing it), for the regression gate. Refused with --smoke."
        ),
    ] = False,
    baseline_root: Annotated[
        Path, typer.Option(help="Where --baseline copies to; commit what lands in results/baselines.")
    ] = BASELINES,
):
    """Time (median, p20/p80), memory (peak, extra over inputs) and throughput (GB/s for ce, TFLOP/s
    for flce, also as % of ceilings measured at the start of the run) of every provider, each also
    as a ratio to the best provider at the same point.

    Needs a CUDA GPU: without one it exits 2, unless --smoke. Exit 1 when any provider errored
    (named in the table), 0 otherwise; providers that are not installed are skipped with the reason.
    Results go to OUT/<run-id>/: records.csv (long format), summary.md, time/memory/ratio plots, env.json.
    """
    import torch

    if baseline and smoke:
        raise typer.BadParameter("a smoke run is not a measurement and cannot be a baseline", param_hint="--baseline")
    if smoke:
        dev = torch.device("cpu")
    elif not torch.cuda.is_available():
        console.print(
            "[bold red]ligerbench bench needs a CUDA GPU:[/] timings on CPU (Triton's interpreter) "
            "say nothing about kernel speed. Run it on a GPU, or pass --smoke for a tiny check of "
            "the harness whose output is marked NOT A MEASUREMENT."
        )
        raise typer.Exit(2)
    else:
        dev = torch.device("cuda")
    triton_mode = devices.prepare(dev)  # before any kernel import

    from ligerbench import bench_metrics, bench_report, ceilings, plots
    from ligerbench.bench import NOT_A_MEASUREMENT, SMOKE_MESSAGE, Plan, run_plan
    from ligerbench.records import RecordWriter
    from ligerbench.registry import default_registry
    from ligerbench.suites.bench_shapes import sweep_points
    from ligerbench.timing import SMOKE_BUDGET, TimingBudget

    kernel_name = kernel.value
    spec = _spec(kernel_name)
    chosen = _providers(default_registry(), spec, kernel_name, provider)
    sweep_name = sweep.value if sweep else DEFAULT_SWEEP[kernel_name]
    points = sweep_points(kernel_name, sweep_name, dtype=dtype.value, tokens=tokens, smoke=smoke)
    budget = SMOKE_BUDGET if smoke else TimingBudget(rep_ms=rep_ms)
    plan = Plan(
        spec=spec,
        providers=tuple(chosen),
        points=tuple(points),
        mode=mode.value,
        device=dev,
        seed=seed,
        budget=budget,
        smoke=smoke,
    )
    if mode.value != "full":
        console.print(f"[yellow]note:[/] {bench_report.FAIRNESS_NOTE}")

    run_id, path = rundir.new_run_dir(out, "bench", kernel_name)
    verdict = NOT_A_MEASUREMENT if smoke else "measured"
    console.print("measuring the ceilings (copy bandwidth, bf16 matmul) ...")
    ceiling = ceilings.measure(dev)
    env = environment.capture(
        dev,
        seed,
        triton_mode=triton_mode,
        command="bench",
        kernel=kernel_name,
        sweep=sweep_name,
        mode=mode.value,
        dtype=dtype.value,
        ceilings=ceiling,
        measurement=not smoke,
        note=SMOKE_MESSAGE if smoke else "",
    )
    rundir.write_json(path / "env.json", env)
    writer = RecordWriter(path / "records.csv")
    for r in bench_metrics.ceiling_records(
        ceiling,
        run_id=run_id,
        kernel=kernel_name,
        verdict=verdict,
        message=SMOKE_MESSAGE if smoke else "measured at the start of the run",
    ):
        writer.write(r)
    interrupted = False
    try:
        with Progress(
            TextColumn(f"[bold]bench {kernel_name} {sweep_name}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=console,
        ) as progress:
            task = progress.add_task("", total=len(points) * len(chosen))
            run_plan(
                plan, run_id=run_id, writer=writer, on_step=lambda s: progress.update(task, advance=1, description=s)
            )
    except KeyboardInterrupt:
        interrupted = True
    finally:
        cases = {p.case.id: p.case for p in points}
        measured = list(writer.rows)
        for r in bench_metrics.derive(measured, spec, cases, ceiling) + bench_metrics.target_records(
            measured, spec, cases
        ):
            writer.write(r)
        writer.close()
    df = writer.frame()
    title = f"ligerbench bench {kernel_name} --sweep {sweep_name} --mode {mode.value} ({run_id})"
    (path / "summary.md").write_text(
        bench_report.markdown(
            df,
            points,
            spec,
            title=title,
            mode=mode.value,
            sweep=sweep_name,
            ceilings=ceiling,
            env=env,
            smoke=smoke,
            interrupted=interrupted,
        )
    )
    plots.draw(
        df,
        points,
        sweep=sweep_name,
        mode=mode.value,
        title=title + (" NOT A MEASUREMENT" if smoke else ""),
        folder=path,
    )
    print((path / "summary.md").read_text())
    if baseline:
        dest = baseline_root / f"bench-{kernel_name}-{sweep_name}-{mode.value}"
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(path, dest)
        console.print(f"baseline written: {dest} (commit it)")
    console.print(f"results: {path}")
    errors = df[df["verdict"] == "error"]
    if interrupted:
        raise typer.Exit(130)
    raise typer.Exit(1 if len(errors) else 0)


def _spec(kernel: str):
    if kernel == "ce":
        from ligerbench.suites.bench_ce import SPEC
    else:
        from ligerbench.suites.bench_flce import SPEC
    return SPEC


def _providers(registry, spec, kernel: str, names: list[str] | None):
    known = registry.providers_for(kernel) + [v for v in spec.variants if v.name not in registry.providers]
    if not known:
        raise typer.BadParameter(f"no providers are registered for kernel {kernel!r} yet", param_hint="--kernel")
    by_name = {p.name: p for p in known}
    for n in names or []:
        if n not in by_name:
            raise typer.BadParameter(
                f"unknown provider {n!r}; choose from {', '.join(by_name)}", param_hint="--provider"
            )
    if names:
        return [p for p in known if p.name in names]
    for name, reason in spec.excluded.items():
        if name in by_name:
            console.print(f"[yellow]left out:[/] {name}: {reason}")
    return [p for p in known if p.name not in spec.excluded]

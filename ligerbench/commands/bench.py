"""`ligerbench bench`: time and measure the providers of a kernel side by side on a GPU.

    ligerbench bench --kernel ce --sweep vocab
    ligerbench bench --kernel flce --sweep heads --tokens 4096
    ligerbench bench --kernel ce --sweep tokens --provider ours --provider liger
    ligerbench bench --kernel ce --smoke          # CPU, seconds, NOT a measurement (tests)
    ligerbench bench --kernel ce --provider ours --provider mypkg.losses:my_ce   # your own callable
    ligerbench bench --kernel vp_ce --nproc 2     # a vocab-parallel kernel on 2 GPUs (NCCL)
    ligerbench bench --kernel vp_ce --nproc 2 --smoke   # 2 gloo ranks on CPU (tests)

The command only orchestrates: each kernel's inputs, work model and sweeps are its
`KernelSpec.bench` (suites/<kernel>_bench.py), timing/memory/ceilings/derived figures/report/
plots are in ligerbench/bench/. A kernel whose call is collective (`BenchSpec.distributed`)
runs on N ranks started through torch.distributed.run (`--nproc N`, ligerbench/distributed/):
rank 0 writes the measured rows, this process the ceilings, derived figures, targets and report.
"""

from __future__ import annotations

import shutil
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import torch
import typer

from ligerbench import named, runs
from ligerbench import records as rec
from ligerbench.bench import ceilings, metrics, pareto, plots
from ligerbench.bench import report as bench_report
from ligerbench.bench.engine import NOT_A_MEASUREMENT, SMOKE_MESSAGE, Plan, run_plan
from ligerbench.bench.spec import BenchSpec, on_ranks
from ligerbench.bench.timing import SMOKE_BUDGET, TimingBudget
from ligerbench.builtin import default_registry
from ligerbench.distributed import launch
from ligerbench.registry import Provider, Registry

ModeName = Enum("ModeName", {m: m for m in ("full", "forward", "backward")}, type=str)
BenchDtype = Enum("BenchDtype", {d: d for d in ("bf16", "fp16", "fp32")}, type=str)
BASELINES = Path("results/baselines")
console = runs.console


def bench(
    kernel: Annotated[
        Optional[str],
        typer.Option(help="Kernel whose registered providers are compared; default: the first registered."),
    ] = None,
    provider: Annotated[
        Optional[list[str]],
        typer.Option(
            help="Only these providers (repeatable); default: all registered. MODULE:FUNCTION or "
            "PATH.py:FUNCTION times your own callable (docs/providers.md)."
        ),
    ] = None,
    mutates_input: Annotated[
        bool, typer.Option(help="The MODULE:FUNCTION providers write into the inputs they are handed (declared).")
    ] = False,
    sweep: Annotated[
        Optional[str],
        typer.Option(
            help="tokens: N from 1K up; vocab: 32000-256000; heads: llama3-8b, gemma2-2b, qwen2.5-7b, "
            "mistral-7b. Default: the kernel's first sweep (`ligerbench list`)."
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
    out: Annotated[Path, typer.Option(help="Results root; each run gets a new folder inside.")] = runs.DEFAULT_ROOT,
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
    collect_only: Annotated[
        bool, typer.Option("--collect-only", "--dry-run", help="Print the points and providers, run nothing.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON summary on stdout instead of tables.")] = False,
    nproc: Annotated[
        int,
        typer.Option(
            help="Run on N real ranks started by torch.distributed.run (NCCL on N GPUs; gloo on CPU "
            "with --smoke), every rank timing the same call at once: for kernels whose call is "
            "collective (vp_ce), which need it. 0: in this process."
        ),
    ] = 0,
    timeout: Annotated[
        float, typer.Option(help="With --nproc: wall-clock limit in seconds of the ranks' run (then killed).")
    ] = 1800.0,
):
    """Time (median, p20/p80), memory (peak, extra over inputs) and throughput (GB/s for ce, TFLOP/s
    for flce, also as % of ceilings measured at the start of the run) of every provider, each also
    as a ratio to the best provider at the same point.

    Needs a CUDA GPU: without one it exits 2, unless --smoke. Exit 1 when any provider errored
    (named in the table) or a provider named with --provider cannot load or was timed on no
    point (the reason printed), 0 otherwise, 130 when interrupted (measured rows and a summary
    kept); providers that are not installed are skipped with the reason. Results go to
    OUT/<run-id>/: records.csv (long format), summary.md, time/memory/ratio/pareto plots, env.json.

    Examples:

      ligerbench bench --kernel ce --sweep vocab

      ligerbench bench --kernel flce --sweep heads --tokens 4096 --json

      ligerbench bench --kernel ce --smoke --collect-only

      ligerbench bench --kernel flce --sweep budget

      ligerbench bench --kernel vp_ce --nproc 2
    """
    if baseline and smoke:
        raise typer.BadParameter("a smoke run is not a measurement and cannot be a baseline", param_hint="--baseline")
    if not smoke and not torch.cuda.is_available():
        console.print(
            "[bold red]ligerbench bench needs a CUDA GPU:[/] timings on CPU (Triton's interpreter) "
            "say nothing about kernel speed. Run it on a GPU, or pass --smoke for a tiny check of "
            "the harness whose output is marked NOT A MEASUREMENT."
        )
        raise typer.Exit(2)
    dev, triton_mode = runs.resolve_device("cpu" if smoke else "cuda")  # before any kernel import
    registry = default_registry()
    runs.report_plugin_errors(registry)
    kernel = runs.check_kernel(registry, kernel)
    spec = _spec(registry, kernel)
    provider = named.add_adhoc(registry, kernel, provider, mutates_input=mutates_input)
    sweep_name = sweep or next(iter(spec.sweeps))
    if sweep_name not in spec.sweeps:
        raise runs.usage_error(f"unknown sweep {sweep_name!r}; choose from {', '.join(spec.sweeps)}", "--sweep")
    chosen = _providers(registry, spec, kernel, provider, sweep_name)
    named.require_loadable(registry, kernel, provider, dev.type)
    points = spec.sweeps[sweep_name](dtype.value, tokens, smoke)
    _check_nproc(spec, kernel, nproc, dev)
    if spec.distributed:
        points = on_ranks(points, nproc)
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
    selection = {"sweep": sweep_name, "mode": mode.value, "dtype": dtype.value, "provider": [p.name for p in chosen]}
    selection |= {"nproc": nproc} if nproc else {}
    if collect_only:
        facts = {"command": "bench", "kernel": kernel, "filters": selection, "points": len(points)}
        facts |= {"steps": len(points) * len(chosen), "case_ids": [p.case.id for p in points]}
        if as_json:
            runs.print_json(facts)
        else:
            print("\n".join(facts["case_ids"]))
            print(f"{len(points)} points x {len(chosen)} providers = {facts['steps']} steps; sweep {sweep_name}")
        raise typer.Exit(0)
    if mode.value != "full":
        console.print(f"[yellow]note:[/] {bench_report.FAIRNESS_NOTE}")

    verdict = NOT_A_MEASUREMENT if smoke else "measured"
    console.print("measuring the ceilings (copy bandwidth, bf16 matmul) ...")
    ceiling = ceilings.measure(dev)
    if nproc and dev.type == "cuda":
        torch.cuda.empty_cache()  # the ranks (one per GPU) get GPU 0's memory back
    run = runs.start(
        "bench",
        kernel,
        device=dev,
        triton_mode=triton_mode,
        seed=seed,
        out=out,
        filters=selection,
        unit="steps",
        planned=len(points) * len(chosen),
        kernel=kernel,
        sweep=sweep_name,
        mode=mode.value,
        dtype=dtype.value,
        ceilings=ceiling,
        measurement=not smoke,
        note=SMOKE_MESSAGE if smoke else "",
    )
    ceiling_rows = metrics.ceiling_records(
        ceiling,
        run_id=run.id,
        kernel=kernel,
        verdict=verdict,
        message=SMOKE_MESSAGE if smoke else "measured at the start of the run",
    )
    for r in [] if nproc else ceiling_rows:  # with --nproc: written once the ranks' rows are back
        run.writer.write(r)
    interrupted = False
    done = 0
    facts: dict = {}
    try:
        with run.progress(f"bench {kernel} {sweep_name}", total=len(points) * len(chosen), disable=as_json) as advance:

            def on_step(step: str) -> None:
                nonlocal done
                done += 1
                advance(step)

            if nproc:  # the ranks' rank 0 writes the measured rows (ligerbench/distributed/)
                run.writer.close()
                job = {
                    "command": "bench", "kernel": kernel, "device_type": dev.type, "seed": seed, "run_id": run.id,
                    "run_path": str(run.path), "sweep": sweep_name, "mode": mode.value, "dtype": dtype.value,
                    "tokens": tokens, "smoke": smoke, "rep_ms": rep_ms, "mutates_input": mutates_input,
                    "providers": [p.name for p in chosen], "cases": [p.case.id for p in points],
                }  # fmt: skip
                echo = None if as_json else launch.echo_with(advance)
                planned = len(points) * len(chosen)
                facts = launch.run_job(job, nproc=nproc, planned=planned, unit="steps", timeout_s=timeout, echo=echo)
                done = facts.pop("completed_steps")
                facts.pop("done")
            else:
                run_plan(plan, run_id=run.id, writer=run.writer, on_step=on_step)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if nproc:  # records.csv rewritten: the ceilings, the ranks' rows (launcher errors included)
            ranked = _ranks_rows(run.path / "records.csv")
            run.writer = rec.RecordWriter(run.path / "records.csv")
            for r in ceiling_rows + ranked:
                run.writer.write(r)
        writer = run.writer
        cases = {p.case.id: p.case for p in points}
        measured = list(writer.rows)
        for r in metrics.derive(measured, spec, cases, ceiling) + metrics.target_records(measured, spec, cases):
            writer.write(r)
        run.finish(interrupted=interrupted, planned=len(points) * len(chosen), completed=done, **facts)
    df = writer.frame()
    title = f"ligerbench bench {kernel} --sweep {sweep_name} --mode {mode.value} ({run.id})"
    (run.path / "summary.md").write_text(
        bench_report.markdown(
            df,
            points,
            spec,
            title=title,
            mode=mode.value,
            sweep=sweep_name,
            ceilings=ceiling,
            env=run.env,
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
        folder=run.path,
    )
    pareto.draw(df, points, title=title, folder=run.path)
    if not as_json:
        print((run.path / "summary.md").read_text())
    if baseline and not interrupted:
        dest = baseline_root / f"bench-{kernel}-{sweep_name}-{mode.value}"
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(run.path, dest)
        console.print(f"baseline written: {dest} (commit it)")
    console.print(f"results: {run.path}")
    errors = df[df["verdict"].isin(["error", "fail"])]
    incomplete = runs.problems(run.env, df)
    timed = df[df["metric"] == "time_ms"]
    unmeasured = {} if interrupted else named.missing_evidence(timed, provider, evidence=(verdict,))
    code = runs.INTERRUPTED if interrupted else (1 if len(errors) or incomplete or unmeasured else 0)
    if as_json:
        counts = runs.verdict_counts(df)
        counts |= {"measured": counts.pop("measured", 0), "not_a_measurement": counts.pop("not_a_measurement", 0)}
        runs.print_json(
            runs.json_report(run.env, exit_code=code, status=runs.status_word(code), counts=counts, path=run.path,
                             measurement=not smoke, problems=incomplete)
        )  # fmt: skip
    if interrupted:
        runs.say_interrupted(run)
    named.print_missing(unmeasured)
    raise typer.Exit(code)


def _check_nproc(spec: BenchSpec, kernel: str, nproc: int, dev: torch.device) -> None:
    """A collective kernel needs --nproc; any other kernel would time N copies of one call."""
    if nproc < 0 or (nproc and dev.type == "cuda" and nproc > torch.cuda.device_count()):
        raise runs.usage_error(f"--nproc must be 0 or at most the GPUs here (one rank per GPU), got {nproc}", "--nproc")
    if spec.distributed and not nproc:
        raise runs.usage_error(f"kernel {kernel!r} is collective: its bench runs on ranks, pass --nproc N", "--nproc")
    if nproc and not spec.distributed:
        raise runs.usage_error(f"kernel {kernel!r} runs in one process: --nproc is for collective kernels", "--nproc")


def _ranks_rows(path: Path) -> list:
    """The rows the ranks (and the launcher's error record) left in records.csv."""
    if not path.exists() or path.stat().st_size == 0:
        return []
    return rec.from_frame(rec.load_records(path))


def _spec(registry: Registry, kernel: str) -> BenchSpec:
    spec = registry.kernels[kernel].bench
    if spec is None:
        with_bench = [k.name for k in registry.kernels.values() if k.bench is not None]
        raise runs.usage_error(f"kernel {kernel!r} has no bench; these do: {', '.join(with_bench)}", "--kernel")
    return spec


def _providers(registry: Registry, spec: BenchSpec, kernel: str, names: list[str] | None, sweep: str) -> list[Provider]:
    known = registry.providers_for(kernel, bench_only=True)
    by_name = {p.name: p for p in known}
    for n in names or []:
        if n not in by_name:
            raise runs.usage_error(f"unknown provider {n!r}; choose from {', '.join(by_name)}", "--provider")
    if names:
        return [p for p in known if p.name in names]
    for name, reason in spec.excluded.items():
        if name in by_name:
            console.print(f"[yellow]left out:[/] {name}: {reason}")
    elsewhere = {n for s, only in spec.sweep_only.items() if s != sweep for n in only}
    return [p for p in known if p.name not in spec.excluded and p.name not in elsewhere]

"""`ligerbench bench`: time and measure the providers of a kernel side by side on a GPU.

    ligerbench bench --kernel ce --sweep vocab
    ligerbench bench --kernel flce --sweep heads --tokens 4096
    ligerbench bench --kernel ce --sweep tokens --provider ours --provider liger
    ligerbench bench --kernel ce --smoke          # CPU, seconds, NOT a measurement (tests)
    ligerbench bench --kernel ce --provider ours --provider mypkg.losses:my_ce   # your own callable
    ligerbench bench --kernel vp_ce --nproc 2     # a vocab-parallel kernel on 2 GPUs (NCCL)
    ligerbench bench --kernel vp_ce --nproc 2 --smoke   # 2 gloo ranks on CPU (tests)
    ligerbench bench --kernel vp_flce --nproc 1,2,4     # the same problem at 1, 2 and 4 ranks: scaling

The command holds its options and its selection; the run is ligerbench/bench/job.py under
ligerbench/lifecycle.py. Each kernel's inputs, work model and sweeps are its
`KernelSpec.bench` (suites/<kernel>/bench.py), timing/memory/ceilings/derived figures/report/
plots are in ligerbench/bench/. A kernel whose call is collective (`BenchSpec.distributed`)
runs on N ranks started through torch.distributed.run (`--nproc N`, ligerbench/distributed/):
rank 0 writes the measured rows, this process the ceilings, derived figures, targets and report.
Several counts (`--nproc 1,2,4`) start the ranks once per count on the same global problem and
add a scaling table and plot (ligerbench/bench/scaling.py). The counts are a list given to
--nproc rather than a sweep: a sweep's points share one set of ranks, and a rank count is the
launch itself (its own process group), so it is told where the launch is asked for.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import torch
import typer

from ligerbench import lifecycle, named, runs
from ligerbench.bench.engine import Plan
from ligerbench.bench.job import BenchJob
from ligerbench.bench.spec import BenchSpec, on_ranks
from ligerbench.bench.timing import SMOKE_BUDGET, TimingBudget
from ligerbench.builtin import default_registry
from ligerbench.commands.options import CollectOnly, JsonSummary, ResultsRoot
from ligerbench.exits import ExitCode
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
    out: ResultsRoot = runs.DEFAULT_ROOT,
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
    collect_only: CollectOnly = False,
    as_json: JsonSummary = False,
    nproc: Annotated[
        str,
        typer.Option(
            help="Run on N real ranks started by torch.distributed.run (NCCL on N GPUs; gloo on CPU "
            "with --smoke), every rank timing the same call at once: for kernels whose call is "
            "collective (vp_ce), which need it. 0: in this process. N,M,...: the same global problem "
            "at each rank count (one launch each), with a scaling table and plot (time and memory per "
            "rank against ranks).",
            metavar="N[,M...]",
        ),
    ] = "0",
    timeout: Annotated[
        float,
        typer.Option(help="With --nproc: wall-clock limit in seconds of each rank count's run (then killed)."),
    ] = 1800.0,
):
    """Time and measure every provider of a kernel side by side (GPU).

    Time (median, p20/p80), memory (peak, extra over inputs) and throughput (GB/s for ce, TFLOP/s
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

      ligerbench bench --kernel vp_flce --nproc 1,2,4
    """
    if baseline and smoke:
        raise runs.usage_error("a smoke run is not a measurement and cannot be a baseline", "--baseline")
    if not smoke and not torch.cuda.is_available():
        console.print(
            "[bold red]ligerbench bench needs a CUDA GPU:[/] timings on CPU (Triton's interpreter) "
            "say nothing about kernel speed. Run it on a GPU, or pass --smoke for a tiny check of "
            "the harness whose output is marked NOT A MEASUREMENT."
        )
        return ExitCode.USAGE
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
    nprocs = _check_nproc(spec, kernel, nproc, dev)
    if spec.distributed:  # every point at every rank count, the counts in turn
        points = [p for n in nprocs for p in on_ranks(points, n)]
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
    selection |= {"nproc": nprocs[0] if len(nprocs) == 1 else list(nprocs)} if nprocs else {}
    if collect_only:
        facts = {"command": "bench", "kernel": kernel, "filters": selection, "points": len(points)}
        facts |= {"steps": len(points) * len(chosen), "case_ids": [p.case.id for p in points]}
        if as_json:
            runs.print_json(facts)
        else:
            print("\n".join(facts["case_ids"]))
            print(f"{len(points)} points x {len(chosen)} providers = {facts['steps']} steps; sweep {sweep_name}")
        return ExitCode.OK
    dest = baseline_root / f"bench-{kernel}-{sweep_name}-{mode.value}" if baseline else None
    job = BenchJob(plan, kernel, sweep_name, dtype.value, tokens, rep_ms, named=provider, mutates_input=mutates_input,
                   nprocs=nprocs, timeout_s=timeout, baseline=dest)  # fmt: skip
    return lifecycle.execute(job, quiet=as_json, device=dev, triton_mode=triton_mode, seed=seed, out=out,
                             filters=selection)  # fmt: skip


def _check_nproc(spec: BenchSpec, kernel: str, nproc: str, dev: torch.device) -> tuple[int, ...]:
    """The rank counts, ascending (none: in this process). A collective kernel needs --nproc; any
    other kernel would time N copies of one call."""
    most = torch.cuda.device_count() if dev.type == "cuda" else None
    try:
        counts = tuple(sorted({int(n) for n in nproc.split(",")}))
    except ValueError:
        counts = (-1,)
    if counts == (0,):
        counts = ()
    if any(n < 1 or (most is not None and n > most) for n in counts):
        raise runs.usage_error(
            f"--nproc must be 0, or rank counts of at least 1 and at most the GPUs here (one rank per GPU), "
            f"e.g. 2 or 1,2,4; got {nproc}",
            "--nproc",
        )
    if spec.distributed and not counts:
        raise runs.usage_error(f"kernel {kernel!r} is collective: its bench runs on ranks, pass --nproc N", "--nproc")
    if counts and not spec.distributed:
        raise runs.usage_error(f"kernel {kernel!r} runs in one process: --nproc is for collective kernels", "--nproc")
    return counts


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

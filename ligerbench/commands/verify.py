"""`ligerbench verify`: every provider of a kernel against the float64 reference, case by case.

    ligerbench verify --kernel ce --reduction none       # each axis of the kernel is an option
    ligerbench verify --kernel ce --where reduction=none
    ligerbench verify --kernel flce --preset quick --where option=softcap
    ligerbench verify --kernel ce --provider mutant_first_row_upstream --where ignore_pattern=leading_run   # exits 1
    ligerbench verify --kernel ce --provider mypkg.losses:my_ce          # your own callable
    ligerbench verify --kernel vp_ce --nproc 2 --device cpu    # 2 real ranks (gloo), ligerbench/distributed/

The command holds its options and its selection; the run is ligerbench/verify/job.py under
ligerbench/lifecycle.py, the engine ligerbench/verify/engine.py, the kernel's grid, suites and
providers come from the registry (suites/<kernel>/ or a plugin). The axis options (`--reduction
none`) are not in the signature: the kernel's axes are known only once --kernel is read, so the
command takes the options it does not know (cli.py's context settings, `ctx.args`) and
axes.parse_axis_options reads them against the chosen kernel's axes.
"""

from __future__ import annotations

from typing import Annotated, Optional

import torch
import typer

from ligerbench import axes, kexpr, lifecycle, named, runs
from ligerbench.builtin import default_registry
from ligerbench.cases import Case
from ligerbench.commands.options import CollectOnly, JsonSummary, ResultsRoot
from ligerbench.exits import ExitCode
from ligerbench.registry import Registry
from ligerbench.verify.engine import make_plan
from ligerbench.verify.job import VerifyJob, collect


def verify(
    ctx: typer.Context,
    kernel: Annotated[
        Optional[str],
        typer.Option(
            metavar="NAME", help="Kernel to verify (`ligerbench list` names them); default: the first registered."
        ),
    ] = None,
    where: Annotated[
        Optional[list[str]],
        typer.Option(
            "--where",
            metavar="AXIS=VALUE",
            help="Only cases with AXIS=VALUE (repeatable; values of one axis are alternatives), any axis of "
            "the kernel, e.g. reduction=none; the same as the axis option --reduction none, with which it "
            "combines. `ligerbench list` shows each kernel's axes.",
        ),
    ] = None,
    provider: Annotated[
        Optional[list[str]],
        typer.Option(
            metavar="NAME",
            help="Only these providers (repeatable); `ligerbench list` names them. Mutants run only here. "
            "MODULE:FUNCTION or PATH.py:FUNCTION checks your own callable (docs/providers.md).",
        ),
    ] = None,
    mutates_input: Annotated[
        bool, typer.Option(help="The MODULE:FUNCTION providers write into the inputs they are handed (declared).")
    ] = False,
    suite: Annotated[Optional[list[str]], typer.Option(metavar="NAME", help="Only these suites (repeatable).")] = None,
    preset: Annotated[
        str, typer.Option(metavar="NAME", help="Case sizes: quick (CPU), full (GPU); auto picks by device.")
    ] = "auto",
    device: Annotated[
        str, typer.Option("--device", metavar="DEVICE", help="Where to run: auto, cpu or cuda; auto prefers CUDA.")
    ] = "auto",
    seed: Annotated[int, typer.Option(metavar="INT", help="Seed of every case's inputs; same seed, same numbers.")] = 0,
    out: ResultsRoot = runs.DEFAULT_ROOT,
    keyword: Annotated[
        Optional[str],
        typer.Option(
            "-k",
            metavar="EXPR",
            help="Only cases whose id matches EXPR: substrings joined by and/or/not/( ), as in pytest.",
        ),
    ] = None,
    case: Annotated[
        Optional[list[str]],
        typer.Option("--case", metavar="ID", help="Only this case id, exactly as a FAIL line prints it (repeatable)."),
    ] = None,
    exitfirst: Annotated[bool, typer.Option("-x", "--exitfirst", help="Stop after the first failing case.")] = False,
    maxfail: Annotated[
        Optional[int], typer.Option("--maxfail", metavar="N", min=1, help="Stop after N failing cases (then exit 1).")
    ] = None,
    collect_only: CollectOnly = False,
    as_json: JsonSummary = False,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Hold every provider to the careful yardstick alone (our own kernels always are); by default "
            "a provider fails only where it is worse than the semantics as users write them in PyTorch "
            "(ligerbench/tolerance.py).",
        ),
    ] = False,
    repeat: Annotated[
        int,
        typer.Option(
            "--repeat",
            min=1,
            metavar="N",
            help="Run each case N times for every provider that declares itself deterministic; any bit "
            "that differs between runs fails (a race shows in a few runs of many).",
        ),
    ] = 1,
    nproc: Annotated[
        int,
        typer.Option(
            metavar="N",
            help="Run on N real ranks started by torch.distributed.run (gloo on CPU, NCCL on GPUs), for "
            "vocab-parallel kernels: only the cases split over N ranks. 0: in this process.",
        ),
    ] = 0,
    timeout: Annotated[
        float,
        typer.Option(
            metavar="SECONDS", help="With --nproc: wall-clock limit in seconds of the ranks' run (then killed)."
        ),
    ] = 1800.0,
):
    """Check providers' loss and gradients against a float64 truth.

    Case by case, every provider of the kernel against a float64 reference.

    Every axis of the kernel is also an option of its own name (`_` written `-`), repeatable,
    the same as --where AXIS=VALUE and combined with it: --reduction none, --dtype bf16,
    --ignore-pattern leading_run, --logits confident (also --reduction=none). `ligerbench list`
    shows each kernel's axes and values; "Axis options" below names them. Where an axis's option
    is one of verify's own (--device, --seed, ...), verify's option wins and the axis is reached
    through --where.

    Exit status: 0 when every check passes, 1 when any fails or errors (they are named) or
    when a provider named with --provider cannot load or is checked on no case (the reason is
    printed), 2 on a usage error or unusable input, 130 when interrupted (completed rows kept).
    Results go to OUT/<run-id>/: records.csv, summary.md, env.json (with the run manifest).

    Examples:

      ligerbench verify --kernel ce --reduction none

      ligerbench verify --kernel ce --where reduction=none

      ligerbench verify --kernel flce --logits confident --dtype bf16 --dtype fp16

      ligerbench verify --kernel ce --provider mypkg.losses:my_ce

      ligerbench verify -k "bf16 and not (sum or mean)" --collect-only

      ligerbench verify --case ce/n16/v1000/fp32/none/up-ones/none/plain/normal --provider ours -x

      ligerbench verify --kernel vp_ce --nproc 2 --device cpu

      ligerbench verify --kernel flp --provider textbook --strict

      ligerbench verify --kernel flce --preset full --dtype fp16 --repeat 8
    """
    dev, mode = runs.resolve_device(device)
    registry = default_registry()
    runs.report_plugin_errors(registry)
    preset_name = runs.resolve_preset(preset, dev, list(registry.presets))
    kernel = runs.check_kernel(registry, kernel)
    provider = named.add_adhoc(registry, kernel, provider, mutates_input=mutates_input)
    _check_names(registry, kernel, provider, suite)
    named.require_loadable(registry, kernel, provider, dev.type)
    try:
        filters = axes.parse_where(registry.kernels[kernel].axes, preset_name, where or [], kernel=kernel)
    except axes.UnknownAxisValue as exc:
        raise runs.usage_error(str(exc), "--where") from exc
    for name, values in _axis_options(ctx, registry, kernel, preset_name).items():  # --reduction none
        filters.setdefault(name, set()).update(values)

    if nproc < 0 or (nproc and dev.type == "cuda" and nproc > torch.cuda.device_count()):
        raise runs.usage_error(f"--nproc must be 0 or at most the GPUs here (one rank per GPU), got {nproc}", "--nproc")
    if not nproc:
        runs.check_simulated(registry.kernels[kernel], dev.type, "--nproc")
    try:
        matches = kexpr.compile_expr(keyword) if keyword is not None else None
    except ValueError as exc:
        raise runs.usage_error(str(exc), "-k") from exc
    exact = set(case or [])

    def keep(c: Case) -> bool:
        if nproc and registry.kernels[kernel].ranks(c) != nproc:  # --nproc N runs the cases split over N ranks
            return False
        if matches is not None and not matches(c.id):
            return False
        if exact and c.id not in exact:
            return False
        return axes.case_matches(c, filters)

    plan = make_plan(
        registry,
        kernel=kernel,
        preset=preset_name,
        device_type=dev.type,
        suites=suite,
        providers=provider,
        case_filter=keep,
        strict=strict,
        repeat=repeat,
    )
    missing = sorted(exact - {c.id for c in plan.cases})
    if missing:
        raise runs.usage_error(f"no such case of kernel {kernel} in this selection: {', '.join(missing)}", "--case")
    if not plan.cases:
        raise typer.BadParameter("no case matches these filters on this device", param_hint="filters")
    selection = {k: sorted(v) for k, v in filters.items() if v}
    selection |= {"k": keyword, "case": sorted(exact), "provider": provider, "suite": suite, "strict": strict,
                  "repeat": repeat if repeat > 1 else None}  # fmt: skip
    selection = {k: v for k, v in selection.items() if v}
    if collect_only:
        collect(plan, kernel, preset_name, selection, as_json)
        return ExitCode.OK
    if not as_json:  # the first line says what the run will take, and why on a GPU it is long
        auto = " (auto on a GPU: --preset quick for a fast look)" if preset == "auto" and dev.type == "cuda" else ""
        runs.console.print(f"verify {kernel}: preset {preset_name}{auto}, {len(plan.cases)} cases", markup=False)
    job = VerifyJob(plan, registry, dev, seed=seed, preset=preset_name, named=provider, nproc=nproc, timeout_s=timeout,
                    maxfail=1 if exitfirst else maxfail)  # fmt: skip
    return lifecycle.execute(job, quiet=as_json, device=dev, triton_mode=mode, seed=seed, out=out, filters=selection,
                             preset=preset_name, kernel=kernel)  # fmt: skip


def own_options(ctx: typer.Context) -> set[str]:
    """Every option name verify itself declares, -h included (an axis option of the same name loses)."""
    return {o for p in ctx.command.get_params(ctx) for o in (*p.opts, *p.secondary_opts)}


def axis_option_rows(reserved: set[str]) -> list[tuple[str, str]]:
    """-h's "Axis options": each registered kernel (plugins' too) with its axes as options; an axis
    whose option is one of verify's own (`reserved`) is named as reachable through --where only."""
    rows = []
    for name, spec in default_registry().kernels.items():
        options = [axes.option_name(a.name) for a in spec.axes]
        text = " ".join(o for o in options if o not in reserved)
        taken = [a.name for a in spec.axes if axes.option_name(a.name) in reserved]
        rows.append((name, text + (f" (--where only: {', '.join(taken)})" if taken else "")))
    return rows


def _axis_options(ctx: typer.Context, registry: Registry, kernel: str, preset: str) -> dict[str, set]:
    """The options verify did not know itself (ctx.args), read as the kernel's axis options:
    {axis: {value, ...}} as parse_where gives; an error is a usage error (exit 2), one line."""
    spec_axes = registry.kernels[kernel].axes
    try:
        items = axes.parse_axis_options(spec_axes, ctx.args, kernel=kernel, reserved=own_options(ctx))
        return axes.parse_where(spec_axes, preset, items, kernel=kernel, as_options=True)
    except axes.UnknownAxisValue as exc:
        ctx.fail(str(exc))


def _check_names(registry: Registry, kernel: str, providers, suites) -> None:
    known_p = [p.name for p in registry.providers_for(kernel, mutants=True)]
    for p in providers or []:
        if p not in known_p:
            raise runs.usage_error(f"unknown provider {p!r}; choose from {', '.join(known_p)}", "--provider")
    known_s = [s.name for s in registry.suites_for(kernel)]
    for s in suites or []:
        if s not in known_s:
            raise typer.BadParameter(f"unknown suite {s!r}; choose from {', '.join(known_s)}", param_hint="--suite")

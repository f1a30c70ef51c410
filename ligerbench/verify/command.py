"""`ligerbench verify`: every provider of a kernel against the float64 reference, case by case.

    ligerbench verify --kernel ce --reduction none
    ligerbench verify --kernel flce --preset quick --option softcap
    ligerbench verify --kernel ce --provider mutant_first_row_upstream --ignore-pattern leading_run   # exits 1
    ligerbench verify --kernel ce --provider mypkg.losses:my_ce          # your own callable
    ligerbench verify --kernel vp_ce --nproc 2 --device cpu    # 2 real ranks (gloo), ligerbench/distributed/

The command only orchestrates: the engine is ligerbench/verify/engine.py, the kernel's grid,
suites and providers come from the registry (suites/<kernel>.py or a plugin).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Annotated, Optional

import torch
import typer
from rich.console import Console
from rich.table import Table

from ligerbench import named, runs
from ligerbench.builtin import default_registry
from ligerbench.cases import Case
from ligerbench.distributed import launch
from ligerbench.records import load_records
from ligerbench.registry import Registry
from ligerbench.verify import summary
from ligerbench.verify.engine import make_plan, run_plan

# Case fields a run can be narrowed by (--reduction none, ...): the values a kernel accepts are
# those its grid has, so a plugin kernel's filters work without an edit here.
FILTERS = ("reduction", "ignore_pattern", "dtype", "option", "logits")


def verify(
    kernel: Annotated[
        Optional[str],
        typer.Option(help="Kernel to verify (`ligerbench list` names them); default: the first registered."),
    ] = None,
    reduction: Annotated[Optional[list[str]], typer.Option(help="Only these reductions (repeatable).")] = None,
    ignore_pattern: Annotated[
        Optional[list[str]], typer.Option(help="Only these ignore-index patterns (repeatable), e.g. leading_run.")
    ] = None,
    dtype: Annotated[Optional[list[str]], typer.Option(help="Only these input dtypes (repeatable).")] = None,
    option: Annotated[
        Optional[list[str]], typer.Option(help="Only these loss options (repeatable), e.g. softcap.")
    ] = None,
    logits: Annotated[
        Optional[list[str]], typer.Option(help="Only these kinds of logits (repeatable), e.g. confident.")
    ] = None,
    provider: Annotated[
        Optional[list[str]],
        typer.Option(
            help="Only these providers (repeatable); `ligerbench list` names them. Mutants run only here. "
            "MODULE:FUNCTION or PATH.py:FUNCTION checks your own callable (docs/providers.md)."
        ),
    ] = None,
    mutates_input: Annotated[
        bool, typer.Option(help="The MODULE:FUNCTION providers write into the inputs they are handed (declared).")
    ] = False,
    suite: Annotated[Optional[list[str]], typer.Option(help="Only these suites (repeatable).")] = None,
    preset: Annotated[str, typer.Option(help="Case sizes: quick (CPU), full (GPU); auto picks by device.")] = "auto",
    device: Annotated[str, typer.Option(help="Where to run: auto, cpu or cuda; auto prefers CUDA.")] = "auto",
    seed: Annotated[int, typer.Option(help="Seed of every case's inputs; same seed, same numbers.")] = 0,
    out: Annotated[Path, typer.Option(help="Results root; each run gets a new folder inside.")] = runs.DEFAULT_ROOT,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON summary on stdout instead of tables.")] = False,
    nproc: Annotated[
        int,
        typer.Option(
            help="Run on N real ranks started by torch.distributed.run (gloo on CPU, NCCL on GPUs), for "
            "vocab-parallel kernels: only the cases split over N ranks. 0: in this process."
        ),
    ] = 0,
    timeout: Annotated[
        float, typer.Option(help="With --nproc: wall-clock limit in seconds of the ranks' run (then killed).")
    ] = 1800.0,
):
    """Check providers' loss and gradients against a float64 reference, case by case.

    Exit status: 0 when every check passes, 1 when any fails or errors (they are named) or
    when a provider named with --provider cannot load or is checked on no case (the reason is
    printed), 2 on a usage error. Results go to OUT/<run-id>/: records.csv, summary.md, env.json.

    Examples:

      ligerbench verify --kernel ce --reduction none

      ligerbench verify --kernel flce --logits confident --dtype bf16

      ligerbench verify --kernel ce --provider mypkg.losses:my_ce
    """
    dev, mode = runs.resolve_device(device)
    registry = default_registry()
    runs.report_plugin_errors(registry)
    preset_name = runs.resolve_preset(preset, dev, list(registry.presets))
    kernel = runs.check_kernel(registry, kernel)
    provider = named.add_adhoc(registry, kernel, provider, mutates_input=mutates_input)
    _check_names(registry, kernel, provider, suite)
    named.require_loadable(registry, kernel, provider, dev.type)
    chosen = {"reduction": reduction, "ignore_pattern": ignore_pattern, "dtype": dtype, "option": option}
    chosen["logits"] = logits
    filters = _filters(registry, kernel, preset_name, dev.type, chosen)

    if nproc < 0 or (nproc and dev.type == "cuda" and nproc > torch.cuda.device_count()):
        raise runs.usage_error(f"--nproc must be 0 or at most the GPUs here (one rank per GPU), got {nproc}", "--nproc")

    def keep(case: Case) -> bool:
        ranks_ok = not nproc or case.world == nproc  # --nproc N runs the cases split over N ranks
        return ranks_ok and all(not allowed or getattr(case, name) in allowed for name, allowed in filters.items())

    plan = make_plan(
        registry,
        kernel=kernel,
        preset=preset_name,
        device_type=dev.type,
        suites=suite,
        providers=provider,
        case_filter=keep,
    )
    if not plan.cases:
        raise typer.BadParameter("no case matches these filters on this device", param_hint="filters")

    run = runs.start(
        "verify", kernel, device=dev, triton_mode=mode, seed=seed, out=out, preset=preset_name, kernel=kernel
    )
    random.seed(seed)
    interrupted = False
    done = 0
    facts: dict = {"nproc": nproc} if nproc else {}
    try:
        with run.progress(f"verify {kernel}", total=len(plan.cases), disable=as_json) as advance:

            def on_case(case: Case) -> None:
                nonlocal done
                done += 1
                advance(case.id)

            if nproc:  # the ranks' rank 0 writes the records (ligerbench/distributed/launch.py)
                run.writer.close()
                facts = launch.run_plan_on_ranks(
                    plan, nproc=nproc, run_id=run.id, run_path=run.path, seed=seed, preset=preset_name,
                    device_type=dev.type, timeout_s=timeout, echo=None if as_json else launch.echo_with(advance),
                )  # fmt: skip
                done = facts.pop("completed_cases")
            else:
                run_plan(plan, registry, run_id=run.id, seed=seed, device=dev, writer=run.writer, on_case=on_case)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        # with --nproc the ranks wrote the records: read them back once the writer is closed
        run.writer.close()
        df = load_records(run.path / "records.csv") if nproc else run.writer.frame()
        unchecked = {} if interrupted else named.missing_evidence(df, provider)
        facts["unchecked_providers"] = unchecked
        run.finish(interrupted=interrupted, planned_cases=len(plan.cases), completed_cases=done, **facts)
        title = f"ligerbench verify {kernel} ({run.id})"
        text = summary.summary_markdown(df, run.env, title=title, interrupted=interrupted)
        (run.path / "summary.md").write_text(named.mark_summary(text, unchecked))
    code = 130 if interrupted else max(summary.exit_code(df), 1 if unchecked else 0)
    if as_json:
        payload = _json_summary(df, run.id, run.path, code)
        print(json.dumps({**payload, "unchecked_providers": unchecked}, indent=2, default=str))
    else:
        _print_tables(df, run.path)
    named.print_missing(unchecked)
    raise typer.Exit(code)


def _check_names(registry: Registry, kernel: str, providers, suites) -> None:
    known_p = [p.name for p in registry.providers_for(kernel, mutants=True)]
    for p in providers or []:
        if p not in known_p:
            raise runs.usage_error(f"unknown provider {p!r}; choose from {', '.join(known_p)}", "--provider")
    known_s = [s.name for s in registry.suites_for(kernel)]
    for s in suites or []:
        if s not in known_s:
            raise typer.BadParameter(f"unknown suite {s!r}; choose from {', '.join(known_s)}", param_hint="--suite")


def _filters(registry: Registry, kernel: str, preset: str, device_type: str, chosen: dict) -> dict[str, set]:
    """Each filter's values, checked against the values the kernel's grid has."""
    grid = registry.kernels[kernel].grid(preset, device_type)
    out = {}
    for name, values in chosen.items():
        known = list(dict.fromkeys(str(getattr(c, name)) for c in grid))
        for v in values or []:
            if v not in known:
                hint = "--" + name.replace("_", "-")
                message = f"{v!r} is not a {name} of kernel {kernel}; choose from {', '.join(known)}"
                raise typer.BadParameter(message, param_hint=hint)
        out[name] = set(values or [])
    return out


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
            detail = r["message"] or f"{r['value']:.3g} > {r['limit']:.3g}"
            out.print(
                f"  {r['verdict'].upper()} {r['suite']} {r['provider']} {r['quantity']} {r['case']}: {detail}",
                soft_wrap=True,
                markup=False,
            )
        if len(bad) > 50:
            out.print(f"  ... and {len(bad) - 50} more in {path / 'records.csv'}")
    out.print(f"results: {path}")

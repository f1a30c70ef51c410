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

import random
from pathlib import Path
from typing import Annotated, Optional

import torch
import typer
from rich.console import Console

from ligerbench import kexpr, named, runs, tables
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
    keyword: Annotated[
        Optional[str],
        typer.Option("-k", help="Only cases whose id matches EXPR: substrings joined by and/or/not/( ), as in pytest."),
    ] = None,
    case: Annotated[
        Optional[list[str]],
        typer.Option("--case", help="Only this case id, exactly as a FAIL line prints it (repeatable)."),
    ] = None,
    exitfirst: Annotated[bool, typer.Option("-x", "--exitfirst", help="Stop after the first failing case.")] = False,
    maxfail: Annotated[
        Optional[int], typer.Option("--maxfail", min=1, help="Stop after N failing cases (then exit 1).")
    ] = None,
    collect_only: Annotated[
        bool, typer.Option("--collect-only", "--dry-run", help="Print the cases a run would take, run nothing.")
    ] = False,
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
    printed), 2 on a usage error or unusable input, 130 when interrupted (completed rows kept).
    Results go to OUT/<run-id>/: records.csv, summary.md, env.json (with the run manifest).

    Examples:

      ligerbench verify --kernel ce --reduction none

      ligerbench verify --kernel flce --logits confident --dtype bf16

      ligerbench verify --kernel ce --provider mypkg.losses:my_ce

      ligerbench verify -k "bf16 and not (sum or mean)" --collect-only

      ligerbench verify --case ce/n16/v1000/fp32/none/up-ones/none/plain/normal --provider ours -x

      ligerbench verify --kernel vp_ce --nproc 2 --device cpu
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
    try:
        matches = kexpr.compile_expr(keyword) if keyword is not None else None
    except ValueError as exc:
        raise runs.usage_error(str(exc), "-k") from exc
    exact = set(case or [])

    def keep(c: Case) -> bool:
        if nproc and c.world != nproc:  # --nproc N runs the cases split over N ranks
            return False
        if matches is not None and not matches(c.id):
            return False
        if exact and c.id not in exact:
            return False
        return all(not allowed or getattr(c, name) in allowed for name, allowed in filters.items())

    plan = make_plan(
        registry,
        kernel=kernel,
        preset=preset_name,
        device_type=dev.type,
        suites=suite,
        providers=provider,
        case_filter=keep,
    )
    missing = sorted(exact - {c.id for c in plan.cases})
    if missing:
        raise runs.usage_error(f"no such case of kernel {kernel} in this selection: {', '.join(missing)}", "--case")
    if not plan.cases:
        raise typer.BadParameter("no case matches these filters on this device", param_hint="filters")
    selection = {k: sorted(v) for k, v in filters.items() if v}
    selection |= {"k": keyword, "case": sorted(exact), "provider": provider, "suite": suite}
    selection = {k: v for k, v in selection.items() if v}
    if collect_only:
        _collect(plan, kernel, preset_name, selection, as_json)
        raise typer.Exit(0)

    run = runs.start(
        "verify",
        kernel,
        device=dev,
        triton_mode=mode,
        seed=seed,
        out=out,
        filters=selection,
        planned=len(plan.cases),
        preset=preset_name,
        kernel=kernel,
    )
    random.seed(seed)
    interrupted = stopped = False
    done = 0
    facts: dict = {"nproc": nproc} if nproc else {}
    limit = 1 if exitfirst else maxfail
    failing = runs.FailingCases(run.writer, limit)
    try:
        with run.progress(f"verify {kernel}", total=len(plan.cases), disable=as_json) as advance:

            def on_case(c: Case) -> None:
                nonlocal done
                done += 1
                advance(c.id)
                failing.check()

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
    except runs.StopEarly:
        stopped = True
    finally:
        # with --nproc the ranks wrote the records: read them back once the writer is closed
        run.writer.close()
        df = load_records(run.path / "records.csv") if nproc else run.writer.frame()
        unchecked = {} if interrupted else named.missing_evidence(df, provider)
        run.finish(
            interrupted=interrupted,
            planned=len(plan.cases),
            completed=done,
            stopped_early=stopped,
            rows=len(df),
            unchecked_providers=unchecked,
            **facts,
        )
        title = f"ligerbench verify {kernel} ({run.id})"
        text = summary.summary_markdown(df, run.env, title=title)
        (run.path / "summary.md").write_text(named.mark_summary(text, unchecked))
    code = runs.INTERRUPTED if interrupted else max(summary.exit_code(df, run.env), 1 if unchecked else 0)
    if as_json:
        runs.print_json({**_json_summary(df, run, code), "unchecked_providers": unchecked})
    else:
        _print_tables(df, run.path, kernel)
    named.print_missing(unchecked)
    if interrupted:
        runs.say_interrupted(run)
    elif stopped:
        runs.console.print(f"stopped after {failing.count} failing case(s) (-x/--maxfail): {done} of {len(plan.cases)}")
    raise typer.Exit(code)


def _collect(plan, kernel: str, preset: str, selection: dict, as_json: bool) -> None:
    """--collect-only: what a run with these options would take, without running it."""
    ids = [c.id for c in plan.cases]
    facts = {
        "command": "verify",
        "kernel": kernel,
        "preset": preset,
        "filters": selection,
        "cases": len(ids),
        "providers": [p.name for p in plan.providers],
        "suites": [s.name for s in plan.suites],
        "case_ids": ids,
    }
    if as_json:
        runs.print_json(facts)
        return
    for i in ids:
        print(i)
    print(
        f"{len(ids)} cases x {len(plan.providers)} providers ({', '.join(facts['providers'])}); "
        f"suites {', '.join(facts['suites'])}; preset {preset}"
    )


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


def _json_summary(df, run: runs.Run, code: int) -> dict:
    bad = summary.problems(df)
    failures = bad[["suite", "provider", "case", "quantity", "value", "limit", "verdict", "message"]]
    return runs.json_report(
        run.env,
        exit_code=code,
        status=runs.status_word(code),
        counts=runs.verdict_counts(df),
        path=run.path,
        problems=runs.problems(run.env, df),
        failures=failures.to_dict("records"),
    )


def _print_tables(df, path: Path, kernel: str) -> None:
    out = Console()
    cols = summary.counts(df).rename(columns={"worst_error_over_limit": "worst/limit"})
    numbers = [c for c in cols.columns if c not in ("suite", "provider")]
    tables.show(out, "verify: per suite and provider", list(cols.columns), cols.values.tolist(), right=numbers)
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
        first = bad.iloc[0]
        out.print(
            f"re-run one: ligerbench verify --kernel {kernel} --provider {first['provider']} --case {first['case']}",
            soft_wrap=True,
            markup=False,
        )
    out.print(f"results: {path}")

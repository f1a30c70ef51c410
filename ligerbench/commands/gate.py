"""`ligerbench gate`: a run against a baseline, as an exit status CI can act on.

    ligerbench gate results/<run> --baseline results/baselines/verify-ce-quick --junit gate.xml
    ligerbench gate results/<bench-run> --baseline results/baselines/bench-ce-vocab-full \\
        --remeasure "ligerbench bench --kernel ce --sweep vocab --out {out}" --threshold time_ms=0.05

The command holds its options and one call into the rules: inputs and their checks in
ligerbench/gate/inputs.py, the rules in ligerbench/gate/rules.py, JUnit, markdown and JSON in
ligerbench/gate/output.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape

from ligerbench import runs, verdict
from ligerbench.builtin import default_registry
from ligerbench.exits import ExitCode, UsageError
from ligerbench.gate import output as gate_output
from ligerbench.gate import rules

console = Console(stderr=True)


def _pairs(items: list[str] | None, hint: str, known: list[str] | None, convert) -> dict:
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise UsageError(f"{item!r}: expected NAME=VALUE", hint)
        if known is not None and name not in known:
            raise UsageError(f"unknown {hint} name {name!r}; choose from {', '.join(known)}", hint)
        try:
            out[name] = convert(value)
        except ValueError as exc:
            raise UsageError(f"{item!r}: {exc}", hint) from exc
    return out


def _fraction(value: str) -> float:
    x = float(value)
    if not x >= 0:
        raise ValueError("a threshold is a fraction >= 0, e.g. 0.1 for 10%")
    return x


def gate(
    run: Annotated[Path, typer.Argument(help="Run folder (records.csv, env.json) to judge.")],
    baseline: Annotated[Path, typer.Option(help="Baseline run folder, e.g. results/baselines/bench-ce-vocab-full.")],
    threshold: Annotated[
        Optional[list[str]],
        typer.Option(
            help="METRIC=FRACTION (repeatable): allowed worsening of a ratio to the peer before it is a "
            f"regression. Defaults: {', '.join(f'{m}={t}' for m, t in rules.DEFAULT_THRESHOLDS.items())}."
        ),
    ] = None,
    peer: Annotated[
        Optional[list[str]],
        typer.Option(
            help="KERNEL=PROVIDER (repeatable): the peer each provider is divided by. Default: each "
            "kernel's registered peer (`ligerbench list`; PyTorch eager for ours: always installed, and it "
            "does not change with a third-party package's version)."
        ),
    ] = None,
    remeasure: Annotated[
        Optional[str],
        typer.Option(
            help="Command that measures again when a regression is found; {out} is replaced by a fresh "
            "results root, and the run folder it makes there is the re-measurement."
        ),
    ] = None,
    recheck: Annotated[
        Optional[Path], typer.Option(help="A second run folder already measured: the re-measurement.")
    ] = None,
    junit: Annotated[Optional[Path], typer.Option(help="Write JUnit XML here.")] = None,
    markdown: Annotated[Optional[Path], typer.Option(help="Write the markdown summary (a PR comment) here.")] = None,
    subset: Annotated[
        Optional[list[str]],
        typer.Option(
            help="FIELD=VALUE or k=EXPR (repeatable): the run is a deliberate subset of the baseline "
            "(e.g. reduction=none, provider=ours, k='bf16 and sum'); only the baseline's checks in it "
            "are expected. Without it, a check of the baseline missing from the run fails the gate."
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print a JSON verdict on stdout instead of markdown.")
    ] = False,
):
    """Judge a run against a baseline: failures and regressions.

    Fail on any failed or errored check in RUN, and on performance regressions against BASELINE
    (ratios to a peer timed in the same run, same GPU, case and provider) that survive one
    re-measurement.

    RUN's manifest (env.json) must say it finished what it planned: an interrupted, unfinished or
    stopped-early run fails. Every check of the baseline must be compared in RUN (the gate says how
    many it compared) unless --subset declares the run a deliberate subset. A selftest run is gated
    on its kill matrix: a surviving mutant or a kill lost since the baseline fails.

    Exit status: 0 pass; 1 failures, regressions, missing checks, an incomplete run, survivors or
    lost kills (each listed); 2 unusable input (a missing, damaged, empty, truncated or incomplete
    baseline; an empty or truncated run; a run of another kind or kernel than the baseline; an
    unwritable --junit/--markdown path), said plainly, or a usage error.

    Examples:

      ligerbench gate results/<run> --baseline results/baselines/verify-ce-quick --junit gate.xml

      ligerbench gate results/<run> --baseline results/baselines/verify-ce-quick --subset reduction=none

      ligerbench gate results/<bench-run> --baseline results/baselines/bench-ce-vocab-full --json
    """
    if remeasure and recheck:
        raise UsageError("give --remeasure or --recheck, not both", "--remeasure")
    thresholds = _pairs(threshold, "--threshold", list(rules.DEFAULT_THRESHOLDS), _fraction)
    registry = default_registry()
    runs.report_plugin_errors(registry)
    peers = {k.name: k.peer for k in registry.kernels.values()} | _pairs(peer, "--peer", None, str)
    try:
        chosen = rules.parse_subset(subset)
    except ValueError as exc:
        raise UsageError(str(exc), "--subset") from exc
    try:
        result = rules.evaluate(
            rules.load(run),
            rules.load(baseline),
            thresholds=thresholds,
            peers=peers,
            recheck=rules.load(recheck) if recheck else None,
            remeasure_command=remeasure,
            subset=chosen,
        )
    except rules.Unusable as exc:
        console.print(f"[bold red]gate: unusable input:[/] {escape(str(exc))}", soft_wrap=True)
        if as_json:
            runs.print_json(gate_output.unusable_json(str(exc)))
        return ExitCode.USAGE
    text = gate_output.markdown(result)
    if junit:
        gate_output.junit(result, junit)
    if markdown:
        markdown.write_text(text)
    if as_json:
        runs.print_json(gate_output.as_json(result))
    else:
        print(text)
        verdict.say(result.exit_code, gate_output.tally(result), result.run.path)
    return ExitCode.of(result.exit_code)

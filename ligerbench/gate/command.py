"""`ligerbench gate`: a run against a baseline, as an exit status CI can act on.

    ligerbench gate results/<run> --baseline results/baselines/verify-ce-quick --junit gate.xml
    ligerbench gate results/<bench-run> --baseline results/baselines/bench-ce-vocab-full \\
        --remeasure "ligerbench bench --kernel ce --sweep vocab --out {out}" --threshold time_ms=0.05

The command only orchestrates: the rules are in ligerbench/gate.py, JUnit and markdown in
ligerbench/gate_output.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from ligerbench import runs
from ligerbench.builtin import default_registry
from ligerbench.gate import output as gate_output
from ligerbench.gate import rules

console = Console(stderr=True)


def _pairs(items: list[str] | None, hint: str, known: list[str] | None, convert) -> dict:
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise typer.BadParameter(f"{item!r}: expected NAME=VALUE", param_hint=hint)
        if known is not None and name not in known:
            raise typer.BadParameter(f"unknown {hint} name {name!r}; choose from {', '.join(known)}", param_hint=hint)
        try:
            out[name] = convert(value)
        except ValueError as exc:
            raise typer.BadParameter(f"{item!r}: {exc}", param_hint=hint) from exc
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
):
    """Fail on any failed or errored check in RUN, and on performance regressions against BASELINE
    (ratios to a peer timed in the same run, same GPU, case and provider) that survive one
    re-measurement.

    Exit status: 0 pass, 1 failures or regressions (each listed), 2 unusable input (missing or
    mismatched baseline, said plainly) or a usage error.
    """
    if remeasure and recheck:
        raise typer.BadParameter("give --remeasure or --recheck, not both", param_hint="--remeasure")
    thresholds = _pairs(threshold, "--threshold", list(rules.DEFAULT_THRESHOLDS), _fraction)
    registry = default_registry()
    runs.report_plugin_errors(registry)
    peers = {k.name: k.peer for k in registry.kernels.values()} | _pairs(peer, "--peer", None, str)
    try:
        result = rules.evaluate(
            rules.load(run),
            rules.load(baseline),
            thresholds=thresholds,
            peers=peers,
            recheck=rules.load(recheck) if recheck else None,
            remeasure_command=remeasure,
        )
    except rules.Unusable as exc:
        console.print(f"[bold red]gate: unusable input:[/] {exc}", soft_wrap=True)
        raise typer.Exit(2) from exc
    text = gate_output.markdown(result)
    if junit:
        gate_output.junit(result, junit)
    if markdown:
        markdown.write_text(text)
    print(text)
    raise typer.Exit(result.exit_code)

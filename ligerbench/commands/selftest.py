"""`ligerbench selftest`: proof that every check fails on the bug it exists for.

    ligerbench selftest --preset quick                        # CPU (Triton's interpreter), CI
    ligerbench selftest --mutant mutant_zloss_no_grad          # one planted bug
    ligerbench selftest --kernel flce                          # one kernel's planted bugs
    ligerbench selftest --kernel ce --control mypkg.losses:my_ce   # kills judged against your kernel

The command holds its options and its selection; the run is ligerbench/selftest/job.py under
ligerbench/lifecycle.py. Campaigns and how mutants run in ligerbench/selftest/, the kill
matrix in ligerbench/selftest/killmatrix.py, the mutants themselves registered by each kernel's
suite module (and converge's in ligerbench/converge/mutants.py).
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ligerbench import kexpr, lifecycle, named, runs
from ligerbench.builtin import default_registry
from ligerbench.commands.options import CollectOnly, JsonSummary, ResultsRoot
from ligerbench.exits import ExitCode
from ligerbench.selftest import engine, kernels
from ligerbench.selftest.job import SelftestJob, collect


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
    out: ResultsRoot = runs.DEFAULT_ROOT,
    keyword: Annotated[
        Optional[str], typer.Option("-k", help="Only mutants whose name matches EXPR (and/or/not/( ), as in pytest).")
    ] = None,
    collect_only: CollectOnly = False,
    as_json: JsonSummary = False,
):
    """Prove every check fails on the planted bug it exists for.

    Run every planted bug (mutant) through the suites and print the kill matrix (mutant x suite:
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
        raise runs.usage_error(str(exc), "targets") from exc
    if kernel is not None:
        found = [m for m in found if m.kernel == kernel]
    known = [m.name for m in found]
    for name in mutant or []:
        if name not in known:
            raise runs.usage_error(f"unknown mutant {name!r}; choose from {', '.join(known)}", "--mutant")
    try:
        matches = kexpr.compile_expr(keyword) if keyword is not None else (lambda name: True)
    except ValueError as exc:
        raise runs.usage_error(str(exc), "-k") from exc
    chosen = [m for m in found if (not mutant or m.name in mutant) and matches(m.name)]
    if not chosen:
        raise runs.usage_error("no mutant is registered for this selection", "--mutant")
    for name in dict.fromkeys(m.kernel for m in chosen if m.kernel):  # mutants run in one process
        runs.check_simulated(registry.kernels[name], dev.type, "--kernel")
    selection = {k: v for k, v in {"kernel": kernel, "mutant": mutant, "k": keyword}.items() if v}
    if collect_only:
        collect(chosen, preset_name, selection, as_json)
        return ExitCode.OK
    job = SelftestJob(registry, chosen, preset_name, dev, seed, label=kernel or "all")
    return lifecycle.execute(job, quiet=as_json, device=dev, triton_mode=mode, seed=seed, out=out, filters=selection,
                             preset=preset_name)  # fmt: skip


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

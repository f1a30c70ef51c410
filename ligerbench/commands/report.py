"""`ligerbench report RUN`: one self-contained page of a run (ligerbench/report/build.py builds it).

ligerbench report results/<run-id>          # writes report.md (+ PNGs) and report.html there
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from ligerbench import runs
from ligerbench.exits import ExitCode
from ligerbench.records import records_file
from ligerbench.report.build import Unreadable, build, verdict

console = Console(stderr=True)


def report(
    run: Annotated[Path, typer.Argument(help="Run folder with records.csv (and env.json).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON verdict of the run on stdout.")] = False,
):
    """Write one self-contained report of a run (markdown, HTML).

    Write RUN/report.md (plots beside it) and RUN/report.html (plots embedded): environment,
    verdicts, failures, checks, measurements, kill matrix, and the run's own plots. The status
    line reads the run's manifest (env.json): an interrupted, unfinished or empty run never reads
    as passed.

    Exit status: 0 the report is written and the run passed; 1 it is written and the run failed,
    was interrupted or is incomplete; 2 RUN is not a readable run folder (no records.csv, a
    damaged one, missing columns) or the report cannot be written there (read-only folder).

    Examples:

      ligerbench report results/20261122-044017-verify-ce-dde56f

      ligerbench report results/<run-id> --json
    """
    if not records_file(run).is_file():
        console.print(
            f"[bold red]report:[/] {escape(str(run))} has no records.csv (or records.csv.gz): "
            "not a ligerbench run folder"
        )
        return ExitCode.USAGE
    try:
        md, page, facts = build(run)
    except Unreadable as exc:
        console.print(f"[bold red]report:[/] {escape(str(exc))}", soft_wrap=True)
        return ExitCode.USAGE
    code = ExitCode.OK if facts["passed"] else ExitCode.FAILED
    if as_json:
        runs.print_json(
            runs.json_report(
                facts["env"],
                exit_code=int(code),
                status=code.status,
                counts=facts["counts"],
                path=run,
                verdict=facts["status"],
                problems=facts["problems"],
                report_md=str(md),
                report_html=str(page),
            )
        )
    else:
        print(f"{facts['status']}\n{md}\n{page}")
    return code


__all__ = ["report", "verdict"]

"""`ligerbench report RUN`: one self-contained page of a run (ligerbench/report.py builds it).

ligerbench report results/<run-id>          # writes report.md (+ PNGs) and report.html there
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

console = Console(stderr=True)


def report(run: Annotated[Path, typer.Argument(help="Run folder with records.csv (and env.json).")]):
    """Write RUN/report.md (plots beside it) and RUN/report.html (plots embedded): environment,
    verdicts, failures, checks, measurements, kill matrix, and the run's own plots.

    Exit status: 0 written, 2 when RUN is not a run folder.
    """
    from ligerbench.report.build import build

    if not (run / "records.csv").is_file():
        console.print(f"[bold red]report:[/] {run} has no records.csv: not a ligerbench run folder")
        raise typer.Exit(2)
    md, page = build(run)
    print(f"{md}\n{page}")

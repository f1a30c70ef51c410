"""The options several commands take alike, declared once: the same flag with the same help
wherever it is taken (verify, selftest, converge and bench all take --collect-only and --json)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

CollectOnly = Annotated[
    bool, typer.Option("--collect-only", "--dry-run", help="Print what a run would take, run nothing.")
]
JsonSummary = Annotated[bool, typer.Option("--json", help="Print a JSON summary on stdout instead of tables.")]
ResultsRoot = Annotated[Path, typer.Option(metavar="DIR", help="Results root; each run gets a new folder inside.")]

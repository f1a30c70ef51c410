"""The ligerbench command line: the Typer app. Each command's body lives with its job
(ligerbench/<job>/command.py); commands only orchestrate.

    ligerbench verify --kernel ce --reduction none
    ligerbench list
"""

from __future__ import annotations

from typing import Annotated

import typer

from ligerbench import __version__
from ligerbench.bench.command import bench
from ligerbench.catalog import list_registry
from ligerbench.converge.command import converge
from ligerbench.gate.command import gate
from ligerbench.report.command import report
from ligerbench.selftest.command import selftest
from ligerbench.verify.command import verify

app = typer.Typer(
    help="Verify and benchmark Triton loss kernels against a float64 truth and their peers.",
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        print(f"ligerbench {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Verify and benchmark Triton loss kernels against a float64 truth and their peers."""


app.command("verify")(verify)
app.command("list")(list_registry)
app.command("bench")(bench)
app.command("converge")(converge)
app.command("selftest")(selftest)
app.command("gate")(gate)
app.command("report")(report)


def main() -> None:
    app()


if __name__ == "__main__":
    main()

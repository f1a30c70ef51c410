"""The ligerbench command line: the Typer app. Each command is a module of ligerbench/commands/
(its options, its selection, one call into the machinery); this file adds them.

    ligerbench verify --kernel ce --reduction none
    ligerbench list
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Annotated

import pandas as pd
import typer
from rich.console import Console
from rich.markup import escape

from ligerbench import __version__
from ligerbench.commands.bench import bench
from ligerbench.commands.converge import converge
from ligerbench.commands.gate import gate
from ligerbench.commands.list import list_registry
from ligerbench.commands.report import report
from ligerbench.commands.selftest import selftest
from ligerbench.commands.verify import verify
from ligerbench.exits import CommandError, ExitCode, Refused, Terminated, UsageError

app = typer.Typer(
    help="Verify and benchmark Triton loss kernels against a float64 truth and their peers.",
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        print(f"ligerbench {__version__}")
        raise typer.Exit(ExitCode.OK)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Verify and benchmark Triton loss kernels against a float64 truth and their peers."""


# Exit codes, the same for every command (README.md, "Exit codes and run manifests"; the enum in
# ligerbench/exits.py): 0 every check passed; 1 a check failed or errored; 2 usage error or
# unusable input (I/O errors included), said in one line without a traceback; 130 interrupted
# (Ctrl-C), 143 terminated (SIGTERM). Machinery raises exits.CommandError; this file alone turns
# errors and the codes commands return into exits.
# Unusable input a command met while reading or writing files: one line, exit 2.
UNUSABLE = (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError)
_stderr = Console(stderr=True)


def quiet_interpreter_warnings() -> None:
    """Triton's interpreter divides on masked-off lanes too (numpy on the whole block) and numpy
    warns `invalid value encountered in divide`; those lanes are discarded, so the warning says
    nothing to the user. Only that module's RuntimeWarnings of this text are silenced."""
    warnings.filterwarnings(
        "ignore", message="invalid value encountered in", category=RuntimeWarning, module=r"triton\.runtime\."
    )


def reflow(doc: str | None) -> str:
    """A command's docstring as its help: each paragraph joined into one line, so the terminal
    wraps it at its own width (the source keeps its 100-column lines); indented paragraphs
    (the examples) are kept as written. The first paragraph is the one-line summary `-h` lists."""
    paragraphs = inspect.cleandoc(doc or "").split("\n\n")
    return "\n\n".join(p if p.startswith((" ", "\b")) else " ".join(p.split()) for p in paragraphs)


def contract(name: str, fn: Callable) -> Callable:
    """A command under the exit-code contract: the ExitCode it returns (None: OK) as the process's
    exit status; a usage error as Click's own (the option named, exit 2); unusable input, I/O and
    damaged-file errors as one line and exit 2; Ctrl-C outside a run's own handling as
    "interrupted" and exit 130 (SIGTERM: 143)."""

    @functools.wraps(fn)
    def command(*args, **kwargs):
        with warnings.catch_warnings():
            quiet_interpreter_warnings()
            try:
                code = fn(*args, **kwargs)
            except UsageError as exc:
                raise typer.BadParameter(str(exc), param_hint=exc.option) from None
            except Terminated:
                _stderr.print(f"{name}: terminated (SIGTERM)")
                raise typer.Exit(ExitCode.TERMINATED) from None
            except KeyboardInterrupt:
                _stderr.print(f"{name}: interrupted")
                raise typer.Exit(ExitCode.INTERRUPTED) from None
            except CommandError as exc:
                if str(exc) and not isinstance(exc, Refused):
                    _stderr.print(f"[bold red]{name}:[/] {escape(str(exc))}", soft_wrap=True)
                raise typer.Exit(exc.code) from None
            except UNUSABLE as exc:
                text = " ".join(str(exc).split()) or type(exc).__name__
                _stderr.print(f"[bold red]{name}:[/] {escape(text)} ({type(exc).__name__})", soft_wrap=True)
                raise typer.Exit(ExitCode.USAGE) from None
        if code:  # None or OK: Click's own exit 0
            raise typer.Exit(int(code))

    return command


for _name, _fn in (
    ("verify", verify),
    ("list", list_registry),
    ("bench", bench),
    ("converge", converge),
    ("selftest", selftest),
    ("gate", gate),
    ("report", report),
):
    app.command(_name, help=reflow(_fn.__doc__))(contract(_name, _fn))


def main() -> None:
    app()


if __name__ == "__main__":
    main()

"""The ligerbench command line: the Typer app. Each command is a module of ligerbench/commands/
(its options, its selection, one call into the machinery); this file adds them.

    ligerbench verify --kernel ce --reduction none
    ligerbench list
    ligerbench audit verl --device cpu
"""

from __future__ import annotations

import functools
import inspect
import re
import textwrap
import warnings
from collections.abc import Callable
from typing import Annotated

import pandas as pd
import typer
from rich.console import Console, Group
from rich.markup import escape
from rich.padding import Padding
from rich.panel import Panel
from rich.text import Text
from typer.core import TyperCommand

from ligerbench import __version__
from ligerbench.commands.audit import audit
from ligerbench.commands.bench import bench
from ligerbench.commands.converge import converge
from ligerbench.commands.gate import gate
from ligerbench.commands.list import list_registry
from ligerbench.commands.report import report
from ligerbench.commands.selftest import selftest
from ligerbench.commands.verify import axis_option_rows, own_options, verify
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


# Exit codes, the same for every command (docs/usage.md, "Exit codes and run manifests"; the enum in
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


# ----------------------------------------------------------------------------- -h at any width
# Typer's rich help puts each option in a five-column table (long, short, negative forms, type,
# help) that leaves the help 17 columns at 80; a command's -h here keeps typer's usage line, text
# and panels, with each panel two columns: the option as typed (names and metavar) and its help,
# the help at least 40 columns wide, else on its own indented lines below the option.

NAMES_MAX = 30  # the names column's widest (click's too); a longer name stands on its own line
HELP_MIN = 40  # narrower than this, the help goes below the option


def option_lines(rows: list[tuple[str, str]], width: int) -> list[str]:
    """(names, help) rows as lines of at most `width` characters: two columns where the help
    keeps HELP_MIN, otherwise each help on its own lines, indented, below its names."""
    names_w = min(max((len(n) for n, _ in rows), default=0), NAMES_MAX)
    help_w = width - names_w - 2
    beside = help_w >= HELP_MIN
    if not beside:
        names_w, help_w = 2, width - 4
    lines: list[str] = []
    for names, text in rows:
        helps = textwrap.wrap(text, help_w, break_on_hyphens=False) or [""]
        if beside and len(names) <= names_w:
            lines.append(f"{names:<{names_w}}  {helps.pop(0)}".rstrip())
        else:
            lines += textwrap.wrap(names, width, subsequent_indent="    ", break_on_hyphens=False)
        lines += [" " * (names_w + 2) + h for h in helps if h]
    return lines


def example_lines(paragraph: str, width: int) -> list[str]:
    """An indented paragraph (the examples) as written, a line wider than `width` wrapped with
    its continuation indented 4 more."""
    out = []
    for line in paragraph.removeprefix("\b\n").splitlines():
        indent = " " * (len(line) - len(line.lstrip()))
        out += textwrap.wrap(line.strip(), width, initial_indent=indent, subsequent_indent=indent + "    ",
                             break_on_hyphens=False) or [""]  # fmt: skip
    return out


# typer's type names as metavars, shorter: <list[str]> -> <str>... (repeatable), <int range> -> <int>
# (the range is in the help)
_METAVARS = re.compile(r"<list\[(.+?)\]>|<(int|float) range>")


def _metavar(m: re.Match) -> str:
    return f"<{m[1]}>..." if m[1] else f"<{m[2]}>"


class Command(TyperCommand):
    """A command whose -h reads well at any width (the note above)."""

    def extra_panels(self, ctx) -> list[tuple[str, list[tuple[str, str]]]]:
        """Panels after the options: (title, [(names, help), ...])."""
        return []

    def format_help(self, ctx, formatter) -> None:
        from typer import rich_utils  # typer's console: its theme, highlighter and width

        get_console = getattr(rich_utils, "_get_rich_console", None)
        if get_console is None:  # another typer: its own layout rather than none
            return super().format_help(ctx, formatter)
        console = get_console()
        width = console.width
        console.print(Padding(rich_utils.highlighter(self.get_usage(ctx)), 1), style=rich_utils.STYLE_USAGE_COMMAND)
        parts = []
        for i, paragraph in enumerate((self.help or "").split("\n\n")):
            if paragraph.startswith((" ", "\b")):
                text = Text("\n".join(example_lines(paragraph, width - 2)), style=rich_utils.STYLE_HELPTEXT)
                parts.append(rich_utils.highlighter(text))
            else:
                style = rich_utils.STYLE_HELPTEXT if i else rich_utils.STYLE_HELPTEXT_FIRST_LINE
                parts.append(rich_utils.highlighter(Text.from_markup(paragraph, style=style)))  # as typer does
            parts.append(Text(""))
        if parts:
            console.print(Padding(Group(*parts[:-1]), (0, 1, 1, 1)))
        panels: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = None if getattr(param, "hidden", False) else param.get_help_record(ctx)
            if record:
                record = (_METAVARS.sub(_metavar, record[0]), record[1])
                default = "Arguments" if param.param_type_name == "argument" else "Options"
                panels.setdefault(getattr(param, "rich_help_panel", None) or default, []).append(record)
        panels = {k: panels[k] for k in sorted(panels, key=lambda k: (k != "Arguments", k != "Options"))}
        for title, rows in [*panels.items(), *self.extra_panels(ctx)]:
            body = rich_utils.highlighter(Text("\n".join(option_lines(rows, width - 4))))
            console.print(
                Panel(body, title=title, title_align="left", border_style=rich_utils.STYLE_OPTIONS_PANEL_BORDER)
            )


class VerifyCommand(Command):
    """verify: its -h also lists every registered kernel's axis options."""

    def extra_panels(self, ctx) -> list[tuple[str, list[tuple[str, str]]]]:
        try:
            rows = axis_option_rows(own_options(ctx))
        except Exception:  # a broken plugin never costs the help
            return []
        return [("Axis options, by kernel (values: ligerbench list)", rows)]


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


# verify takes the options it does not declare: the chosen kernel's axis options (--reduction none),
# read by verify itself once --kernel is known (ligerbench/commands/verify.py)
AXIS_OPTIONS = {"allow_extra_args": True, "ignore_unknown_options": True}
for _name, _fn, _cls, _settings in (
    ("verify", verify, VerifyCommand, AXIS_OPTIONS),
    ("list", list_registry, Command, None),
    ("bench", bench, Command, None),
    ("converge", converge, Command, None),
    ("selftest", selftest, Command, None),
    ("gate", gate, Command, None),
    ("report", report, Command, None),
    ("audit", audit, Command, None),
):
    metavar = "[OPTIONS] [--AXIS VALUE]..." if _name == "verify" else "[OPTIONS]"
    app.command(_name, cls=_cls, context_settings=_settings, options_metavar=metavar, help=reflow(_fn.__doc__))(
        contract(_name, _fn)
    )


def main() -> None:
    app()


if __name__ == "__main__":
    main()

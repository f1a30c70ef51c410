"""The last line every command prints on the terminal: PASSED or FAILED, what it ran, the checks
it made, how many failed or errored, and where its results are.

    tally = verdict.Tally(units=48, unit="cases", checks=1056, failed=0, errors=0)
    verdict.say(ExitCode.OK, tally, Path("results/20261128-103500-verify-ce-a1b2c3"))
    # PASSED: 48 cases, 1056 checks, 0 failed, 0 errors; results/20261128-103500-verify-ce-a1b2c3

One line, one helper, for every command (verify, bench, converge and selftest through
ligerbench/lifecycle.py, gate and audit directly), so a newcomer reads the outcome from the last
line of any of them without opening summary.md. PASSED is said only for exit status 0: the word
follows the exit code, never the other way round, so the line cannot read as a pass where the
shell sees a failure. The line is never cut to the console's width: the folder's path is printed
whole (soft wrap), whatever the terminal does with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.text import Text

from ligerbench.exits import ExitCode

CHECKED = ("pass", "fail", "error")  # a row that made a check: compared, or tried and raised


@dataclass(frozen=True)
class Tally:
    """What a command ran and found, as its verdict line counts it."""

    units: int  # cases (steps, dtypes, mutants, runs) run
    unit: str = "cases"
    checks: int = 0  # checks made: rows compared or measured, skips not counted
    failed: int = 0
    errors: int = 0
    checks_word: str = "checks"  # bench: measurements
    failed_word: str = "failed"  # selftest: survived
    errors_word: str = "errors"  # selftest: the control's failing checks


def of_rows(df: pd.DataFrame, units: int, unit: str = "cases", checked=CHECKED, **words) -> Tally:
    """The tally of a run's records: rows whose verdict is in `checked` are its checks; fail and
    error rows its failures and errors."""
    verdicts = df["verdict"].astype(str) if len(df) else pd.Series(dtype=str)
    return Tally(units=units, unit=unit, checks=int(verdicts.isin(checked).sum()),
                 failed=int((verdicts == "fail").sum()), errors=int((verdicts == "error").sum()), **words)  # fmt: skip


def line(code: int, tally: Tally, folder: Path | str | None) -> str:
    """The verdict as text: PASSED only for exit status 0."""
    word = "PASSED" if int(code) == ExitCode.OK else "FAILED"
    text = (f"{word}: {_n(tally.units, tally.unit)}, {_n(tally.checks, tally.checks_word)}, "
            f"{tally.failed} {tally.failed_word}, {_n(tally.errors, tally.errors_word)}")  # fmt: skip
    return text + (f"; {folder}" if folder is not None else "")


def _n(count: int, plural: str) -> str:
    """`1 case`, `2 cases` (the words are given plural)."""
    return f"{count} {plural[:-1] if count == 1 and plural.endswith('s') else plural}"


def say(code: int, tally: Tally, folder: Path | str | None, console: Console | None = None) -> None:
    """Print the verdict line on stdout (after the tables; `| tail -1` reads it), coloured by its word."""
    text = line(code, tally, folder)
    word, rest = text.split(":", 1)
    out = Text(word, style="bold green" if word == "PASSED" else "bold red")
    out.append(":" + rest)
    (console or Console()).print(out, soft_wrap=True)

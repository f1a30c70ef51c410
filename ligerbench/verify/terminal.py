"""verify's counts as a newcomer reads them at 80 columns: what ran, per suite and provider; each
skipped provider once, with its reason; a legend for the figures that need one.

    show_counts(Console(), df)

The table holds the (suite, provider) pairs that made a check. A provider skipped everywhere (a
GPU-only library on CPU) is one `skipped:` line instead of rows of zeros and `nan`; one that
skipped part of its grid keeps its rows and gets the same line (ligerbench/skipped.py). The skip
counts per suite, the rule column and every skip reason stay in summary.md; here the strict
providers are named on one line. Two figures are ratios a newcomer cannot read unexplained, so a
legend follows the table: worst/limit (a check fails above 1) and x careful (how far from a
careful implementation: the textbook formulas read hundreds where they cancel and still pass the
default rule, which allows what PyTorch users run).
"""

from __future__ import annotations

import math

import pandas as pd
from rich.console import Console

from ligerbench import skipped, tables
from ligerbench.verify import summary

WORST, CAREFUL = "worst/\nlimit", "x\ncareful"  # two-line names: the grid fits 80 columns
COLUMNS = ["suite", "provider", "pass", "fail", "error", WORST, CAREFUL]
LEGEND_WORST = "worst/limit: the worst error over its limit; a check fails above 1."
LEGEND_CAREFUL = (
    "x careful: the worst error over a careful implementation's; a formula that",
    "  cancels (textbook) reads hundreds and passes the default rule, not --strict.",
)


def rows(df: pd.DataFrame) -> list[list]:
    """The table's rows: (suite, provider) pairs that compared or errored, the suite named on its
    first row only; a ratio with nothing to compare reads `-`."""
    counts = summary.counts(df)
    counts = counts[(counts["pass"] + counts["fail"] + counts["error"]) > 0]
    out, last = [], None
    for r in counts.to_dict("records"):
        out.append([r["suite"] if r["suite"] != last else "", r["provider"], r["pass"], r["fail"], r["error"],
                    _ratio(r["worst_error_over_limit"]), _ratio(r["x_careful"])])  # fmt: skip
        last = r["suite"]
    return out


def _ratio(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3g}"


def strict_providers(df: pd.DataFrame) -> list[str]:
    """Providers judged by the careful yardstick alone (ours always; any with --strict)."""
    if df.empty or "rule" not in df.columns:
        return []
    judged = df[df["verdict"].isin(["pass", "fail"]) & (df["rule"].astype(str) == "strict")]
    return list(dict.fromkeys(judged["provider"]))


def show_counts(out: Console, df: pd.DataFrame) -> None:
    """The table, the skipped providers, the strict ones and the legend."""
    body = rows(df)
    if body:
        tables.show(out, "verify: per suite and provider", COLUMNS, body, right=COLUMNS[2:])
    for line in skipped.lines(df):
        out.print(skipped.wrapped(line, out.width), soft_wrap=True, markup=False)
    strict = strict_providers(df)
    if strict:
        out.print(f"strict rule (the careful yardstick alone): {', '.join(strict)}", markup=False)
    if body:
        out.print(LEGEND_WORST, markup=False)
    if any(r[-1] != "-" for r in body):
        for line in LEGEND_CAREFUL:
            out.print(line, markup=False)

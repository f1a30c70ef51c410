"""Skipped providers, said once each on the terminal: the reason and the share of the grid.

    lines = skipped.lines(df)            # ["skipped: liger (needs a CUDA device): 155 of 155 cases"]
    shown = df[~df["provider"].isin(skipped.everywhere(df))]   # the tables hold what ran

A provider that cannot run here (a GPU-only library on CPU, a package not installed) writes a skip
row for every check of every case: as table rows they read zero passed and `nan`, and the reason
(the rows' message) showed nowhere. Here each such provider is one line instead; a provider that
ran some cases and skipped others keeps its rows in the tables and gets the same one line for its
skipped share. The records are untouched (summary.md keeps every skip, per reason): this is the
terminal's view of them, shared by verify, bench and converge.
"""

from __future__ import annotations

import textwrap

import pandas as pd

MORE_IN = "summary.md"  # where the other reasons of a provider are, per reason and count


def everywhere(df: pd.DataFrame) -> set[str]:
    """Providers with rows whose every row is a skip: they ran nothing."""
    if df.empty:
        return set()
    ran = df.loc[df["verdict"].astype(str) != "skip", "provider"]
    return set(df["provider"]) - set(ran)


def lines(df: pd.DataFrame, unit: str = "cases", by: str = "case") -> list[str]:
    """One line per provider with skipped rows, in the rows' order: its most common reason and
    how much of its grid (its `by` values, named `unit`) was skipped whole; checks skipped inside
    units that ran are counted beside them."""
    if df.empty:
        return []
    out = []
    for provider, rows in df.groupby("provider", sort=False):
        skip = rows["verdict"].astype(str) == "skip"
        if not skip.any():
            continue
        units = rows[by].nunique()
        ran = set(rows.loc[~skip, by])
        whole = rows.loc[skip & ~rows[by].isin(ran), by].nunique()
        partial = int((skip & rows[by].isin(ran)).sum())
        share = [f"{whole} of {units} {unit}"] if whole else []
        if partial:
            share.append(f"{partial} checks in {rows.loc[skip & rows[by].isin(ran), by].nunique()} {unit} that ran")
        out.append(f"skipped: {provider} ({_reason(rows.loc[skip, 'message'])}): {', '.join(share)}")
    return out


def _reason(messages: pd.Series) -> str:
    """The most common reason; how many others there are (they are in summary.md)."""
    counts = messages.fillna("").astype(str).str.strip().replace("", "no reason given").value_counts()
    first = counts.index[0].rstrip(".")
    others = len(counts) - 1
    return first + (f"; {others} other reason{'s' if others != 1 else ''} in {MORE_IN}" if others else "")


def wrapped(line: str, width: int) -> str:
    """A line wrapped at words within `width`, its continuation indented: a long reason reads
    whole on a narrow terminal, no trailing blanks."""
    return textwrap.fill(line, width, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False)

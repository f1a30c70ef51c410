"""Views of a verify run's records: counts, the failing rows, and a markdown summary."""

from __future__ import annotations

import pandas as pd

from ligerbench.records import VERDICTS


def counts(df: pd.DataFrame) -> pd.DataFrame:
    """Rows per (suite, provider) and verdict, with the worst error/limit among compared rows."""
    if df.empty:
        return pd.DataFrame(columns=["suite", "provider", *VERDICTS, "worst_error_over_limit"])
    table = df.pivot_table(index=["suite", "provider"], columns="verdict", values="case", aggfunc="count", fill_value=0)
    for v in VERDICTS:
        if v not in table.columns:
            table[v] = 0
    table = table[list(VERDICTS)]
    compared = df[df["verdict"].isin(["pass", "fail"]) & (df["metric"] == "rel_l2")]
    if not compared.empty:
        ratio = (compared["value"] / compared["limit"]).groupby([compared["suite"], compared["provider"]]).max()
        table["worst_error_over_limit"] = ratio
    else:
        table["worst_error_over_limit"] = float("nan")
    return table.reset_index()


def problems(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["verdict"].isin(["fail", "error"])]


def exit_code(df: pd.DataFrame) -> int:
    """0 when nothing failed or errored, 1 otherwise (skips are reported, not failures)."""
    return 1 if len(problems(df)) else 0


def _fmt(x) -> str:
    if isinstance(x, float):
        return f"{x:.3g}"
    return str(x)


def markdown_table(df: pd.DataFrame, columns: list[str]) -> str:
    if df.empty:
        return "_(none)_\n"
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for _, row in df[columns].iterrows():
        lines.append("| " + " | ".join(_fmt(row[c]).replace("|", "\\|") for c in columns) + " |")
    return "\n".join(lines) + "\n"


CASE_COLUMNS = ["suite", "provider", "case", "quantity", "value", "limit", "verdict", "message"]


def summary_markdown(df: pd.DataFrame, env: dict, *, title: str, interrupted: bool = False) -> str:
    status = (
        "INTERRUPTED (rows below are those completed)" if interrupted else ("FAILED" if exit_code(df) else "PASSED")
    )
    parts = [
        f"# {title}\n",
        f"**Status: {status}.** {len(df)} records; device {env.get('device_name')} "
        f"({env.get('device_type')}, Triton {env.get('triton_mode')}), seed {env.get('seed')}, "
        f"torch {env.get('torch')}, triton {env.get('triton')}, commit {env.get('git_commit')}.\n",
        "Error is the relative L2 error against the float64 reference; the limit is the tolerance "
        "rule of ligerbench/tolerance.py (2 x PyTorch eager's error in the same dtype + a floor of "
        "unavoidable roundings).\n",
        "## Counts\n",
        markdown_table(counts(df), ["suite", "provider", *VERDICTS, "worst_error_over_limit"]),
        "## Failures and errors\n",
        markdown_table(problems(df), CASE_COLUMNS),
        "## Skipped providers\n",
        markdown_table(df[df["verdict"] == "skip"].drop_duplicates(["provider", "message"]), ["provider", "message"]),
        "## Every case\n",
        markdown_table(df, CASE_COLUMNS),
    ]
    return "\n".join(parts)

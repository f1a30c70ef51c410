"""Views of a verify run's records: counts, the failing rows, and a markdown summary."""

from __future__ import annotations

import pandas as pd

from ligerbench import runs
from ligerbench.exits import ExitCode
from ligerbench.records import VERDICTS, times
from ligerbench.verify import diagnose

COUNT_COLUMNS = ["suite", "provider", *VERDICTS, "worst_error_over_limit", "x_careful", "rule"]


def counts(df: pd.DataFrame) -> pd.DataFrame:
    """Rows per (suite, provider) and verdict, with the worst error/limit among compared rows,
    the worst error as a multiple of the careful yardstick's ("x careful": how far from a careful
    implementation, whichever verdict judged it) and the verdict's rule (default or strict)."""
    if df.empty:
        return pd.DataFrame(columns=COUNT_COLUMNS)
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
    table["x_careful"] = float("nan")
    table["rule"] = ""
    if not compared.empty and "careful" in compared.columns:
        by = [compared["suite"], compared["provider"]]
        table["x_careful"] = compared.apply(lambda r: times(r["value"], r["careful"]), axis=1).groupby(by).max()
        table["rule"] = compared["rule"].astype(str).groupby(by).agg(lambda r: "/".join(sorted(set(r) - {""})))
        table["rule"] = table["rule"].fillna("")
    return table.reset_index()


def problems(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["verdict"].isin(["fail", "error"])]


def exit_code(df: pd.DataFrame, env: dict | None = None) -> ExitCode:
    """OK when nothing failed or errored and (given env.json) the run's manifest says it finished
    what it planned and wrote rows; FAILED otherwise (skips are reported, not failures)."""
    if len(problems(df)):
        return ExitCode.FAILED
    return ExitCode.FAILED if env is not None and runs.problems(env, df) else ExitCode.OK


def status(df: pd.DataFrame, env: dict) -> str:
    """The run's status line: INTERRUPTED / INCOMPLETE / FAILED / PASSED, from the rows and the manifest."""
    m = env.get("run") or {}
    why = runs.problems(env, df)
    if m.get("interrupted"):
        done = f"{m.get('completed')} of {m.get('planned')} {m.get('unit')}"
        return f"INTERRUPTED after {done} (rows below are those completed)"
    if len(problems(df)):
        return f"FAILED: {len(problems(df))} failing or erroring checks" + (f"; {why[0]}" if why else "")
    if why:
        return "NOT PASSED: " + "; ".join(why)
    return "PASSED"


def skip_reasons(df: pd.DataFrame) -> pd.DataFrame:
    """Skipped rows as counts: one line per (provider, reason), however many cases."""
    skipped = df[df["verdict"] == "skip"]
    if skipped.empty:
        return pd.DataFrame(columns=["provider", "skipped checks", "cases", "reason"])
    grouped = skipped.groupby(["provider", "message"], sort=False)
    out = grouped.agg(checks=("case", "size"), cases=("case", "nunique")).reset_index()
    return out.rename(columns={"checks": "skipped checks", "message": "reason"})[
        ["provider", "skipped checks", "cases", "reason"]
    ]


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


SUSPECT_COLUMNS = ["suite", "case", "quantity", "providers", "errors"]
FIGURE_COLUMNS = ["provider", "between", "cases", "largest ulp", "tokens off [0.999, 1.001]", "tokens off [0.9, 1.1]"]
_BETWEEN = {"batch_invariance": "batches of the same rows", "rank_count": "vocabulary over fewer ranks"}


def same_row_figures(df: pd.DataFrame) -> pd.DataFrame:
    """The same-row figures an RL user reads, a row per provider and comparison (batches of the
    same rows; the vocabulary over fewer ranks): the largest ulp distance of any output or gradient
    and, where the kernel names its log-prob (ligerbench/rowwise.py, Rows.log_prob), the largest
    fraction of a case's tokens whose probability ratio exp(logp_a - logp_b) leaves each band."""
    rows = df[df["suite"].isin(list(_BETWEEN)) & df["verdict"].isin(["pass", "fail", "info"])]
    if rows.empty:
        return pd.DataFrame(columns=FIGURE_COLUMNS)
    out = []
    for (suite, provider), group in rows.groupby(["suite", "provider"], sort=False):
        ulps = group[group["metric"] == "ulp_max"]["value"]
        ratio = group[group["metric"] == "ratio_off"]

        def band(name, _ratio=ratio):
            values = _ratio[_ratio["quantity"].str.endswith(name)]["value"]
            return f"{100 * values.max():.3g}%" if len(values) else "-"

        out.append({"provider": provider, "between": _BETWEEN[suite], "cases": group["case"].nunique(),
                    "largest ulp": float(ulps.max()) if len(ulps) else float("nan"),
                    "tokens off [0.999, 1.001]": band("ratio_off_0.1pct"),
                    "tokens off [0.9, 1.1]": band("ratio_off_10pct")})  # fmt: skip
    return pd.DataFrame(out, columns=FIGURE_COLUMNS)


def summary_markdown(df: pd.DataFrame, env: dict, *, title: str, families: dict[str, str] | None = None) -> str:
    m = env.get("run") or {}
    suspect = diagnose.suspects(df, families or {})
    parts = [
        f"# {title}\n",
        f"**Status: {status(df, env)}.** {m.get('completed')} of {m.get('planned')} {m.get('unit')} run, "
        f"{len(df)} records; device {env.get('device_name')} "
        f"({env.get('device_type')}, Triton {env.get('triton_mode')}), seed {env.get('seed')}, "
        f"torch {env.get('torch')}, triton {env.get('triton')}, commit {env.get('git_commit')}.\n",
        "Error is the relative L2 error against the float64 reference; the limit is the tolerance "
        "rule of ligerbench/tolerance.py: 2 x the yardstick's error in the same dtype + a floor of "
        "unavoidable roundings, the yardstick being the larger of the careful and the textbook "
        "(PyTorch as users write it) under the default rule, the careful one alone under strict "
        "(our own kernels, or --strict). x careful: the worst error over the careful yardstick's.\n",
        "## Counts\n",
        markdown_table(counts(df), COUNT_COLUMNS),
        "## Failures and errors\n",
        markdown_table(problems(df), CASE_COLUMNS),
        *(
            ["## Suspect checks (independent providers fail them alike)\n", markdown_table(suspect, SUSPECT_COLUMNS)]
            if len(suspect)
            else []
        ),
        *(
            [
                "## Same row: distances and the RL ratio (info unless the kernel promises them)\n",
                "The largest ulp distance of any output or gradient between the case and the same rows in another "
                "batch, or with the vocabulary over fewer ranks; and the largest fraction of a case's counted tokens "
                "whose probability ratio exp(logp_a - logp_b) between the two leaves each band (docs/checks.md).\n",
                markdown_table(figures, FIGURE_COLUMNS),
            ]
            if len(figures := same_row_figures(df))
            else []
        ),
        "## Skipped (counts per provider and reason)\n",
        markdown_table(skip_reasons(df), ["provider", "skipped checks", "cases", "reason"]),
        "## Every compared check\n",
        markdown_table(df[df["verdict"] != "skip"], CASE_COLUMNS),
    ]
    return "\n".join(parts)

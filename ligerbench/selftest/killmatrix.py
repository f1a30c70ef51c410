"""The kill matrix: for each planted bug (mutant) and suite, did the suite catch it? A view of
selftest's records, like every other table.

A cell is
  killed    some check of the suite fails on the mutant where the control passes the same check
            (same suite, case and quantity; same inputs, since inputs depend only on seed and case).
            A check that errors counts too (converge's logits_to_keep check raises on a wrong
            shape): the control passing the same check is what makes either a kill. The
            evidence table shows the verdict, so a kill by error alone can be read as such;
  survived  the suite ran the mutant and no check killed it;
  n/a       the suite is not meant for it (another kernel) or made no comparison (no targeted
            case in the suite, or every row skipped).
A mutant that no suite kills fails selftest. Mutants are judged by the strict verdict, as our
kernels are; the column `default_verdict` says whether one of its killing checks also fails the
default verdict (ligerbench/tolerance.py), read back from the rows' yardstick figures: `killed`,
or `survived` for a bug only the strict verdict catches (a formula that cancels in float32).
"""

from __future__ import annotations

import pandas as pd

from ligerbench.selftest.model import Mutant
from ligerbench.tolerance import FACTOR
from ligerbench.verify.summary import markdown_table

KILLED, SURVIVED, NOT_APPLICABLE = "killed", "survived", "n/a"


def _control_passes(control: pd.DataFrame, row) -> bool:
    """The control passed this check. A check that raised is recorded under its group's name
    (converge: `logits_to_keep[train,k=1]` for the rows `logits_to_keep[train,k=1].loss`, ...),
    so a row also stands for the rows under it: all of them must pass, and there must be some."""
    same = control[(control["suite"] == row["suite"]) & (control["case"] == row["case"])]
    q = same["quantity"].astype(str)
    mine = same[(q == row["quantity"]) | q.str.startswith(f"{row['quantity']}.")]
    return len(mine) > 0 and bool((mine["verdict"] == "pass").all())


def _of_kernel(df: pd.DataFrame, mutant: Mutant) -> pd.DataFrame:
    # provider names are per kernel: a mutant's rows and its control's are those of its kernel
    return df[df["kernel"] == mutant.kernel] if mutant.kernel else df


def kills(df: pd.DataFrame, mutant: Mutant) -> pd.DataFrame:
    """The mutant's failing (or erroring) checks that its control passes: the evidence of kills."""
    df = _of_kernel(df, mutant)
    mine = df[(df["provider"] == mutant.name) & df["verdict"].isin(["fail", "error"])]
    control = df[df["provider"] == mutant.control]
    keep = [_control_passes(control, row) for _, row in mine.iterrows()]
    return mine[keep] if len(mine) else mine


def cell(df: pd.DataFrame, mutant: Mutant, suite: str, killing: pd.DataFrame) -> str:
    if suite not in mutant.suites:
        return NOT_APPLICABLE
    if (killing["suite"] == suite).any():
        return KILLED
    df = _of_kernel(df, mutant)
    rows = df[(df["provider"] == mutant.name) & (df["suite"] == suite)]
    if rows["verdict"].isin(["pass", "fail", "error"]).any():
        return SURVIVED
    return NOT_APPLICABLE


DEFAULT_VERDICT = "default_verdict"


def _fails_default(row) -> bool:
    """A killing row fails the default verdict too: an error, a check no yardstick sets (layouts,
    writes, converge's), or an error above the default limit (the strict limit moved from the
    careful yardstick's error to the larger of the two)."""
    if row["verdict"] == "error" or row.get("rule", "") != "strict":
        return True
    careful, textbook = row.get("careful", float("nan")), row.get("textbook", float("nan"))
    if careful != careful or textbook != textbook or textbook in (float("inf"), float("-inf")):
        return True  # no textbook figure: both verdicts use the careful yardstick
    return not row["value"] <= row["limit"] + FACTOR * max(0.0, textbook - careful)


def matrix(df: pd.DataFrame, mutants: list[Mutant]) -> pd.DataFrame:
    """One row per mutant: its description, a column per suite, and `verdict` (killed/SURVIVED)."""
    suites = list(dict.fromkeys(s for m in mutants for s in m.suites))
    rows = []
    for m in mutants:
        killing = kills(df, m)
        cells = {s: cell(df, m, s, killing) for s in suites}
        killed = any(v == KILLED for v in cells.values())
        verdict = "killed" if killed else "SURVIVED"
        by_default = KILLED if any(_fails_default(r) for _, r in killing.iterrows()) else SURVIVED
        about = {"about": m.description, "needs": m.needs}
        rows.append({"mutant": m.name, "kernel": m.kernel, **cells, "verdict": verdict,
                     DEFAULT_VERDICT: by_default if killed else NOT_APPLICABLE, **about})  # fmt: skip
    # needs: the case-axis values the mutant runs on (its targets), the evidence table the case that killed it
    return pd.DataFrame(rows, columns=["mutant", "kernel", *suites, "verdict", DEFAULT_VERDICT, "about", "needs"])


def survivors(table: pd.DataFrame) -> list[str]:
    return table.loc[table["verdict"] != "killed", "mutant"].tolist()


def control_problems(df: pd.DataFrame, mutants: list[Mutant]) -> pd.DataFrame:
    """Checks the control itself fails or errors on: no kill is counted there, and they say the
    kernel or the check is broken on those cases (verify reports them too)."""
    bad = [_of_kernel(df, m).query("provider == @m.control and verdict in ['fail', 'error']") for m in mutants]
    bad = [b for b in bad if len(b)]
    return pd.concat(bad).drop_duplicates() if bad else df.iloc[0:0]


def evidence(df: pd.DataFrame, mutants: list[Mutant]) -> pd.DataFrame:
    """The first killing check per (mutant, suite): what a reader checks to believe a kill."""
    frames = [kills(df, m).drop_duplicates("suite") for m in mutants]
    frames = [f for f in frames if len(f)]
    cols = ["provider", "suite", "case", "quantity", "verdict", "value", "limit", "message"]
    return pd.concat(frames)[cols] if frames else pd.DataFrame(columns=cols)


def markdown(df: pd.DataFrame, mutants: list[Mutant], env: dict, *, title: str) -> str:
    table = matrix(df, mutants)
    left = survivors(table)
    status = f"FAILED: {len(left)} mutant(s) survived every suite: {', '.join(left)}" if left else "PASSED"
    bad_control = control_problems(df, mutants)
    parts = [
        f"# {title}\n",
        f"**Status: {status}.** {len(mutants)} mutants; preset {env.get('preset')}, device "
        f"{env.get('device_name')} ({env.get('device_type')}, Triton {env.get('triton_mode')}), seed "
        f"{env.get('seed')}, commit {env.get('git_commit')}.\n",
        "A cell is `killed` when a check of that suite fails on the mutant where the control (the "
        "correct provider, same inputs) passes it (an error counts, see the evidence's verdict); "
        "`survived`: ran, never killed; `n/a`: the suite is not meant for it or compared nothing.\n",
        "## Kill matrix\n",
        markdown_table(table, list(table.columns)),
        "## First killing check per mutant and suite\n",
        markdown_table(evidence(df, mutants), ["provider", "suite", "case", "quantity", "verdict", "value", "limit"]),
    ]
    if len(bad_control):
        parts += [
            "## Checks the control fails (no kill counted there)\n",
            markdown_table(bad_control, ["provider", "suite", "case", "quantity", "verdict", "message"]),
        ]
    return "\n".join(parts)

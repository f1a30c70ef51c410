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


class Rows:
    """The records split once by (kernel, provider), and each control's checks by (suite, case):
    a kill matrix asks for a mutant's rows and its control's verdicts once per failing check
    (thousands of rows; filtering the whole frame each time was most of a small selftest's
    write-up, and 20 s of one over every mutant)."""

    def __init__(self, df: pd.DataFrame):
        self.df = df
        self._groups: dict = {}  # the columns grouped by -> {their values: rows}
        self._checks: dict = {}
        self._kills: dict = {}

    def of(self, kernel: str, provider: str) -> pd.DataFrame:
        """The rows of `provider` (of `kernel`, when one is named: provider names are per kernel)."""
        by, key = (("kernel", "provider"), (kernel, provider)) if kernel else (("provider",), provider)
        if by not in self._groups:
            grouped = self.df.groupby(list(by) if len(by) > 1 else by[0], sort=False) if len(self.df) else ()
            self._groups[by] = dict(tuple(grouped))
        found = self._groups[by].get(key)
        return found if found is not None else self.df.iloc[0:0]

    def control_passes(self, kernel: str, control: str, row) -> bool:
        """The control passed this check. A check that raised is recorded under its group's name
        (converge: `logits_to_keep[train,k=1]` for the rows `logits_to_keep[train,k=1].loss`, ...),
        so a row also stands for the rows under it: all of them must pass, and there must be some."""
        key = (kernel, control)
        if key not in self._checks:
            checks: dict = {}
            rows = self.of(kernel, control)
            for suite, case, q, v in zip(rows["suite"], rows["case"], rows["quantity"].astype(str), rows["verdict"],
                                         strict=True):  # fmt: skip
                checks.setdefault((suite, case), []).append((q, v))
            self._checks[key] = checks
        suite, case, quantity = row["suite"], row["case"], row["quantity"]
        if suite != suite or case != case:  # NaN equals nothing (as in a frame's comparison)
            return False
        prefix = f"{quantity}."
        mine = [v for q, v in self._checks[key].get((suite, case), ()) if q == quantity or q.startswith(prefix)]
        return len(mine) > 0 and all(v == "pass" for v in mine)

    def kills(self, mutant: Mutant) -> pd.DataFrame:
        if mutant.name not in self._kills:
            rows = self.of(mutant.kernel, mutant.name)
            mine = rows[rows["verdict"].isin(["fail", "error"])]
            keep = [self.control_passes(mutant.kernel, mutant.control, row) for _, row in mine.iterrows()]
            self._kills[mutant.name] = mine[keep] if len(mine) else mine
        return self._kills[mutant.name]


def kills(df: pd.DataFrame, mutant: Mutant) -> pd.DataFrame:
    """The mutant's failing (or erroring) checks that its control passes: the evidence of kills."""
    return Rows(df).kills(mutant)


def _cell(rows: Rows, mutant: Mutant, suite: str, killing: pd.DataFrame) -> str:
    if suite not in mutant.suites:
        return NOT_APPLICABLE
    if (killing["suite"] == suite).any():
        return KILLED
    mine = rows.of(mutant.kernel, mutant.name)
    if mine.loc[mine["suite"] == suite, "verdict"].isin(["pass", "fail", "error"]).any():
        return SURVIVED
    return NOT_APPLICABLE


def cell(df: pd.DataFrame, mutant: Mutant, suite: str, killing: pd.DataFrame) -> str:
    return _cell(Rows(df), mutant, suite, killing)


DEFAULT_VERDICT = "default_verdict"


def fails_default(row) -> bool:
    """A killing row fails the default verdict too: an error, a check no yardstick sets (layouts,
    writes, converge's), or an error above the default limit (the strict limit moved from the
    careful yardstick's error to the larger of the two)."""
    if row["verdict"] == "error" or row.get("rule", "") != "strict":
        return True
    careful, textbook = row.get("careful", float("nan")), row.get("textbook", float("nan"))
    if careful != careful or textbook != textbook or textbook in (float("inf"), float("-inf")):
        return True  # no textbook figure: both verdicts use the careful yardstick
    return not row["value"] <= row["limit"] + FACTOR * max(0.0, textbook - careful)


def matrix(df: pd.DataFrame | Rows, mutants: list[Mutant]) -> pd.DataFrame:
    """One row per mutant: its description, a column per suite, and `verdict` (killed/SURVIVED)."""
    rows_of = df if isinstance(df, Rows) else Rows(df)
    suites = list(dict.fromkeys(s for m in mutants for s in m.suites))
    rows = []
    for m in mutants:
        killing = rows_of.kills(m)
        cells = {s: _cell(rows_of, m, s, killing) for s in suites}
        killed = any(v == KILLED for v in cells.values())
        verdict = "killed" if killed else "SURVIVED"
        by_default = KILLED if any(fails_default(r) for _, r in killing.iterrows()) else SURVIVED
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
    rows = Rows(df)
    controls = dict.fromkeys((m.kernel, m.control) for m in mutants)  # each once, in the mutants' order
    bad = [rows.of(kernel, control) for kernel, control in controls]
    bad = [b[b["verdict"].isin(["fail", "error"])] for b in bad]
    bad = [b for b in bad if len(b)]
    return pd.concat(bad).drop_duplicates() if bad else df.iloc[0:0]


def evidence(df: pd.DataFrame | Rows, mutants: list[Mutant]) -> pd.DataFrame:
    """The first killing check per (mutant, suite): what a reader checks to believe a kill."""
    rows = df if isinstance(df, Rows) else Rows(df)
    frames = [rows.kills(m).drop_duplicates("suite") for m in mutants]
    frames = [f for f in frames if len(f)]
    cols = ["provider", "suite", "case", "quantity", "verdict", "value", "limit", "message"]
    return pd.concat(frames)[cols] if frames else pd.DataFrame(columns=cols)


def markdown(df: pd.DataFrame, mutants: list[Mutant], env: dict, *, title: str) -> str:
    rows = Rows(df)
    table = matrix(rows, mutants)
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
        markdown_table(evidence(rows, mutants), ["provider", "suite", "case", "quantity", "verdict", "value", "limit"]),
    ]
    if len(bad_control):
        parts += [
            "## Checks the control fails (no kill counted there)\n",
            markdown_table(bad_control, ["provider", "suite", "case", "quantity", "verdict", "message"]),
        ]
    return "\n".join(parts)

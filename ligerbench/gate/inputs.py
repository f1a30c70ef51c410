"""The gate's inputs: loading a run folder, refusing a damaged or unlike pair (exit 2), the
checks of the baseline a run must compare (all, or a declared subset's), and a selftest run's
kill matrix against its baseline's. The rules that judge them are in ligerbench/gate/rules.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ligerbench import kexpr, runs
from ligerbench.records import load_records, records_file

MEASURED = "measured"  # bench's verdict for a real measurement; smoke rows say not_a_measurement
CHECK = ["suite", "provider", "case", "quantity"]  # one check, in any run kind
COMPARED = ("pass", "fail", "error", MEASURED)  # verdicts that say something was compared
# problems of a manifest that make the input unusable rather than a failed run
_DAMAGED = ("no run manifest", "no records", "truncated or edited")


class Unusable(Exception):
    """The inputs cannot be gated (exit 2); the message says why."""


@dataclass(frozen=True)
class Run:
    path: Path
    records: pd.DataFrame
    env: dict


def load(path: Path) -> Run:
    path = Path(path)
    if not path.is_dir():
        raise Unusable(f"{path} is not a folder (expected a run folder with records.csv and env.json)")
    for file in (records_file(path), path / "env.json"):
        if not file.is_file():
            raise Unusable(f"{path} has no {file.name}: not a ligerbench run folder")
    try:
        records = load_records(records_file(path))
        env = json.loads((path / "env.json").read_text())
    except (ValueError, KeyError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise Unusable(f"{path}: cannot read its records or env.json ({exc})") from exc
    if not isinstance(env, dict):
        raise Unusable(f"{path}: env.json is not an object")
    return Run(path, records, env)


def kind_of(run: Run) -> str:
    return str((run.env.get("run") or {}).get("kind") or run.env.get("command") or "")


def kernel_of(run: Run) -> str:
    return str((run.env.get("run") or {}).get("kernel") or run.env.get("kernel") or "")


def check_inputs(run: Run, baseline: Run) -> list[str]:
    """Unusable on a damaged or unlike pair; returns why the run cannot pass (its manifest)."""
    for who, r in (("baseline", baseline), ("run", run)):
        damaged = [p for p in runs.problems(r.env, r.records) if any(d in p for d in _DAMAGED)]
        if damaged:
            raise Unusable(f"{who} {r.path}: {'; '.join(damaged)}")
    base_problems = runs.problems(baseline.env, baseline.records)
    if base_problems:
        raise Unusable(f"baseline {baseline.path} is not a complete run: {'; '.join(base_problems)}")
    if kind_of(run) != kind_of(baseline):
        raise Unusable(
            f"{run.path} is a {kind_of(run) or '?'} run and {baseline.path} a {kind_of(baseline) or '?'} run: "
            "the gate compares like with like"
        )
    if kernel_of(run) != kernel_of(baseline):
        raise Unusable(
            f"{run.path} is of kernel {kernel_of(run)!r} and {baseline.path} of {kernel_of(baseline)!r}: "
            "the gate compares like with like"
        )
    return runs.problems(run.env, run.records)


def parse_subset(items: list[str] | None) -> dict[str, list[str]]:
    """--subset FIELD=VALUE (repeatable; values of one field are alternatives, fields all apply)
    or k=EXPR (a -k expression over case ids). FIELD is a records column: a fixed one (provider,
    suite, ...) or any axis of the kernel (reduction, layout, ...; checked against the baseline's
    columns when it is read), or mutant (a selftest run: the mutants it ran)."""
    out: dict[str, list[str]] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise ValueError(f"--subset {item!r}: expected FIELD=VALUE, e.g. reduction=none, or k=EXPR")
        if name == "k":
            kexpr.compile_expr(value)  # a malformed expression is a usage error now, not later
        out.setdefault(name, []).append(value)
    return out


def in_subset(records: pd.DataFrame, subset: dict[str, list[str]]) -> pd.Series:
    keep = pd.Series(True, index=records.index)
    for name, values in subset.items():
        if name == "mutant":
            continue  # a selftest subset: applied to the kill matrix
        if name == "k":
            for expr in values:
                match = kexpr.compile_expr(expr)
                keep &= records["case"].map(match).astype(bool)
        elif name not in records.columns:
            columns = ", ".join(c for c in records.columns if c not in ("run_id", "value", "limit", "message"))
            raise Unusable(
                f"--subset {name}=...: the records have no column {name!r}; choose from k, mutant, {columns}"
            )
        else:
            keep &= records[name].astype(str).isin(values)
    return keep


def missing_checks(run: Run, baseline: Run, subset: dict[str, list[str]]) -> tuple[pd.DataFrame, int, int]:
    """(checks of the baseline not compared in the run, how many were compared, how many expected)."""
    base = baseline.records
    base = base[base["verdict"].isin(COMPARED) & in_subset(base, subset)]
    expected = base[CHECK].drop_duplicates()
    mine = run.records[run.records["verdict"].isin(COMPARED)][CHECK].drop_duplicates()
    both = expected.merge(mine, how="left", indicator=True)
    gone = both[both["_merge"] == "left_only"][CHECK]
    return gone, len(expected) - len(gone), len(expected)


def _kill_matrix(r: Run) -> pd.DataFrame:
    path = r.path / "kill_matrix.csv"
    if not path.is_file():
        raise Unusable(f"{r.path} is a selftest run without kill_matrix.csv: nothing to gate it on")
    try:
        table = pd.read_csv(path, keep_default_na=False)
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise Unusable(f"{path}: cannot read it ({exc})") from exc
    if not {"mutant", "verdict"} <= set(table.columns):
        raise Unusable(f"{path} lacks the columns mutant and verdict")
    return table


def kill_matrix_problems(run: Run, baseline: Run, subset: dict[str, list[str]]) -> tuple[list[str], int, int, list]:
    """A selftest run against its baseline: (survivors and lost kills, compared, expected, missing mutants)."""
    mine, theirs = _kill_matrix(run), _kill_matrix(baseline)
    if "mutant" in subset:
        theirs = theirs[theirs["mutant"].isin(subset["mutant"])]
    problems = [f"mutant {m} survived every suite" for m in mine.loc[mine["verdict"] != "killed", "mutant"]]
    by_name = mine.set_index("mutant")
    suites = [c for c in theirs.columns if c not in ("mutant", "kernel", "verdict", "about")]
    missing = []
    for _, row in theirs.iterrows():
        if row["mutant"] not in by_name.index:
            missing.append(row["mutant"])
            continue
        for s in suites:
            now = by_name.loc[row["mutant"]].get(s, "absent")
            if row[s] == "killed" and now != "killed":
                problems.append(f"mutant {row['mutant']}: the {s} suite killed it in the baseline, now {now}")
    return problems, len(theirs) - len(missing), len(theirs), missing

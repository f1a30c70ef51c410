"""Records: one row per (suite, kernel, provider, case, quantity). Tables, the summary, the
gate and plots are all views of these rows.

Rows are appended to `records.csv` and flushed as they are produced, so a run that is killed
keeps every row it completed.
"""

from __future__ import annotations

import csv
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ligerbench.cases import Case

VERDICTS = ("pass", "fail", "error", "skip")
# metric prefix of bench's design-target rows (bench_metrics.target_records): "target_time_ms", ...
TARGET_PREFIX = "target_"


@dataclass(frozen=True)
class Record:
    run_id: str
    suite: str
    kernel: str
    provider: str
    case: str
    quantity: str
    metric: str  # "rel_l2" error vs float64, "mutated" (0/1), ...
    value: float
    unit: str
    limit: float
    verdict: str  # one of VERDICTS
    message: str = ""
    # case parameters, flattened so the CSV filters without parsing case ids
    n: int = 0
    v: int = 0
    h: int = 0
    dtype: str = ""
    reduction: str = ""
    upstream: str = ""
    ignore_pattern: str = ""
    option: str = ""
    logits: str = ""

    @classmethod
    def for_case(cls, case: Case, **fields) -> Record:
        params = {k: val for k, val in case.params().items() if k in FIELDS and k != "kernel"}
        return cls(case=case.id, kernel=case.kernel, **params, **fields)


FIELDS = [f.name for f in dataclasses.fields(Record)]


class RecordWriter:
    """Appends records to a CSV file, flushing each row."""

    def __init__(self, path: Path):
        self.path = path
        self.rows: list[Record] = []
        self._file = open(path, "w", newline="")
        self._csv = csv.DictWriter(self._file, fieldnames=FIELDS)
        self._csv.writeheader()
        self._file.flush()

    def write(self, record: Record) -> None:
        self.rows.append(record)
        self._csv.writerow(dataclasses.asdict(record))
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def frame(self) -> pd.DataFrame:
        return to_frame(self.rows)


def to_frame(rows: list[Record]) -> pd.DataFrame:
    return pd.DataFrame([dataclasses.asdict(r) for r in rows], columns=FIELDS)


def read_records(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, keep_default_na=False, na_values=[""])


TEXT_COLUMNS = ("suite", "kernel", "provider", "case", "quantity", "metric", "verdict", "message")


def load_records(path: Path) -> pd.DataFrame:
    """A run's records.csv as every reader (gate, report) wants it: the Record columns present
    (KeyError naming the missing ones otherwise), text columns as text, value and limit as
    numbers (NaN is written as "nan", which read_records keeps as text)."""
    records = read_records(path)
    missing = [c for c in FIELDS if c not in records.columns]
    if missing:
        raise KeyError(f"{path} lacks the Record columns {missing}")
    for c in TEXT_COLUMNS:
        records[c] = records[c].astype(object).fillna("").astype(str)
    for c in ("value", "limit"):
        records[c] = pd.to_numeric(records[c], errors="coerce")
    return records


def from_frame(df: pd.DataFrame) -> list[Record]:
    """Records back from a frame of load_records: text as text (an empty cell as ""), counts as
    int, numbers as float."""
    kinds = {f.name: f.type for f in dataclasses.fields(Record)}  # "str", "int", "float"

    def cell(name: str, value):
        if kinds[name] == "str":
            return "" if isinstance(value, float) and math.isnan(value) else str(value)
        return int(value) if kinds[name] == "int" else float(value)

    return [Record(**{k: cell(k, row[k]) for k in FIELDS}) for row in df.to_dict("records")]


def ratio(value: float, limit: float) -> float:
    """error / limit, the headroom of a check (<= 1 passes)."""
    if limit == 0:
        return 0.0 if value == 0 else math.inf
    return value / limit

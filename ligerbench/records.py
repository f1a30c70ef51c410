"""Records: one row per (suite, kernel, provider, case, quantity). Tables, the summary, the
gate and plots are all views of these rows.

Rows are appended to `records.csv` and flushed as they are produced, so a run that is killed
keeps every row it completed.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ligerbench.cases import Case

# info: a property measured and reported, never failed (a peer's batch invariance, where it
# promises none: ligerbench/verify/invariance.py)
VERDICTS = ("pass", "fail", "error", "skip", "info")
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
    # the provider's settings as JSON text, e.g. {"chunk_mib": 64} ("" when it has none):
    # readers (bench/pareto.py) take a setting from here, never from the provider's name
    settings: str = ""
    # the yardsticks' own errors on a rel_l2 check (ligerbench/tolerance.py) and the verdict the
    # limit was set by ("default" or "strict"): either verdict can be read back from a row
    careful: float = math.nan
    textbook: float = math.nan
    rule: str = ""
    # the error of the provider's own promised reference (Provider.promise), where it declares one
    # and the verdict is default: a third yardstick for that provider alone
    promise: float = math.nan
    # the case's parameters, one column per axis of its kernel (KernelSpec.axes), so the CSV
    # filters without parsing case ids; not hashed (a dict)
    params: Mapping[str, Any] = field(default_factory=dict, hash=False)

    @classmethod
    def for_case(cls, case: Case, **fields) -> Record:
        return cls(case=case.id, kernel=case.kernel, params=dict(case.params), **fields)

    def row(self) -> dict[str, Any]:
        """The CSV row: the fixed columns, then the case's parameters."""
        return {**{name: getattr(self, name) for name in FIELDS}, **self.params}


# the fixed columns of every records.csv; each kernel's axes add theirs after them
FIELDS = [f.name for f in dataclasses.fields(Record) if f.name != "params"]
# columns newer than some committed runs: a reader fills them where they are absent ("" for
# text, NaN for numbers)
OPTIONAL = ("settings", "careful", "textbook", "rule", "promise")
NUMBERS = ("value", "limit", "careful", "textbook", "promise")


def settings_text(settings: Mapping[str, Any]) -> str:
    return json.dumps(dict(settings), sort_keys=True) if settings else ""


def settings_of(text: str) -> dict[str, Any]:
    """A records.csv `settings` cell back as a dict ({} for an empty cell)."""
    return json.loads(text) if isinstance(text, str) and text.strip() else {}


def columns_of(rows: Iterable[Record]) -> list[str]:
    """FIELDS, then every parameter any row has, in the order they first appear."""
    extra: dict[str, None] = {}
    for r in rows:
        extra.update(dict.fromkeys(k for k in r.params if k not in FIELDS))
    return FIELDS + list(extra)


class RecordWriter:
    """Appends records to a CSV file, flushing each row. The header holds FIELDS and the
    parameters seen so far; a row with a new parameter (a second kernel's axis in one run)
    rewrites the file once with the wider header (atomically: a killed run keeps its rows).
    With append=True the rows already in the file (another process's: a --nproc run's rank 0)
    are kept, and the new ones follow them."""

    def __init__(self, path: Path, *, append: bool = False):
        self.path = path
        self.rows: list[Record] = []
        self.columns = list(FIELDS)
        if append and path.exists() and path.stat().st_size > 0:
            with open(path, newline="") as f:
                self.columns = next(csv.reader(f))
            self.rows = from_frame(load_records(path))
            self._open(mode="a")
            return
        self._open(mode="w")

    def _open(self, mode: str) -> None:
        self._file = open(self.path, mode, newline="")
        self._csv = csv.DictWriter(self._file, fieldnames=self.columns, restval="")
        if mode == "w":
            self._csv.writeheader()
            self._file.flush()

    def write(self, record: Record) -> None:
        self.rows.append(record)
        if any(k not in self.columns for k in record.params):
            self._widen()
            return
        self._csv.writerow(record.row())
        self._file.flush()

    def _widen(self) -> None:
        self._file.close()
        self._rewrite()
        self._open(mode="a")

    def _rewrite(self) -> None:
        self.columns = columns_of(self.rows)
        if str(self.path) == os.devnull:
            # a --nproc run's other ranks write here: renaming a file onto it would, as root,
            # replace the device, and ranks racing for one .tmp name fail
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=self.columns, restval="")
            w.writeheader()
            w.writerows(r.row() for r in self.rows)
        os.replace(tmp, self.path)

    def close(self) -> None:
        """Close the file and make it hold exactly the rows written: a signal handled between a
        row's append and its write (SIGTERM's exception) would otherwise leave the file one row
        short of the manifest's count. Closing twice is a no-op: after the first close the file
        may be others' (the ranks of a --nproc run write it)."""
        if self._file.closed:
            return
        self._file.close()
        self._rewrite()

    def frame(self) -> pd.DataFrame:
        return to_frame(self.rows)


def append_record(path: Path, record: Record) -> None:
    """Append one row to a records.csv another process may have started (its header kept; a
    parameter it lacks is dropped: the row's case id still names it)."""
    fresh = not path.exists() or path.stat().st_size == 0
    if fresh:
        columns = columns_of([record])
    else:
        with open(path, newline="") as f:
            columns = next(csv.reader(f))
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, restval="", extrasaction="ignore")
        if fresh:
            writer.writeheader()
        writer.writerow(record.row())


def to_frame(rows: list[Record]) -> pd.DataFrame:
    return pd.DataFrame([r.row() for r in rows], columns=columns_of(rows))


RECORDS = "records.csv"


def records_file(folder: Path) -> Path:
    """A run folder's rows: records.csv, or records.csv.gz where the folder keeps them compressed
    (committed runs and baselines past 20 kB, results/README.md); pandas reads either."""
    plain = Path(folder) / RECORDS
    packed = plain.with_name(RECORDS + ".gz")
    return packed if packed.is_file() and not plain.is_file() else plain


def read_records(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, keep_default_na=False, na_values=[""])


TEXT_COLUMNS = ("suite", "kernel", "provider", "case", "quantity", "metric", "verdict", "message", "settings", "rule")


def load_records(path: Path) -> pd.DataFrame:
    """A run's records.csv as every reader (gate, report) wants it: the Record columns present
    (KeyError naming the missing ones otherwise), text columns as text, value and limit as
    numbers (NaN is written as "nan", which read_records keeps as text)."""
    records = read_records(path)
    for c in OPTIONAL:
        if c not in records.columns:
            records[c] = math.nan if c in NUMBERS else ""
    missing = [c for c in FIELDS if c not in records.columns]
    if missing:
        raise KeyError(f"{path} lacks the Record columns {missing}")
    for c in TEXT_COLUMNS:
        records[c] = records[c].astype(object).fillna("").astype(str)
    for c in NUMBERS:
        records[c] = pd.to_numeric(records[c], errors="coerce")
    return records


def from_frame(df: pd.DataFrame) -> list[Record]:
    """Records back from a frame of load_records: text as text (an empty cell as ""), numbers as
    float; every other column is a case parameter (an empty cell: the case's kernel lacks it)."""
    kinds = {f.name: f.type for f in dataclasses.fields(Record)}  # "str", "float"

    def cell(name: str, value):
        if kinds[name] == "str":
            return "" if _empty(value) else str(value)
        return float(value)

    def param(value):
        return value.item() if hasattr(value, "item") else value

    extra = [c for c in df.columns if c not in FIELDS]
    return [
        Record(
            **{k: cell(k, row[k]) for k in FIELDS},
            params={k: param(row[k]) for k in extra if not _empty(row[k])},
        )
        for row in df.to_dict("records")
    ]


def _empty(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value == ""


def times(value: float, careful: float) -> float:
    """error / the careful yardstick's error ("x careful": how far from a careful implementation
    a provider is, whichever verdict judged it); NaN where the row has no yardstick figure."""
    if math.isnan(careful) or math.isnan(value):
        return math.nan
    if careful == 0:
        return 0.0 if value == 0 else math.inf
    return value / careful


def ratio(value: float, limit: float) -> float:
    """error / limit, the headroom of a check (<= 1 passes)."""
    if limit == 0:
        return 0.0 if value == 0 else math.inf
    return value / limit

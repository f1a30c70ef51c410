"""The committed convergence runs are evidence only where their limits are ones a wrong kernel
exceeds: every judged row of every results/runs/converge-* run has a finite limit of at most
MAX_LIMIT (a relative error of 100%), and the rows reported for information are marked so. Runs
made before a fixture or limit changed leave results/runs when a run of the current tree
replaces them."""

import csv
import gzip
import math
from pathlib import Path

import pytest

from ligerbench.converge.checker import INFO_METRIC
from ligerbench.converge.tolerance import MAX_LIMIT

RUNS = Path(__file__).resolve().parent.parent / "results" / "runs"
CONVERGE = sorted(p for p in RUNS.glob("converge-*") if p.is_dir())


def _records(run: Path) -> list[dict]:
    plain, packed = run / "records.csv", run / "records.csv.gz"
    with plain.open() if plain.exists() else gzip.open(packed, "rt") as f:
        return list(csv.DictReader(f))


def test_converge_runs_are_committed():
    assert len(CONVERGE) >= 10, [p.name for p in CONVERGE]


@pytest.mark.parametrize("run", CONVERGE, ids=lambda p: p.name)
def test_every_judged_limit_is_one_a_bug_exceeds(run):
    rows = _records(run)
    assert rows, f"{run.name}: no records"
    judged = [r for r in rows if r["verdict"] in ("pass", "fail") and r["metric"] != INFO_METRIC]
    assert judged, f"{run.name}: no judged row"
    loose = [(r["case"], r["quantity"], r["limit"]) for r in judged if not float(r["limit"]) <= MAX_LIMIT]
    assert not loose, f"{run.name}: limits above {MAX_LIMIT}: {loose}"
    assert all(math.isfinite(float(r["value"])) for r in judged if r["verdict"] == "pass")

"""The jobs a --nproc run hands its ranks (ligerbench/distributed/jobs.py) survive job.json
unchanged, a job file of another shape is refused by name, every kind has a worker, and the
parent's rows follow the ranks' in records.csv instead of replacing them."""

from __future__ import annotations

import csv
import json
import math

import pytest

from ligerbench.commands import ranks
from ligerbench.distributed import jobs
from ligerbench.records import Record, RecordWriter, load_records

COMMON = {"run_id": "r1", "run_path": "/tmp/r1", "device_type": "cpu", "seed": 3, "collective_timeout_s": 12.5}
EXAMPLES = [
    jobs.VerifyRankJob(**COMMON, kernel="vp_ce", preset="quick", suites=("correctness",), providers=("ours",),
                       cases=("a", "b")),
    jobs.BenchRankJob(**COMMON, kernel="ce", sweep="vocab", mode="fwd_bwd", dtype="bf16", tokens=None, smoke=True,
                      rep_ms=50.0, mutates_input=True, providers=("ours", "eager"), cases=("p1",)),
    jobs.ConvergeRankJob(**COMMON, model="llama-mini", patch="flce", preset="tiny", steps=4, batch=2,
                         dtypes=("fp32",), parallel="fsdp2", accum=2, mutant="per_rank_mean"),
]  # fmt: skip


@pytest.mark.parametrize("job", EXAMPLES, ids=lambda j: type(j).__name__)
def test_a_job_comes_back_from_its_file_equal_and_of_its_type(job, tmp_path):
    jobs.dump(job, tmp_path / "job.json")
    back = jobs.load(tmp_path / "job.json")
    assert type(back) is type(job) and back == job


def test_every_kind_of_job_has_a_worker_and_a_label():
    assert set(ranks.JOBS) == set(jobs.KINDS.values())
    assert [j.label for j in EXAMPLES] == ["vp_ce", "ce", "flce"]


def test_a_job_file_of_another_shape_is_refused_by_name(tmp_path):
    path = tmp_path / "job.json"
    jobs.dump(EXAMPLES[0], path)
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "kind": "TrainRankJob"}))
    with pytest.raises(jobs.JobFileError, match="kind must be one of VerifyRankJob"):
        jobs.load(path)
    path.write_text(json.dumps({k: v for k, v in data.items() if k != "cases"} | {"command": "verify"}))
    with pytest.raises(jobs.JobFileError, match="cases, command"):
        jobs.load(path)


def _record(case: str, **params) -> Record:
    return Record(run_id="r", suite="s", kernel="k", provider="ours", case=case, quantity="q", metric="m",
                  value=1.0, unit="", limit=math.nan, verdict="pass", message="", params=params)  # fmt: skip


def test_the_parents_rows_follow_the_ranks_rows(tmp_path):
    path = tmp_path / "records.csv"
    ranks_writer = RecordWriter(path)  # what rank 0 wrote
    ranks_writer.write(_record("a", n=4))
    ranks_writer.write(_record("b", n=8))
    ranks_writer.close()
    parent = RecordWriter(path, append=True)
    parent.write(_record("ceiling"))
    parent.write(_record("c", n=16, world=2))  # a column the ranks did not have
    parent.close()
    df = load_records(path)
    assert list(df["case"]) == ["a", "b", "ceiling", "c"]
    assert list(df["n"].fillna(0)) == [4, 8, 0, 16] and df["world"].iloc[-1] == 2
    with open(path, newline="") as f:
        assert len(list(csv.reader(f))) == 5  # the header and four rows, none twice

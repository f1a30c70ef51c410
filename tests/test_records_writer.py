"""records.RecordWriter: the file holds exactly the rows the run counts, even when a signal's
exception lands between a row's bookkeeping and its write (the flaky SIGTERM test of CI run 26)."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from ligerbench import records
from ligerbench.records import Record, RecordWriter
from ligerbench.suites.ce.axes import case as ce_case


def _record(i: int) -> Record:
    c = ce_case(n=16 + i, v=1000, dtype="fp32", reduction="none")
    return Record.for_case(c, run_id="r", suite="correctness", provider="ours", quantity="loss",
                           metric="rel_l2", value=1e-7, unit="relative", limit=3e-7, verdict="pass")  # fmt: skip


def test_close_leaves_the_file_holding_every_counted_row(tmp_path, monkeypatch):
    w = RecordWriter(tmp_path / "records.csv")
    w.write(_record(0))
    # the moment SIGTERM raised in CI: the row is counted, its CSV write never happened
    w.rows.append(_record(1))
    w.close()
    assert len(pd.read_csv(tmp_path / "records.csv")) == len(w.frame()) == 2


def test_a_second_close_leaves_what_others_wrote(tmp_path):
    path = tmp_path / "records.csv"
    w = RecordWriter(path)
    w.close()  # a --nproc run closes it; then its ranks write the file
    path.write_text(path.read_text() + "written,by,a,rank\n")
    w.close()
    assert path.read_text().endswith("written,by,a,rank\n")


def test_a_writer_on_devnull_never_renames_a_file_onto_it(monkeypatch):
    # every rank of a --nproc run but rank 0 writes its records to os.devnull: a rewrite (a row
    # with new parameters widens the header; close) renamed a .tmp file onto it, which as root
    # replaces the device, and ranks racing for the one .tmp name failed (4 gloo ranks)
    renamed = []
    monkeypatch.setattr(records.os, "replace", lambda src, dst: renamed.append((src, dst)))
    tmp = Path(os.devnull + ".tmp")
    try:
        w = RecordWriter(Path(os.devnull))
        w.write(_record(0))
        w.close()
    finally:
        tmp.unlink(missing_ok=True)
    assert renamed == []

"""The harness under faults: a case that raises becomes an error row and the run goes on; an
interrupted run (Ctrl-C, or SIGTERM as `timeout` and CI runners send it) keeps its rows, a
summary and a manifest that says so; nothing is overwritten."""

import json
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from helpers import register_plugin
from ligerbench.cli import app
from ligerbench.registry import Provider

runner = CliRunner()
ARGS = ["--where", "reduction=sum", "--where", "dtype=fp32", "--where", "option=plain", "--where", "logits=normal"]


def _plugin(monkeypatch, fn, name="faulty"):
    """Register a provider through the entry-point hook, as a third party would."""
    provider = Provider(name=name, kernel="ce", description="test", load=lambda: fn)
    register_plugin(monkeypatch, lambda reg: reg.add(provider), name=name)


def _oom_on_one_token(logits, target, **opts):
    if logits.shape[0] == 1:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB")
    from ligerbench.suites.ce.spec import ce_torch

    return ce_torch(logits, target, **opts)


def test_a_raising_case_is_an_error_row_and_the_run_goes_on(tmp_path, monkeypatch):
    _plugin(monkeypatch, _oom_on_one_token)
    result = runner.invoke(app, ["verify", *ARGS, "--provider", "faulty", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 1
    payload = json.loads(result.stdout)
    records = pd.read_csv(tmp_path / payload["run_id"] / "records.csv", keep_default_na=False)
    errors = records[records["verdict"] == "error"]
    assert len(errors) and (errors["n"] == 1).all()
    assert errors["message"].str.contains("OutOfMemoryError: CUDA out of memory").all()
    assert (records.loc[records["n"] != 1, "verdict"] == "pass").all()  # later cases still ran


def test_ctrl_c_keeps_completed_rows_and_says_interrupted(tmp_path, monkeypatch):
    calls = []

    def interrupt_on_third_case(logits, target, **opts):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        from ligerbench.suites.ce.spec import ce_torch

        return ce_torch(logits, target, **opts)

    _plugin(monkeypatch, interrupt_on_third_case)
    result = runner.invoke(app, ["verify", *ARGS, "--provider", "faulty", "--out", str(tmp_path)])
    assert result.exit_code == 130
    (run_dir,) = tmp_path.iterdir()
    records = pd.read_csv(run_dir / "records.csv")
    assert records["case"].nunique() == 2  # the two cases completed before Ctrl-C
    assert "INTERRUPTED" in (run_dir / "summary.md").read_text()


def _verify_in_a_process(out) -> tuple[subprocess.Popen, object]:
    """A verify run in a process of its own, once its records.csv holds more than 20 rows."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ligerbench.cli", "verify", "--where", "dtype=fp32", "--provider", "eager",
         "--device", "cpu", "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        found = list(out.glob("*/records.csv"))
        if found and sum(1 for _ in open(found[0])) > 21:  # the header and more than 20 rows
            return proc, found[0]
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"no rows appeared in time: {proc.communicate()[1][-2000:]}")


@pytest.mark.slow
def test_killed_process_keeps_its_rows(tmp_path):
    proc, csv = _verify_in_a_process(tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    records = pd.read_csv(csv)
    assert len(records) > 20 and records["verdict"].isin(["pass", "fail", "skip", "error"]).all()


@pytest.mark.slow
def test_sigterm_keeps_rows_summary_and_a_manifest_that_says_so(tmp_path):
    proc, csv = _verify_in_a_process(tmp_path)
    for pause in (0.0, 0.02, 0.2):  # repeated, as `timeout` signals the process and then its group
        proc.send_signal(signal.SIGTERM)
        time.sleep(pause)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err[-2000:]  # 128 + SIGTERM (docs/usage.md, exit codes)
    assert "terminated (SIGTERM)" in err
    env = json.loads((csv.parent / "env.json").read_text())
    m, records = env["run"], pd.read_csv(csv)
    # what the run wrote and what its manifest says agree: every row counted, the run closed
    assert m["rows"] == len(records) > 20 and 0 < m["completed"] < m["planned"]
    assert m["completed"] <= records["case"].nunique() <= m["completed"] + 1  # the case cut short may have rows
    assert m["interrupted"] and m["finished"] and env["stopped_by"] == "SIGTERM"
    assert f"INTERRUPTED after {m['completed']} of {m['planned']} cases" in (csv.parent / "summary.md").read_text()
    # and no reader calls it passed
    report = runner.invoke(app, ["report", str(csv.parent), "--json"])
    assert report.exit_code == 1 and json.loads(report.stdout)["status"] == "failed"

"""The harness under faults: a case that raises becomes an error row and the run goes on; an
interrupted run keeps its rows and says so; nothing is overwritten."""

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


@pytest.mark.slow
def test_killed_process_keeps_its_rows(tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ligerbench.cli",
            "verify",
            "--where",
            "dtype=fp32",
            "--provider",
            "eager",
            "--out",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    csv = None
    while time.time() < deadline:
        found = list(tmp_path.glob("*/records.csv"))
        if found and sum(1 for _ in open(found[0])) > 21:  # the header and more than 20 rows
            csv = found[0]
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert csv is not None, "no rows appeared in time"
    records = pd.read_csv(csv)
    assert len(records) > 20 and records["verdict"].isin(["pass", "fail", "skip", "error"]).all()

"""A third kernel, added as a third party would: a package whose metadata declares a
`ligerbench.plugins` entry point (tests/kl_plugin.py, KL divergence over logits). With no edit
under ligerbench/ or suites/, every command works on it and its planted bug is killed."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from ligerbench.builtin import default_registry
from ligerbench.cli import app

runner = CliRunner()
TESTS = Path(__file__).resolve().parent


@pytest.fixture
def kl_installed(tmp_path, monkeypatch):
    """An installed distribution in all but name: a .dist-info folder on sys.path whose
    entry_points.txt names kl_plugin:register, which importlib.metadata finds like any other."""
    site = tmp_path / "site"
    info = site / "kl_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kl-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[ligerbench.plugins]\nkl = kl_plugin:register\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(TESTS))  # where the plugin module itself lives
    return tmp_path / "results"


def _run_folder(out: Path) -> Path:
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    return folder


def test_the_plugin_registers_a_kernel(kl_installed):
    registry = default_registry()
    assert registry.plugin_errors == []
    assert "kl" in registry.kernels and ("kl", "torch_kl") in registry.providers
    assert [s.name for s in registry.suites_for("kl")] == ["kl_loss", "kl_gradients", "contracts"]


@pytest.mark.interpreter
def test_list_verify_selftest_gate_report_work_on_it(kl_installed, tmp_path):
    listed = runner.invoke(app, ["list"], env={"COLUMNS": "200"})
    assert listed.exit_code == 0, listed.output
    assert "kl" in listed.stdout and "torch_kl" in listed.stdout and "mutant_elementwise_mean" in listed.stdout

    out = kl_installed
    verify = runner.invoke(app, ["verify", "--kernel", "kl", "--device", "cpu", "--out", str(out / "v"), "--json"])
    assert verify.exit_code == 0, verify.output
    payload = json.loads(verify.stdout)
    assert payload["counts"].get("pass", 0) > 0 and payload["failures"] == []
    run = _run_folder(out / "v")
    records = pd.read_csv(run / "records.csv", keep_default_na=False)
    assert set(records["kernel"]) == {"kl"}
    assert set(records["provider"]) == {"torch_kl", "eager"}  # the mutant runs only when named
    assert set(records["suite"]) == {"kl_loss", "kl_gradients", "contracts"}

    # the planted bug, named: the loss check fails on `mean`, and the command says so
    bad = runner.invoke(
        app, ["verify", "--kernel", "kl", "--device", "cpu", "--provider", "mutant_elementwise_mean",
              "--where", "reduction=mean", "--out", str(out / "m"), "--json"],
    )  # fmt: skip
    assert bad.exit_code == 1, bad.output
    failing = {(f["suite"], f["quantity"]) for f in json.loads(bad.stdout)["failures"]}
    assert ("kl_loss", "loss") in failing

    selftest = runner.invoke(app, ["selftest", "--kernel", "kl", "--device", "cpu", "--out", str(out / "s")])
    assert selftest.exit_code == 0, selftest.output
    matrix = pd.read_csv(_run_folder(out / "s") / "kill_matrix.csv").set_index("mutant")
    assert matrix.loc["mutant_elementwise_mean", "kl_loss"] == "killed"
    assert matrix.loc["mutant_elementwise_mean", "verdict"] == "killed"

    gate = runner.invoke(app, ["gate", str(run), "--baseline", str(run)])
    assert gate.exit_code == 0, gate.output
    assert "gate: PASSED" in gate.stdout
    failed_gate = runner.invoke(app, ["gate", str(_run_folder(out / "m")), "--baseline", str(run)])
    assert failed_gate.exit_code == 1, failed_gate.output

    # the plugin's own axis, declared in tests/kl_plugin.py alone: a records column, a --where
    # filter and a gate subset, with no edit under ligerbench/ or suites/
    assert set(records["teacher_temperature"]) == {1.0, 4.0}
    args = ["verify", "--kernel", "kl", "--device", "cpu", "--json"]
    hot = runner.invoke(app, [*args, "--where", "teacher_temperature=4", "--out", str(out / "t")])
    assert hot.exit_code == 0, hot.output
    hot_records = pd.read_csv(_run_folder(out / "t") / "records.csv", keep_default_na=False)
    assert set(hot_records["teacher_temperature"]) == {4.0}
    assert set(hot_records["case"]) == set(records.loc[records["teacher_temperature"] == 4.0, "case"])
    wrong = runner.invoke(app, [*args, "--where", "teacher_temperature=3", "--out", str(out / "w")])
    assert wrong.exit_code == 2 and "1.0, 4.0" in wrong.output, wrong.output
    subset = ["gate", str(_run_folder(out / "t")), "--baseline", str(run)]
    assert runner.invoke(app, subset).exit_code == 1  # half the baseline's checks are missing
    assert runner.invoke(app, [*subset, "--subset", "teacher_temperature=4.0"]).exit_code == 0
    assert "teacher_temperature" in listed.stdout

    report = runner.invoke(app, ["report", str(run)])
    assert report.exit_code == 0, report.output
    assert (run / "report.html").is_file() and "kl" in (run / "report.md").read_text()

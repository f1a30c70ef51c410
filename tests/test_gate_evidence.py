"""The gate is never green without evidence: it reads each folder's run manifest (env.json
"run"), refuses unlike or damaged inputs (exit 2), fails a run that did not finish or that
lacks checks of the baseline (exit 1, unless --subset declares it), and judges a selftest run
on its kill matrix. Folders are doctored from tests/run_fixtures.py, so each verdict is known."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest
from run_fixtures import CHECK, write_env, write_run
from typer.testing import CliRunner

from ligerbench.cli import app
from ligerbench.records import FIELDS

runner = CliRunner()
VERIFY = {"kind": "verify"}


def gate(*args):
    return runner.invoke(app, ["gate", *map(str, args)])


def _drop_rows(folder: Path, contains: str, *, fix_manifest: bool = True, **run) -> Path:
    """Remove the records.csv lines holding `contains`; the manifest follows unless told not to."""
    lines = (folder / "records.csv").read_text().splitlines(keepends=True)
    (folder / "records.csv").write_text("".join(line for line in lines if contains not in line))
    if fix_manifest:
        write_env(folder, **{**json.loads((folder / "env.json").read_text())["run"], **run, "rows": len(lines) - 2})
    return folder


def _manifest(folder: Path, **changes) -> Path:
    env = json.loads((folder / "env.json").read_text())
    env["run"].update(changes)
    (folder / "env.json").write_text(json.dumps(env))
    return folder


def test_a_complete_run_passes_and_says_how_many_checks_it_compared(tmp_path):
    base, run = write_run(tmp_path / "base", run=VERIFY), write_run(tmp_path / "run", run=VERIFY)
    result = gate(run, "--baseline", base)
    assert result.exit_code == 0, result.output
    assert "5 of 5 checks of the baseline compared (0 missing)" in result.stdout


# A run that did not finish what it planned fails (exit 1): interrupted, killed before its end
# (finished false), stopped by -x, or fewer cases completed than planned.
@pytest.mark.parametrize(
    "changes, said",
    [
        ({"interrupted": True, "completed": 0}, "interrupted after 0 of 1"),
        ({"finished": False}, "never finished"),
        ({"stopped_early": True, "completed": 0}, "stopped early"),
        ({"planned": 3}, "completed 1 of 3"),
    ],
)
def test_an_incomplete_run_fails(tmp_path, changes, said):
    base = write_run(tmp_path / "base", run=VERIFY)
    run = _manifest(write_run(tmp_path / "run", run=VERIFY), **changes)
    result = gate(run, "--baseline", base)
    assert result.exit_code == 1, result.output
    assert "gate: FAILED" in result.stdout and said in result.stdout


def _header_only(folder: Path) -> Path:
    (folder / "records.csv").write_text(",".join(FIELDS) + "\n")
    return folder


# Unusable input (exit 2), each doctored one way: why is in its id and the message.
UNUSABLE = {
    "run_header_only": (lambda run, base: (_header_only(run), base), "no records"),
    "baseline_header_only": (lambda run, base: (run, _header_only(base)), "no records"),
    "baseline_empty_file": (lambda run, base: (run, ((base / "records.csv").write_text(""), base)[1]), "cannot read"),
    "baseline_truncated": (lambda run, base: (run, _drop_rows(base, "time_ms", fix_manifest=False)), "truncated"),
    "run_truncated": (lambda run, base: (_drop_rows(run, "extra_mib", fix_manifest=False), base), "truncated"),
    "baseline_interrupted": (lambda run, base: (run, _manifest(base, interrupted=True)), "not a complete run"),
    "baseline_without_manifest": (
        lambda run, base: (run, ((base / "env.json").write_text('{"device_name": "x"}'), base)[1]),
        "no run manifest",
    ),
    "other_kind": (lambda run, base: (_manifest(run, kind="converge"), base), "a converge run"),
    "other_kernel": (lambda run, base: (_manifest(run, kernel="flce"), base), "kernel 'flce'"),
}


@pytest.mark.parametrize("name", list(UNUSABLE))
def test_unusable_input_exits_2_in_one_line(tmp_path, name):
    doctor, said = UNUSABLE[name]
    run, base = doctor(write_run(tmp_path / "run", run=VERIFY), write_run(tmp_path / "base", run=VERIFY))
    result = gate(run, "--baseline", base)
    assert result.exit_code == 2, result.output
    assert said in " ".join(result.stderr.split()) and "Traceback" not in result.output


def test_a_check_of_the_baseline_missing_from_the_run_fails_unless_a_declared_subset(tmp_path):
    base = write_run(tmp_path / "base", run=VERIFY)
    run = _drop_rows(write_run(tmp_path / "run", run=VERIFY), ",grad_logits,")  # reduction none
    result = gate(run, "--baseline", base)
    assert result.exit_code == 1, result.output
    assert "4 of 5 checks of the baseline compared (1 missing)" in result.stdout and CHECK.id in result.stdout
    # the run is the mean-reduction subset: the missing none-reduction check is not expected
    assert gate(run, "--baseline", base, "--subset", "reduction=mean").exit_code == 0
    assert gate(run, "--baseline", base, "--subset", "k=bf16").exit_code == 0  # the bench case is bf16
    # declared, but the missing check is inside the subset: still a failure
    assert gate(run, "--baseline", base, "--subset", "reduction=none").exit_code == 1
    assert gate(run, "--baseline", base, "--subset", "speed=none").exit_code == 2  # no such field


def test_a_check_the_run_only_skipped_counts_as_missing(tmp_path):
    base = write_run(tmp_path / "base", run=VERIFY)
    run = write_run(tmp_path / "run", run=VERIFY)
    rows = pd.read_csv(run / "records.csv", keep_default_na=False)
    rows.loc[rows["quantity"] == "loss", "verdict"] = "skip"
    rows.to_csv(run / "records.csv", index=False)
    result = gate(run, "--baseline", base)
    assert result.exit_code == 1 and "(1 missing)" in result.stdout


def _selftest_run(folder: Path, matrix: list[dict]) -> Path:
    """A selftest folder: its mutants' rows fail (as they must), the kill matrix says the rest."""
    write_run(folder, check="fail", run={"kind": "selftest", "kernel": "all"})
    pd.DataFrame(matrix).to_csv(folder / "kill_matrix.csv", index=False)
    return folder


KILLED = {"mutant": "m1", "kernel": "ce", "correctness": "n/a", "gradients": "killed", "verdict": "killed"}


def test_a_successful_selftest_passes_the_gate_despite_its_mutants_failing_rows(tmp_path):
    base, run = _selftest_run(tmp_path / "base", [KILLED]), _selftest_run(tmp_path / "run", [KILLED])
    result = gate(run, "--baseline", base)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    "now, said",
    [
        ({**KILLED, "gradients": "survived", "verdict": "SURVIVED"}, "mutant m1 survived every suite"),
        ({**KILLED, "correctness": "killed", "gradients": "n/a"}, "the gradients suite killed it in the baseline"),
    ],
)
def test_a_survivor_or_a_lost_kill_fails_the_selftest_gate(tmp_path, now, said):
    base, run = _selftest_run(tmp_path / "base", [KILLED]), _selftest_run(tmp_path / "run", [now])
    result = gate(run, "--baseline", base)
    assert result.exit_code == 1, result.output
    assert said in result.stdout


def test_a_mutant_of_the_baseline_missing_from_the_selftest_run_fails(tmp_path):
    other = {**KILLED, "mutant": "m2"}
    base, run = _selftest_run(tmp_path / "base", [KILLED, other]), _selftest_run(tmp_path / "run", [KILLED])
    assert gate(run, "--baseline", base).exit_code == 1
    assert gate(run, "--baseline", base, "--subset", "mutant=m1").exit_code == 0


def test_json_and_junit_carry_the_evidence(tmp_path):
    base = write_run(tmp_path / "base", run=VERIFY)
    run = _manifest(write_run(tmp_path / "run", run=VERIFY), interrupted=True, completed=0)
    result = gate(run, "--baseline", base, "--json", "--junit", tmp_path / "g.xml")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["interrupted"] is True and data["status"] == "failed" and data["counts"]["compared"] == 5
    assert {"duration_s", "device", "commit", "planned", "completed"} <= set(data)
    root = ET.parse(tmp_path / "g.xml").getroot()
    failed = [tc.get("name") for tc in root.iter("testcase") if tc.find("failure") is not None]
    assert any(name.startswith("run complete: it was interrupted") for name in failed)


def test_an_unwritable_junit_path_exits_2_in_one_line(tmp_path):
    base, run = write_run(tmp_path / "base", run=VERIFY), write_run(tmp_path / "run", run=VERIFY)
    result = gate(run, "--baseline", base, "--junit", tmp_path / "no" / "such" / "dir" / "g.xml")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "No such file or directory" in result.stderr


def test_a_run_that_only_skipped_is_not_passed(tmp_path):
    base = write_run(tmp_path / "base", run=VERIFY)
    run = _drop_rows(write_run(tmp_path / "run", run=VERIFY), ",bench,")  # the checks only
    rows = pd.read_csv(run / "records.csv", keep_default_na=False)
    rows["verdict"] = "skip"
    rows.to_csv(run / "records.csv", index=False)
    result = gate(run, "--baseline", base, "--subset", "suite=correctness", "--subset", "suite=gradients")
    assert result.exit_code == 1 and "compared nothing" in result.stdout
    report = runner.invoke(app, ["report", str(run)])
    assert report.exit_code == 1 and "NOT PASSED" in (run / "report.md").read_text()


def test_missing_checks_of_a_filtered_run_name_the_subset_flag(tmp_path):
    base = write_run(tmp_path / "base", run=VERIFY)
    run = _drop_rows(write_run(tmp_path / "run", run={**VERIFY, "filters": {"reduction": ["mean"]}}), ",grad_logits,")
    result = gate(run, "--baseline", base)
    assert result.exit_code == 1 and "`--subset reduction=mean`" in result.stdout
    assert gate(run, "--baseline", base, "--subset", "reduction=mean").exit_code == 0

"""`ligerbench gate` on doctored run folders (tests/run_fixtures.py: records.csv and env.json
written row by row with the Record fields), so every verdict and ratio is known by construction."""

from __future__ import annotations

import shlex
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from run_fixtures import CASE, CHECK, MEMORY, TARGET_MS, TIMES, write_run
from typer.testing import CliRunner

from ligerbench.cli import app

runner = CliRunner()


def gate(*args):
    return runner.invoke(app, ["gate", *map(str, args)])


@pytest.fixture
def baseline(tmp_path) -> Path:
    return write_run(tmp_path / "baseline")


def test_clean_run_passes(tmp_path, baseline):
    run = write_run(tmp_path / "run", times={k: v * 1.3 for k, v in TIMES.items()})  # a slower machine: drift cancels
    result = gate(run, "--baseline", baseline)
    assert result.exit_code == 0, result.output
    assert "gate: PASSED" in result.stdout and "0 failures, 0 regressions, 4 performance points" in result.stdout


def test_correctness_failure_fails(tmp_path, baseline):
    run = write_run(tmp_path / "run", check="fail")
    result = gate(run, "--baseline", baseline)
    assert result.exit_code == 1, result.output
    assert "1 failures" in result.stdout and "grad_logits" in result.stdout and CHECK.id in result.stdout


def test_design_target_missed_in_the_baseline_too_is_a_note_not_a_failure(tmp_path):
    # ours at 4.0 ms misses a 3.0 ms target in both runs: a known gap, not a regression
    base = write_run(tmp_path / "base", target=True)
    run = write_run(tmp_path / "run", target=True)
    result = gate(run, "--baseline", base)
    assert result.exit_code == 0, result.output
    assert "design target missed, as in the baseline" in result.stdout and "ours time_ms 4 > 3" in result.stdout


def test_design_target_lost_since_the_baseline_fails(tmp_path):
    fast = {k: v * TARGET_MS / 4.0 * 0.9 for k, v in TIMES.items()}  # every time scaled: ratios unchanged
    base = write_run(tmp_path / "base", times=fast, target=True)  # ours under the target
    run = write_run(tmp_path / "run", target=True)  # ours over it, same ratio to eager
    result = gate(run, "--baseline", base)
    assert result.exit_code == 1, result.output
    assert "1 failures, 0 regressions" in result.stdout and "| fail | design target |" in result.stdout


def test_slower_ratio_fails_and_is_named(tmp_path, baseline):
    run = write_run(tmp_path / "run", times={**TIMES, "ours": 4.0 * 1.25})  # 25% slower against eager
    result = gate(run, "--baseline", baseline)
    assert result.exit_code == 1, result.output
    assert "1 regressions" in result.stdout
    assert (
        "time_ms of ours / eager" in result.stdout and "+25.0%" in result.stdout and "not re-measured" in result.stdout
    )


def test_threshold_override(tmp_path, baseline):
    # 8% slower: under the 10% default, over a 5% override
    run = write_run(tmp_path / "run", times={**TIMES, "ours": 4.0 * 1.08})
    assert gate(run, "--baseline", baseline).exit_code == 0
    result = gate(run, "--baseline", baseline, "--threshold", "time_ms=0.05")
    assert result.exit_code == 1 and "+8.0%" in result.stdout, result.output


def test_memory_regression(tmp_path, baseline):
    run = write_run(tmp_path / "run", memory={**MEMORY, "ours": 2004.0 * 1.5})
    result = gate(run, "--baseline", baseline)
    assert result.exit_code == 1 and "extra_mib of ours / eager" in result.stdout, result.output


def test_regression_must_survive_a_recheck(tmp_path, baseline):
    slow = write_run(tmp_path / "slow", times={**TIMES, "ours": 5.0})
    again_slow = write_run(tmp_path / "again_slow", times={**TIMES, "ours": 5.1})
    fine = write_run(tmp_path / "fine")
    confirmed = gate(slow, "--baseline", baseline, "--recheck", again_slow)
    assert confirmed.exit_code == 1 and "[confirmed]" in confirmed.stdout, confirmed.output
    cleared = gate(slow, "--baseline", baseline, "--recheck", fine)
    assert cleared.exit_code == 0, cleared.output
    assert "Cleared on re-measurement" in cleared.stdout and "0 regressions" in cleared.stdout


def test_remeasure_command_runs_once(tmp_path, baseline):
    """A fake re-measure: a command that copies a prepared run into {out} and counts its calls."""
    fine, calls = write_run(tmp_path / "fine"), tmp_path / "calls"
    script = (
        "import shutil, sys, pathlib; p = pathlib.Path(sys.argv[3]); p.write_text(p.read_text() + 'x') "
        "if p.exists() else p.write_text('x'); shutil.copytree(sys.argv[1], pathlib.Path(sys.argv[2]) / 'rerun')"
    )
    command = shlex.join([sys.executable, "-c", script, str(fine), "{out}", str(calls)])
    slow = write_run(tmp_path / "slow", times={**TIMES, "ours": 5.0})
    result = gate(slow, "--baseline", baseline, "--remeasure", command)
    assert result.exit_code == 0 and "Cleared on re-measurement" in result.stdout, result.output
    assert calls.read_text() == "x"
    clean = write_run(tmp_path / "clean")
    assert gate(clean, "--baseline", baseline, "--remeasure", command).exit_code == 0
    assert calls.read_text() == "x", "no regression, so no re-measurement"


def test_junit_and_markdown_files(tmp_path, baseline):
    run = write_run(tmp_path / "run", check="fail", times={**TIMES, "ours": 5.0})
    xml, md = tmp_path / "gate.xml", tmp_path / "gate.md"
    result = gate(run, "--baseline", baseline, "--junit", xml, "--markdown", md)
    assert result.exit_code == 1
    root = ET.parse(xml).getroot()
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert set(suites) == {"correctness", "gradients", "performance", "evidence"}
    assert suites["gradients"].get("failures") == "1" and suites["correctness"].get("failures") == "0"
    assert suites["performance"].get("failures") == "1" and suites["performance"].get("tests") == "4"
    failed = [tc.get("name") for tc in root.iter("testcase") if tc.find("failure") is not None]
    assert failed == [f"grad_logits {CHECK.id}", f"ours {CASE.id}"]
    assert md.read_text().startswith("## ligerbench gate: FAILED")


OTHER_CASE = CASE.replace(v=32000)


def _moved(base: Path) -> Path:
    """The same numbers at another case: a baseline of another sweep."""
    rows = (base / "records.csv").read_text().replace(CASE.id, OTHER_CASE.id).replace(",128256,", ",32000,")
    (base / "records.csv").write_text(rows)
    return base


# Each doctors the (run, baseline) pair one way; why each is unusable is in its id.
UNUSABLE = {
    "no_baseline": (lambda run, base: (run, base.parent / "nowhere"), "is not a folder"),
    "not_a_run": (lambda run, base: (run, (base / "env.json").unlink() or base), "has no env.json"),
    "other_gpu": (lambda run, base: (run, write_run(base.parent / "a100", device="NVIDIA A100")), "like with like"),
    "smoke_run": (
        lambda run, base: (write_run(run.parent / "smoke", verdict="not_a_measurement"), base),
        "not measurements",
    ),
    "no_peer": (lambda run, base: (write_run(run.parent / "alone", times={"ours": 4.0}, memory={}), base), "no peer"),
    "no_common_point": (lambda run, base: (run, _moved(base)), "share no measured point"),
    "no_columns": (lambda run, base: (run, (base / "records.csv").write_text("a,b\n1,2\n") and base), "lacks"),
}


@pytest.mark.parametrize("name", list(UNUSABLE))
def test_unusable_input_exits_2(tmp_path, baseline, name):
    doctor, said = UNUSABLE[name]
    run, base = doctor(write_run(tmp_path / "run"), baseline)
    result = gate(run, "--baseline", base)
    assert result.exit_code == 2, result.output
    assert said in " ".join(result.stderr.split()), result.stderr


def test_usage_errors_exit_2(tmp_path, baseline):
    run = write_run(tmp_path / "run")
    assert gate(run).exit_code == 2  # --baseline is required
    bad = gate(run, "--baseline", baseline, "--threshold", "speed=0.1")
    assert bad.exit_code == 2 and "time_ms" in bad.output  # the choices are listed
    assert gate(run, "--baseline", baseline, "--threshold", "time_ms=-1").exit_code == 2
    assert gate(run, "--baseline", baseline, "--remeasure", "true {out}", "--recheck", run).exit_code == 2

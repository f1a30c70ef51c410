"""What a newcomer reads on an 80-column terminal: every command's last line is its verdict
(PASSED or FAILED, cases, checks, failures, errors, the run folder), a provider that skipped is
one line with its reason and share (not a table row of zeros and nan), and no line is wider than
the terminal, the verdict's folder path aside (printed whole, never cut)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from helpers import register_plugin
from ligerbench import skipped, verdict
from ligerbench.cli import app
from ligerbench.exits import ExitCode
from ligerbench.records import load_records
from ligerbench.registry import Provider

runner = CliRunner()
WIDTH = 80
# one fp32 reduction-none case with a leading run of ignored tokens, every provider: on CPU liger
# and torch_compile skip it (they run on cuda only), the others compare
SMALL = ["--kernel", "ce", "--device", "cpu", "--where", "reduction=none", "--where", "dtype=fp32"]
SMALL += ["--where", "ignore_pattern=leading_run"]
VERDICT = re.compile(
    r"^(PASSED|FAILED): (\d+) (?:case|cases|step|steps), (\d+) (?:checks?|measurements?), (\d+) failed, "
    r"(\d+) errors?; (\S+)$"
)


def invoke(*args):
    return runner.invoke(app, [*map(str, args)], env={"COLUMNS": str(WIDTH)})


def lines_of(result) -> list[str]:
    return [line.rstrip() for line in result.output.splitlines() if line.strip()]


def last_verdict(result) -> re.Match:
    last = lines_of(result)[-1]
    found = VERDICT.match(last)
    assert found, f"the last line is not a verdict: {last!r}\n{result.output}"
    return found


def assert_fits(result, whole: set[str] = frozenset()) -> None:
    """Every line fits the width; the verdict line up to its folder (the path is printed whole);
    a line that is one of `whole` (a case id, a command to paste) is printed whole whatever its width."""
    *body, last = lines_of(result)
    wide = [line for line in body if len(line) > WIDTH and line.strip() not in whole]
    assert not wide, "\n".join(wide)
    assert len(last.rsplit("; ", 1)[0]) <= WIDTH, last


def table_rows(result) -> list[str]:
    return [line for line in lines_of(result) if line.startswith("│")]


def only_run(root: Path) -> Path:
    (folder,) = [p for p in root.iterdir() if p.is_dir()]
    return folder


# ----------------------------------------------------------------------------- verify


def test_verify_ends_with_its_verdict_and_says_each_skipped_provider_once(tmp_path):
    result = invoke("verify", *SMALL, "--out", tmp_path)
    assert result.exit_code == 0, result.output
    run = only_run(tmp_path)
    df = load_records(run / "records.csv")
    word, cases, checks, failed, errors, folder = last_verdict(result).groups()
    assert word == "PASSED" and Path(folder) == run
    assert int(cases) == df["case"].nunique() > 0
    assert int(checks) == df["verdict"].isin(["pass", "fail", "error"]).sum() > 0
    assert (int(failed), int(errors)) == (0, 0)
    n = df["case"].nunique()
    for provider in ("liger", "torch_compile"):  # GPU-only: every case skipped on CPU
        said = [line for line in lines_of(result) if line.startswith(f"skipped: {provider} ")]
        assert said == [f"skipped: {provider} ({provider} runs on cuda only): {n} of {n} cases"], said
        assert not [r for r in table_rows(result) if f" {provider} " in r], "a skipped provider has a table row"
    assert [r for r in table_rows(result) if " ours " in r], "the providers that ran are in the table"
    assert "nan" not in result.output
    assert "x careful:" in result.output  # the ratio a newcomer cannot read has its legend
    assert_fits(result)


def test_a_failing_verify_ends_with_failed_and_its_failure_count(tmp_path):
    bug = ["--provider", "mutant_first_row_upstream", "--where", "ignore_pattern=leading_run"]
    result = invoke("verify", "--kernel", "ce", "--device", "cpu", *bug, "--where", "dtype=fp32", "--out", tmp_path)
    assert result.exit_code == 1, result.output
    df = load_records(only_run(tmp_path) / "records.csv")
    word, cases, checks, failed, errors, _ = last_verdict(result).groups()
    assert word == "FAILED"
    assert int(failed) == (df["verdict"] == "fail").sum() > 0
    assert int(errors) == (df["verdict"] == "error").sum()
    assert int(cases) == df["case"].nunique()
    rerun = [line for line in lines_of(result) if line.startswith("re-run one: ligerbench verify ")]
    assert len(rerun) == 1
    failing = df.loc[df["verdict"] == "fail", "case"]
    for case in failing:  # each failing case id on a line of its own, whole, under its FAIL line
        assert f"    {case}" in lines_of(result)
    assert_fits(result, whole={*failing, rerun[0]})


# ----------------------------------------------------------------------------- bench


def _eager_with(name: str, supports) -> callable:
    def register(reg):
        eager = reg.provider("ce", "eager")
        reg.add(Provider(name=name, kernel="ce", description="eager, on some points", load=eager.load,
                         supports=supports))  # fmt: skip

    return register


def test_bench_tables_hold_what_ran_and_skips_are_one_line_each(tmp_path, monkeypatch):
    register_plugin(monkeypatch, _eager_with("small_only", lambda c: None if c.v < 50 else "planted: V >= 50"), "a")
    register_plugin(monkeypatch, _eager_with("never", lambda c: "planted: no point"), "b")
    args = ["--smoke", "--kernel", "ce", "--provider", "eager", "--provider", "small_only", "--provider", "never"]
    result = invoke("bench", *args, "--out", tmp_path)
    # `never` was named and timed on no point: not a pass
    assert result.exit_code == 1, result.output
    df = load_records(only_run(tmp_path) / "records.csv")
    points = df.loc[df["provider"] == "eager", "case"].nunique()
    assert points == 2
    assert "skipped: never (planted: no point): 2 of 2 points" in lines_of(result)
    assert "skipped: small_only (planted: V >= 50): 1 of 2 points" in lines_of(result)
    rows = table_rows(result)
    assert not [r for r in rows if " never " in r]
    assert len([r for r in rows if " small_only " in r]) == 1  # the point it ran keeps its row
    assert len([r for r in rows if " eager " in r]) == 2
    word, steps, measured, failed, errors, _ = last_verdict(result).groups()
    assert (word, int(steps), int(measured), int(failed), int(errors)) == ("FAILED", 6, 3, 0, 0)
    assert_fits(result)


# ----------------------------------------------------------------------------- gate


def test_gate_ends_with_its_verdict_counting_failing_checks(tmp_path):
    import json

    from run_fixtures import write_run

    base = write_run(tmp_path / "base")
    clean, bad = write_run(tmp_path / "clean"), write_run(tmp_path / "bad", check="fail")
    for run, word, code in ((clean, "PASSED", 0), (bad, "FAILED", 1)):
        result = invoke("gate", run, "--baseline", base)
        assert result.exit_code == code, result.output
        counts = json.loads(invoke("gate", run, "--baseline", base, "--json").stdout)["counts"]
        checks = counts["compared"] + counts["performance_points"]  # the baseline's checks and the points
        failed = counts["failures"] + counts["regressions"] + counts["missing"]
        assert failed == code  # the fixture's failing grad_logits check, and nothing else
        assert lines_of(result)[-1] == f"{word}: 1 case, {checks} checks, {failed} failed, 0 errors; {run}"


# ----------------------------------------------------------------------------- the helpers


def test_the_verdict_word_follows_the_exit_code():
    tally = verdict.Tally(units=1, checks=2)
    assert verdict.line(ExitCode.OK, tally, "r") == "PASSED: 1 case, 2 checks, 0 failed, 0 errors; r"
    for code in (ExitCode.FAILED, ExitCode.USAGE, ExitCode.INTERRUPTED, ExitCode.TERMINATED):
        assert verdict.line(code, tally, "r").startswith("FAILED: ")


def test_skip_lines_count_whole_cases_and_checks_inside_cases_that_ran():
    rows = [("a", "c1", "skip", "why a"), ("a", "c2", "skip", "why a"), ("b", "c1", "pass", ""),
            ("b", "c1", "skip", "one check"), ("b", "c2", "skip", "other"), ("c", "c1", "pass", "")]  # fmt: skip
    df = pd.DataFrame(rows, columns=["provider", "case", "verdict", "message"])
    assert skipped.everywhere(df) == {"a"}
    assert skipped.lines(df) == [
        "skipped: a (why a): 2 of 2 cases",
        "skipped: b (one check; 1 other reason in summary.md): 1 of 2 cases, 1 checks in 1 cases that ran",
    ]

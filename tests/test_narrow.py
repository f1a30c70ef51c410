"""Every command at COLUMNS=80: no table wider than the terminal, and no cell broken mid-word
(each name a table shows appears whole in the output). Cells are text, not rich markup:
`logits_to_keep[train,k=0].loss` shows as written."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from run_fixtures import write_run
from typer.testing import CliRunner

from ligerbench.builtin import default_registry
from ligerbench.cli import app
from ligerbench.records import Record
from ligerbench.selftest import engine

runner = CliRunner()
BOX = set("│┃┏┗┡└┌┐┘┬┴┼━─")


@pytest.fixture(autouse=True)
def narrow(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")


def invoke(*args):
    return runner.invoke(app, [*map(str, args)])


def assert_whole(output: str, names) -> None:
    for line in output.splitlines():
        if BOX & set(line):
            assert len(line) <= 80, line
    for name in names:
        assert name in output, f"{name!r} is broken or missing at 80 columns"


def test_list():
    result = invoke("list")
    assert result.exit_code == 0
    registry = default_registry()
    names = [p.name for p in registry.providers.values()] + [s.name for s in registry.suites.values()]
    names += [m.name for m in engine.collect(registry, "cpu")] + ["llama-mini", "gemma2-mini"]
    assert_whole(result.stdout, names)


def test_verify(tmp_path):
    args = ["--provider", "mutant_first_row_upstream", "--where", "ignore_pattern=leading_run", "--where", "dtype=fp32"]
    result = invoke("verify", "--device", "cpu", *args, "--out", tmp_path)
    assert result.exit_code == 1
    assert_whole(result.stdout, ["mutant_first_row_upstream", "correctness", "gradients", "worst/limit"])


def test_selftest_kill_matrix(tmp_path, monkeypatch):
    def fake(registry, mutants, ctx):  # each mutant fails a check its control passes: all killed
        for m in mutants:
            for provider, verdict in ((m.name, "fail"), (m.control, "pass")):
                row = dict(case="c", quantity="q", metric="rel_l2", value=1.0, unit="", limit=2.0, verdict=verdict)
                ctx.writer.write(
                    Record(run_id=ctx.run_id, suite=m.suites[0], kernel=m.kernel, provider=provider, **row)
                )

    monkeypatch.setattr(engine, "run", fake)
    result = invoke("selftest", "--device", "cpu", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    mutants = engine.collect(default_registry(), "cpu")
    suites = {m.suites[0] for m in mutants}  # the suites that killed (the rest are n/a here)
    assert_whole(result.stdout, [m.name for m in mutants] + sorted(suites))


def test_converge_table_shows_brackets(tmp_path, monkeypatch):
    from ligerbench.commands import converge as command

    quantities = [f"logits_to_keep[{mode},k={k}].loss" for mode in ("train", "eval") for k in (0, 1)]

    def run_case(case, *, run_id, sink, on_step):
        for q in quantities:
            row = dict(metric="rel_diff", value=0.0, unit="relative", limit=1e-5, verdict="pass")
            sink(Record(run_id=run_id, suite="converge", kernel="ce", provider="ours", case=case.id, quantity=q, **row))
        on_step("ours", 0, 1.0)
        return SimpleNamespace(ref=None, ours=None, truth=None)

    monkeypatch.setattr(command, "run_case", run_case)
    result = invoke("converge", "llama-mini", "--device", "cpu", "--dtype", "fp32", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    assert_whole(result.stdout, quantities)


def test_bench_gate_report(tmp_path):
    result = invoke("bench", "--smoke", "--provider", "eager", "--provider", "ours", "--out", tmp_path / "b")
    assert result.exit_code == 0
    assert_whole(result.stdout, ["eager", "ours"])
    base, run = write_run(tmp_path / "base"), write_run(tmp_path / "run")
    result = invoke("gate", run, "--baseline", base)
    assert result.exit_code == 0
    assert_whole(result.stdout, ["gate: PASSED"])
    result = invoke("report", run)
    assert result.exit_code == 0 and str(run / "report.md") in result.stdout.replace("\n", "")

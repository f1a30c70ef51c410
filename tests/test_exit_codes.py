"""The exit-code contract, the same for every command (docs/usage.md, "Exit codes"):
0 every check passed; 1 a check failed or errored; 2 usage error or unusable input (I/O errors
included) in one line without a traceback; 130 interrupted, "interrupted" printed, the completed
rows, a summary and the run manifest kept. And --json on every command with every count key."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from run_fixtures import write_run
from typer.testing import CliRunner

from helpers import register_plugin
from ligerbench import cli
from ligerbench.cli import app
from ligerbench.records import Record
from ligerbench.registry import Provider

runner = CliRunner()
# two cases, fp32, only ours: the smallest verify that checks something real on CPU
SMALL = ["--device", "cpu", "--provider", "ours", "--where", "reduction=none", "--where", "ignore_pattern=leading_run"]
SMALL += ["--where", "dtype=fp32"]


def small_cases() -> int:
    """The cases SMALL selects from the quick grid (its size follows the covering design)."""
    from ligerbench.builtin import default_registry

    grid = default_registry().kernels["ce"].grid("quick", "cpu")
    return sum(c.reduction == "none" and c.ignore_pattern == "leading_run" and c.dtype == "fp32" for c in grid)


JSON_KEYS = {"command", "status", "exit_code", "counts", "planned", "completed", "interrupted", "duration_s"}
JSON_KEYS |= {"device", "commit", "results"}


def invoke(*args):
    return runner.invoke(app, [*map(str, args)])


def only_run(root: Path) -> Path:
    (folder,) = [p for p in root.iterdir() if p.is_dir()]
    return folder


def manifest(folder: Path) -> dict:
    return json.loads((folder / "env.json").read_text())["run"]


def one_line_error(result, code=2) -> None:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


# ----------------------------------------------------------------------------- verify


def test_verify_0_with_json_and_a_complete_manifest(tmp_path):
    result = invoke("verify", *SMALL, "--out", tmp_path, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert JSON_KEYS <= set(data) and data["status"] == "passed" and data["interrupted"] is False
    assert set(data["counts"]) >= {"pass", "fail", "error", "skip"} and data["counts"]["fail"] == 0  # zeros kept
    m = manifest(only_run(tmp_path))
    assert m["kind"] == "verify" and m["kernel"] == "ce" and m["finished"]
    assert m["planned"] == m["completed"] == small_cases() > 1
    assert m["filters"]["dtype"] == ["fp32"] and m["rows"] == len(pd.read_csv(only_run(tmp_path) / "records.csv"))


def test_verify_1_and_the_fail_line_reruns_that_case(tmp_path):
    bug = ["--provider", "mutant_first_row_upstream", "--where", "ignore_pattern=leading_run", "--where", "dtype=fp32"]
    result = invoke("verify", "--device", "cpu", *bug, "--out", tmp_path / "a")
    assert result.exit_code == 1
    rerun = next(line for line in result.stdout.splitlines() if line.startswith("re-run one: "))
    args = rerun.removeprefix("re-run one: ligerbench ").split()
    assert "--preset quick --device cpu" in rerun  # the case ids of one preset are not another's
    again = invoke(*args, "--out", tmp_path / "b", "--json")
    assert again.exit_code == 1 and json.loads(again.stdout)["planned"] == 1  # that one case, failing again


def test_the_rerun_line_names_the_seed_and_the_ranks():
    from ligerbench.verify.job import rerun_command

    line = rerun_command("grpo", "ours", "grpo/x", preset="quick", seed=3, device="cpu", nproc=2)
    assert line.endswith("--case grpo/x --preset quick --device cpu --seed 3 --nproc 2")
    assert "--seed" not in rerun_command("ce", "ours", "c", preset="full", seed=0, device="cuda", nproc=0)


def test_verify_maxfail_stops_and_the_manifest_says_so(tmp_path):
    bug = ["--provider", "mutant_first_row_upstream", "--where", "ignore_pattern=leading_run"]
    result = invoke("verify", "--device", "cpu", *bug, "-x", "--out", tmp_path, "--json")
    assert result.exit_code == 1
    m = manifest(only_run(tmp_path))
    assert m["stopped_early"] and m["completed"] < m["planned"]
    assert "stopped early" in (only_run(tmp_path) / "summary.md").read_text()


def test_verify_collect_only_counts_without_running(tmp_path):
    result = invoke(
        "verify", "--device", "cpu", "-k", "fp32 and not sum", "--collect-only", "--json", "--out", tmp_path
    )
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["cases"] == len(data["case_ids"]) > 0
    assert all("fp32" in i and "sum" not in i for i in data["case_ids"])
    assert not tmp_path.exists() or not any(tmp_path.iterdir())  # nothing ran, no run folder


@pytest.mark.parametrize(
    "args, said",
    [
        (["-k", "fp32 and ("], "unexpected end"),
        (["--case", "ce/no/such/case"], "no such case"),
        (["-k", "nothing-matches-this"], "no case matches"),
        (["--maxfail", "0"], "maxfail"),
    ],
)
def test_verify_usage_errors_2(tmp_path, args, said):
    result = invoke("verify", "--device", "cpu", *args, "--out", tmp_path)
    assert result.exit_code == 2 and said in result.output


def test_verify_out_is_a_file_2_in_one_line(tmp_path):
    target = tmp_path / "file"
    target.write_text("")
    for out in (target, target / "below"):
        result = invoke("verify", *SMALL, "--out", out)
        one_line_error(result)
        assert "cannot write the run folder" in result.stderr


def test_verify_out_not_writable_2(tmp_path, monkeypatch):
    # as root a chmod'ed folder is still writable: the OS's refusal is what is simulated
    from ligerbench import runs

    def refuse(root, command, label):
        raise PermissionError(13, "Permission denied", str(root))

    monkeypatch.setattr(runs, "new_run_dir", refuse)
    result = invoke("verify", *SMALL, "--out", tmp_path)
    one_line_error(result)
    assert "Permission denied" in result.stderr


def _interrupt_after_first(real):
    """Wrap a command's engine so that Ctrl-C arrives after its first completed step."""

    def engine(*args, **kwargs):
        hook = "on_case" if "on_case" in kwargs else "on_step"
        inner = kwargs[hook]

        def step(*a):
            inner(*a)
            raise KeyboardInterrupt

        return real(*args, **{**kwargs, hook: step})

    return engine


def test_verify_130_keeps_rows_summary_and_manifest(tmp_path, monkeypatch):
    from ligerbench.verify import job as command

    monkeypatch.setattr(command, "run_plan", _interrupt_after_first(command.run_plan))
    result = invoke("verify", *SMALL, "--out", tmp_path)
    assert result.exit_code == 130 and "interrupted" in result.output
    run = only_run(tmp_path)
    m = manifest(run)
    n = small_cases()
    assert m["interrupted"] and m["completed"] == 1 and m["planned"] == n > 1 and m["rows"] > 0
    assert len(pd.read_csv(run / "records.csv")) == m["rows"]
    assert f"INTERRUPTED after 1 of {n} cases" in (run / "summary.md").read_text()
    # and no reader calls it passed
    report = invoke("report", run, "--json")
    assert report.exit_code == 1 and json.loads(report.stdout)["status"] == "failed"
    assert "INTERRUPTED" in (run / "report.md").read_text() and "PASSED" not in (run / "report.md").read_text()


# ----------------------------------------------------------------------------- bench (smoke on CPU)


def test_bench_1_when_a_provider_errors_and_json(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("planted")

    provider = Provider(name="broken", kernel="ce", description="raises", load=lambda: broken)
    register_plugin(monkeypatch, lambda reg: reg.add(provider), name="broken")
    result = invoke("bench", "--smoke", "--provider", "broken", "--provider", "eager", "--out", tmp_path, "--json")
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert (
        JSON_KEYS <= set(data)
        and data["counts"]["error"] > 0
        and {"measured", "not_a_measurement"} <= set(data["counts"])
    )


def test_bench_130(tmp_path, monkeypatch):
    from ligerbench.bench import job as command

    monkeypatch.setattr(command, "run_plan", _interrupt_after_first(command.run_plan))
    result = invoke("bench", "--smoke", "--provider", "eager", "--out", tmp_path)
    assert result.exit_code == 130 and "interrupted" in result.output
    run = only_run(tmp_path)
    assert manifest(run)["interrupted"] and (run / "summary.md").is_file()


def test_bench_collect_only(tmp_path):
    result = invoke("bench", "--smoke", "--provider", "eager", "--collect-only", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["steps"] == json.loads(result.stdout)["points"]


# ----------------------------------------------------------------------------- converge


def _fake_case(raise_after=None):
    """converge's run_case without the training: one passing row per dtype, or Ctrl-C."""
    calls = []

    def run_case(case, *, run_id, sink, on_step):
        calls.append(case)
        if raise_after is not None and len(calls) > raise_after:
            raise KeyboardInterrupt
        sink(Record(run_id=run_id, suite="converge", kernel="ce", provider="ours", case=case.id,
                    quantity="logits_to_keep[train,k=0].loss", metric="rel_diff", value=0.0, unit="relative",
                    limit=1e-5, verdict="pass"))  # fmt: skip
        on_step("ours", 0, 1.0)
        return SimpleNamespace(ref=None, ours=None, truth=None)  # no curves: nothing to plot

    return run_case


def test_converge_presets_quick_and_full_and_aliases(tmp_path):
    for name in ("quick", "tiny"):
        result = invoke("converge", "llama-mini", "--preset", name, "--device", "cpu", "--collect-only", "--json")
        assert result.exit_code == 0 and json.loads(result.stdout)["steps"] == 12
    assert invoke("converge", "llama-mini", "--preset", "full", "--device", "cpu").exit_code == 2  # needs CUDA
    assert invoke("converge", "llama-mini", "--preset", "huge", "--device", "cpu").exit_code == 2


def test_converge_json_and_130(tmp_path, monkeypatch):
    from ligerbench.commands import converge as command

    monkeypatch.setattr(command, "run_case", _fake_case())
    result = invoke("converge", "llama-mini", "--device", "cpu", "--out", tmp_path / "a", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert JSON_KEYS <= set(data) and data["planned"] == data["completed"] == 2

    monkeypatch.setattr(command, "run_case", _fake_case(raise_after=1))
    result = invoke("converge", "llama-mini", "--device", "cpu", "--out", tmp_path / "b")
    assert result.exit_code == 130 and "interrupted" in result.output
    run = only_run(tmp_path / "b")
    assert manifest(run)["completed"] == 1 and len(pd.read_csv(run / "records.csv")) == 1
    assert (run / "summary.md").is_file()


# ----------------------------------------------------------------------------- selftest


def test_selftest_130_keeps_the_kill_matrix(tmp_path, monkeypatch):
    from ligerbench.selftest import engine

    def run(registry, mutants, ctx):
        m = mutants[0]
        row = dict(case="c", quantity="q", metric="rel_l2", value=1.0, unit="", limit=0.1, verdict="fail")
        ctx.writer.write(Record(run_id=ctx.run_id, suite=m.suites[0], kernel=m.kernel, provider=m.name, **row))
        raise KeyboardInterrupt

    monkeypatch.setattr(engine, "run", run)
    result = invoke("selftest", "--device", "cpu", "--out", tmp_path)
    assert result.exit_code == 130 and "interrupted" in result.output
    folder = only_run(tmp_path)
    assert manifest(folder)["interrupted"] and (folder / "kill_matrix.md").is_file()


def test_selftest_collect_only_and_k(tmp_path):
    result = invoke("selftest", "--device", "cpu", "-k", "upstream and not converge", "--collect-only", "--json")
    assert result.exit_code == 0
    names = json.loads(result.stdout)["mutant_names"]
    assert names and all("upstream" in n and "converge" not in n for n in names)


# ----------------------------------------------------------------------------- list


def test_list_json_names_everything():
    result = invoke("list", "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    catalog = data["catalog"]
    providers = {p["name"] for p in catalog["providers"]}
    assert {"ours", "mutant_first_row_upstream"} <= providers
    assert any(p["status"] == "available, bench only" or "bench" in p["status"] for p in catalog["providers"])
    assert {m["campaign"] for m in catalog["mutants"]} >= {"kernels", "converge"}
    assert {"llama-mini"} <= {m["name"] for m in catalog["converge_models"]}
    assert {"quick", "full"} <= {p["name"] for p in catalog["converge_presets"]}
    assert data["counts"]["campaigns"] >= 2 and {"commit", "device", "interrupted"} <= set(data)


def test_list_usage_error_2():
    assert invoke("list", "--no-such-option").exit_code == 2


# ----------------------------------------------------------------------------- report


def test_report_0_and_json(tmp_path):
    run = write_run(tmp_path / "run", run={"kind": "verify"})
    result = invoke("report", run, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert JSON_KEYS <= set(data) and data["status"] == "passed"


# each damages one file one way; each must be exit 2 in one line, not a traceback
DAMAGED = {
    "not_csv": lambda run: (run / "records.csv").write_text('a,"b\n1,2,3,4\n"x'),
    "not_utf8": lambda run: (run / "records.csv").write_bytes(b"\xff\xfe\x00\x81garbage\n"),
    "no_verdict_column": lambda run: (run / "records.csv").write_text("run_id,suite\nx,y\n"),
    "empty_file": lambda run: (run / "records.csv").write_text(""),
    "env_not_json": lambda run: (run / "env.json").write_text("{not json"),
}


@pytest.mark.parametrize("name", list(DAMAGED))
def test_report_on_a_damaged_run_2(tmp_path, name):
    run = write_run(tmp_path / "run")
    DAMAGED[name](run)
    result = invoke("report", run)
    one_line_error(result)
    assert "report:" in result.stderr and len(result.stderr.strip().splitlines()) <= 3


def test_report_in_a_folder_it_cannot_write_2(tmp_path):
    run = write_run(tmp_path / "run")
    (run / "report.md").mkdir()  # the file cannot be written: what a read-only folder does to it
    result = invoke("report", run)
    one_line_error(result)
    assert "report:" in result.stderr


def test_report_of_an_empty_run_is_not_passed(tmp_path):
    run = write_run(tmp_path / "run")
    (run / "records.csv").write_text((run / "records.csv").read_text().splitlines()[0] + "\n")
    result = invoke("report", run)
    assert result.exit_code == 1 and "no records" in (run / "report.md").read_text()


# ----------------------------------------------------------------------------- the CLI itself


COMMANDS = ("verify", "list", "bench", "converge", "selftest", "gate", "report", "audit")


def test_version_help_and_examples_in_every_command():
    assert invoke("--version").exit_code == 0
    assert invoke("-h").exit_code == 0
    for command in COMMANDS:
        result = invoke(command, "-h")
        assert result.exit_code == 0 and "Examples" in result.stdout, command


def test_help_at_80_columns_lists_each_command_on_one_line():
    result = runner.invoke(app, ["-h"], env={"COLUMNS": "80", "TERMINAL_WIDTH": "80"})
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    start = next(i for i, line in enumerate(lines) if "Commands" in line)
    end = next(i for i, line in enumerate(lines) if i > start and line.startswith("╰"))
    listed = [line.strip("│ ").split()[0] for line in lines[start + 1 : end]]
    assert listed == list(COMMANDS)  # one line each: a wrapped summary would add a line without a name


@pytest.mark.parametrize("command", COMMANDS)
def test_help_paragraphs_are_reflowed_by_the_terminal(command, monkeypatch):
    """A paragraph of the docstring (wrapped at 100 columns in the source) is one line on a wide
    terminal, and wraps at 80 on a narrow one: never the source's line breaks."""
    import typer.rich_utils

    from ligerbench import cli as the_cli

    # typer reads TERMINAL_WIDTH once, when typer.rich_utils is first imported: if this test's
    # first invocation imported it, the width would stay at 2000 for the narrow one (the test
    # then failed alone and passed after others); COLUMNS, read per console, sets the width
    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", None)

    doc = the_cli.reflow(getattr(the_cli, command if command != "list" else "list_registry").__doc__)
    exit_status = max((p for p in doc.split("\n\n")[1:] if not p.startswith(" ")), key=len)  # the longest
    assert len(exit_status) > 80
    wide = runner.invoke(app, [command, "-h"], env={"COLUMNS": "2000"})
    assert exit_status in wide.stdout  # all of it on one line
    narrow = runner.invoke(app, [command, "-h"], env={"COLUMNS": "80"})
    words = exit_status.split()
    text = " ".join(narrow.stdout.split())
    assert " ".join(words) in text and max(len(line) for line in narrow.stdout.splitlines()) <= 80


def test_interpreter_warnings_on_masked_lanes_are_silenced_and_nothing_else():
    def command():
        warnings.warn_explicit(
            "invalid value encountered in divide",
            RuntimeWarning,
            "interpreter.py",
            599,
            module="triton.runtime.interpreter",
        )
        warnings.warn_explicit(
            "invalid value encountered in divide", RuntimeWarning, "ours.py", 1, module="ligerbench.x"
        )

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        cli.contract("test", command)()
    assert [str(w.message) for w in seen] == ["invalid value encountered in divide"]
    assert seen[0].filename == "ours.py"

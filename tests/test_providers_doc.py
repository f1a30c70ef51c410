"""docs/providers.md's worked example is a test: its files are written from the page into a
temporary folder and installed as a package would be (a .dist-info whose entry_points.txt is the
page's pyproject.toml entry point), with no network. Its correct provider must pass and each of
its three planted bugs must be caught, through the plugin (verify, selftest --control), through
`--provider MODULE:FUNCTION` (and PATH.py:FUNCTION), and through ligerbench.testing (by running
the example's own tests file)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from ligerbench.cli import app

runner = CliRunner()
DOC = Path(__file__).resolve().parent.parent / "docs" / "providers.md"
FILE_BLOCK = re.compile(r"<!-- file: (?P<path>[\w/.]+) -->\n```\w*\n(?P<body>.*?)\n```", re.S)
# the example's bugs, each with the slice of the grid where it shows and the check that must fail
# there (suite, quantity, a word of the message): a failure elsewhere would not be this bug's
BUGS = {
    "mean_counts_ignored": (
        ["--where", "reduction=mean", "--where", "ignore_pattern=random_90"],
        "correctness",
        "loss",
        "got",
    ),
    "mean_outside_the_kernel": (
        ["--where", "reduction=mean", "--where", "ignore_pattern=all"],
        "gradients",
        "grad_logits",
        "NaN",
    ),
    "one_upstream_for_all_rows": (
        [
            "--where",
            "reduction=none",
            "--where",
            "ignore_pattern=leading_run",
        ],  # up-ones and up-random both; random shows it
        "gradients",
        "grad_logits",
        "worst element",
    ),
}
# a slice of the grid where the correct provider is checked on every path (the full quick grid
# runs once, through the example's own tests file): fp32 mean covers every option and pattern
CORRECT_SLICE = ["--where", "dtype=fp32", "--where", "reduction=mean"]


def example_files() -> dict[str, str]:
    return {m["path"]: m["body"] + "\n" for m in FILE_BLOCK.finditer(DOC.read_text())}


def toml_table(text: str, table: str) -> dict[str, str]:
    """The `key = "value"` lines of one [table] of a pyproject.toml (tomllib is Python 3.11+)."""
    body = text.split(f"[{table}]\n", 1)[1].split("\n[", 1)[0]
    return dict(re.findall(r'^"?([\w.-]+)"? = "([^"]*)"$', body, re.M))


@pytest.fixture(scope="module")
def toyce(tmp_path_factory):
    """The example package, written from the page and installed in all but name; yields its folder."""
    root = tmp_path_factory.mktemp("toyce")
    for rel, body in example_files().items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(body)
    pyproject = (root / "pyproject.toml").read_text()
    project = toml_table(pyproject, "project")
    site = root / "site"
    info = site / f"{project['name']}-{project['version']}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    lines = [f"{k} = {v}" for k, v in toml_table(pyproject, 'project.entry-points."ligerbench.plugins"').items()]
    (info / "entry_points.txt").write_text("[ligerbench.plugins]\n" + "\n".join(lines) + "\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(site))
        mp.syspath_prepend(str(root))
        yield root
        for name in [m for m in sys.modules if m == "toyce" or m.startswith("toyce.")]:
            del sys.modules[name]


def _verify(out: Path, *args: str):
    result = runner.invoke(app, ["verify", "--kernel", "ce", "--device", "cpu", "--out", str(out), "--json", *args])
    payload = json.loads(result.stdout) if result.stdout.strip().startswith("{") else None
    return result, payload


def _assert_passes(out: Path, provider: str) -> None:
    result, payload = _verify(out, "--provider", provider, *CORRECT_SLICE)
    assert result.exit_code == 0, result.output
    records = pd.read_csv(Path(payload["results"]) / "records.csv", keep_default_na=False)
    mine = records[records["provider"] == provider]
    assert (mine["verdict"] == "pass").sum() > 0 and set(mine["verdict"]) == {"pass", "skip"}
    # what the example does not support is skipped with its reason, never run
    assert set(mine.loc[mine["verdict"] == "skip", "message"]) >= {"toyce has no class_weight"}


def _assert_caught(out: Path, provider: str, bug: str, *extra: str) -> None:
    where, suite, quantity, word = BUGS[bug]
    result, payload = _verify(out, "--provider", provider, *where, "--where", "option=plain", *extra)
    assert result.exit_code == 1, result.output
    failing = [f for f in payload["failures"] if f["verdict"] == "fail"]
    assert any(f["suite"] == suite and f["quantity"] == quantity and word in f["message"] for f in failing), failing


def test_the_page_holds_the_whole_example():
    files = example_files()
    assert set(files) == {
        "pyproject.toml",
        "toyce/__init__.py",
        "toyce/losses.py",
        "toyce/bugs.py",
        "toyce/ligerbench_plugin.py",
        "tests/test_toyce.py",
    }
    entry_points = toml_table(files["pyproject.toml"], 'project.entry-points."ligerbench.plugins"')
    assert entry_points == {"toyce": "toyce.ligerbench_plugin:register"}


def test_through_the_plugin(toyce, tmp_path):
    listed = runner.invoke(app, ["list"], env={"COLUMNS": "250"})
    assert listed.exit_code == 0, listed.output
    assert "failed to load" not in listed.output
    for name in ("toyce", "toyce_mean_counts_ignored", "toyce_mean_outside_the_kernel", "toyce_one_upstream"):
        assert name in listed.stdout

    _assert_passes(tmp_path / "ok", "toyce")
    mutants = {
        "mean_counts_ignored": "toyce_mean_counts_ignored",
        "mean_outside_the_kernel": "toyce_mean_outside_the_kernel",
        "one_upstream_for_all_rows": "toyce_one_upstream",
    }
    for bug, provider in mutants.items():
        _assert_caught(tmp_path / bug, provider, bug)

    # selftest judges the example's bugs against the example's own correct provider
    args = ["selftest", "--kernel", "ce", "--control", "toyce", "--device", "cpu", "--out", str(tmp_path / "s")]
    for provider in mutants.values():
        args += ["--mutant", provider]
    selftest = runner.invoke(app, args)
    assert selftest.exit_code == 0, selftest.output
    assert "judged against toyce" in selftest.output
    (run,) = (tmp_path / "s").iterdir()
    matrix = pd.read_csv(run / "kill_matrix.csv").set_index("mutant")
    assert set(matrix.index) == set(mutants.values()) and (matrix["verdict"] == "killed").all()
    records = pd.read_csv(run / "records.csv", keep_default_na=False)
    assert "toyce" in set(records["provider"]) and "ours" not in set(records["provider"])


def test_through_provider_module_function(toyce, tmp_path):
    # the correct callable, with its `supports` attribute honoured
    _assert_passes(tmp_path / "ok", "toyce.ligerbench_plugin:toy_ce")
    for bug in BUGS:
        _assert_caught(tmp_path / bug, f"toyce.bugs:{bug}", bug)
    # and by file path
    _assert_caught(
        tmp_path / "file", f"{toyce / 'toyce' / 'bugs.py'}:mean_outside_the_kernel", "mean_outside_the_kernel"
    )


@pytest.mark.slow(seconds=16)
def test_through_the_pytest_entry(toyce):
    """The example's own tests file: its correct provider passes on the whole quick grid and each
    bug's test sees verify_provider fail (the file asserts that with pytest.raises)."""
    spec = importlib.util.spec_from_file_location("toyce_tests", toyce / "tests" / "test_toyce.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.test_toy_ce_matches_float64()
    (mark,) = [m for m in module.test_each_planted_bug_is_caught.pytestmark if m.name == "parametrize"]
    params = mark.args[1]
    assert len(params) == 3
    for bug, where in params:
        module.test_each_planted_bug_is_caught(bug, where)
    # the other way round: a bug handed to verify_provider raises, naming the case and the numbers
    from ligerbench.testing import verify_provider

    with pytest.raises(AssertionError) as caught:
        verify_provider("ce", params[1][0], reduction="mean", ignore_pattern="all", dtype="fp32")
    text = str(caught.value)
    assert "ce/n16/v1000/fp32/mean/up-ones/all/plain/normal" in text
    assert "NaN where the float64 reference is 0" in text and "limit" in text


def test_the_readme_example_shows_the_one_command(toyce, tmp_path):
    """The README's own-kernel example (its section "Check your own loss kernel", after the two
    commands the README opens with), run as written on the example's callable (a slice of the
    grid, to keep the test short), passes; on a planted bug it fails."""
    readme = (DOC.parent.parent / "README.md").read_text()
    example = readme.split("\n### Check your own loss kernel\n", 1)[1].split("\n#", 1)[0]
    (line,) = [ln for ln in example.splitlines() if ln.startswith("ligerbench verify") and "--provider" in ln]
    argv = line.split("#")[0].split()[1:]
    assert argv == ["verify", "--kernel", "ce", "--provider", "mypkg.losses:my_ce"]
    assert "docs/providers.md" in example and "verify_provider" in example

    def run(spec: str, *extra: str):
        args = [a.replace("mypkg.losses:my_ce", spec) for a in argv]
        return runner.invoke(app, [*args, "--device", "cpu", "--out", str(tmp_path), *extra])

    ok = run("toyce.ligerbench_plugin:toy_ce", *CORRECT_SLICE)
    assert ok.exit_code == 0, ok.output
    where, *_ = BUGS["mean_outside_the_kernel"]
    bad = run("toyce.bugs:mean_outside_the_kernel", *where)
    assert bad.exit_code == 1, bad.output
    assert "NaN where the float64 reference is 0" in " ".join(bad.stdout.split())  # the detail wraps at words

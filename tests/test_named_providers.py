"""Providers named on the command line: ad-hoc callables (`--provider MODULE:FUNCTION` or
`PATH.py:FUNCTION`, `--mutates-input`), no green without evidence for a named provider (one that
cannot load, or that every case skipped, exits 1 with the reason on the terminal), broken plugins
reported once and never fatal, and `selftest --control`."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from helpers import register_plugin
from ligerbench.cli import app
from ligerbench.registry import Provider

runner = CliRunner()
# one small slice: fp32, mean, a leading run of ignored tokens (one case)
SLICE = [
    "--kernel",
    "ce",
    "--device",
    "cpu",
    "--where",
    "dtype=fp32",
    "--where",
    "reduction=mean",
    "--where",
    "ignore_pattern=leading_run",
    *("--where", "option=plain", "--where", "logits=normal"),
    *("-k", "not lay-"),  # 2-D logits: the NaN planted at [1, 2] below is a 2-D index
]

# ad-hoc providers, written to a file the tests load by path
PROVIDERS = '''
import torch
from ligerbench.suites.ce.spec import ce_torch


def correct(logits, target, **options):
    return ce_torch(logits, target, **options)


def skips_everything(logits, target, **options):
    raise AssertionError("never called: supports() refuses every case")


skips_everything.supports = lambda case: "this kernel runs on TPUs only"


def writes_its_input(logits, target, **options):
    loss, z = ce_torch(logits, target, **options)
    logits.data.zero_()  # behind autograd's back, as an in-place gradient write would
    return loss, z


class _NaNAt(torch.autograd.Function):
    """The identity, whose backward puts a NaN at row 1, column 2 (an ignored row: truth 0)."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        grad[1, 2] = float("nan")
        return grad


def nan_gradient(logits, target, **options):
    return ce_torch(_NaNAt.apply(logits), target, **options)
'''


@pytest.fixture
def adhoc_file(tmp_path) -> Path:
    path = tmp_path / "my_losses.py"
    path.write_text(textwrap.dedent(PROVIDERS))
    (tmp_path / "broken.py").write_text('raise RuntimeError("boom at import")\n')
    return path


def _verify(tmp_path, *args):
    result = runner.invoke(app, ["verify", *SLICE, *args, "--out", str(tmp_path / "out")])
    return result


# --------------------------------------------------------------------------- ad-hoc providers


@pytest.mark.parametrize(
    "spec",
    [
        "ligerbench.suites.ce.spec:ce_torch",  # MODULE:FUNCTION, an importable module
        "FILE:correct",  # PATH.py:FUNCTION, a file loaded on its own
    ],
)
def test_an_adhoc_provider_is_verified(tmp_path, adhoc_file, spec):
    spec = spec.replace("FILE", str(adhoc_file))
    result = _verify(tmp_path, "--provider", spec, "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    records = pd.read_csv(Path(payload["results"]) / "records.csv", keep_default_na=False)
    assert set(records["provider"]) == {spec}  # only the named one ran
    assert (records["verdict"] == "pass").all()
    assert set(records["quantity"]) == {"loss", "grad_logits", "input_unchanged", "input_layout"}


def test_mutates_input_is_declared_not_assumed(tmp_path, adhoc_file):
    spec = f"{adhoc_file}:writes_its_input"
    undeclared = _verify(tmp_path, "--provider", spec, "--suite", "contracts", "--json")
    assert undeclared.exit_code == 1, undeclared.output
    (failure,) = {f["message"] for f in json.loads(undeclared.stdout)["failures"]}
    assert "without declaring mutates_input" in failure
    declared = _verify(tmp_path, "--provider", spec, "--suite", "contracts", "--mutates-input")
    assert declared.exit_code == 0, declared.output


def test_mutates_input_without_an_adhoc_provider_is_a_usage_error(tmp_path):
    assert _verify(tmp_path, "--provider", "ours", "--mutates-input").exit_code == 2


@pytest.mark.parametrize("spec", ["my_module:", ":function"])
def test_a_malformed_spec_is_a_usage_error(tmp_path, spec):
    result = _verify(tmp_path, "--provider", spec)
    assert result.exit_code == 2, result.output


# --------------------------------------------------------------------------- no green without evidence


@pytest.mark.parametrize(
    "spec, reason",
    [
        ("no_such_package.losses:my_ce", "No module named 'no_such_package'"),
        ("FILE:no_such_function", "has no attribute 'no_such_function'"),
        ("DIR/missing.py:my_ce", "no file"),
        ("DIR/broken.py:my_ce", "cannot be loaded (RuntimeError: boom at import)"),
    ],
)
def test_a_named_provider_that_cannot_load_exits_1_with_the_reason(tmp_path, adhoc_file, spec, reason):
    spec = spec.replace("FILE", str(adhoc_file)).replace("DIR", str(tmp_path))
    result = _verify(tmp_path, "--provider", spec)
    assert result.exit_code == 1, result.output
    assert "cannot run the provider(s) you named" in result.stderr
    assert reason in result.stderr
    assert not (tmp_path / "out").exists()  # stopped before any run: nothing to mistake for a result


def test_a_registered_provider_that_cannot_load_exits_1(tmp_path, monkeypatch):
    def missing():
        raise ImportError("No module named 'their_kernels'")

    def register(reg):
        reg.add(Provider(name="theirs", kernel="ce", description="", load=missing))

    register_plugin(monkeypatch, register)
    result = _verify(tmp_path, "--provider", "theirs")
    assert result.exit_code == 1, result.output
    assert "No module named 'their_kernels'" in result.stderr
    # not named: its rows are skips with the reason, and the run is judged on the others
    unnamed = _verify(tmp_path, "--provider", "eager")
    assert unnamed.exit_code == 0, unnamed.output


def test_a_named_provider_every_case_skips_exits_1_with_the_reason(tmp_path, adhoc_file):
    result = _verify(tmp_path, "--provider", f"{adhoc_file}:skips_everything")
    assert result.exit_code == 1, result.output
    said = " ".join(result.stderr.split())  # wrapped at the terminal's width
    assert "checked on no case" in said and "this kernel runs on TPUs only" in said
    (run,) = (tmp_path / "out").iterdir()
    summary = (run / "summary.md").read_text()
    assert "Status: PASSED" not in summary and "checked on no case" in summary
    assert json.loads((run / "env.json").read_text())["unchecked_providers"]
    # beside a provider that is checked, the skipped one still fails the run
    both = _verify(tmp_path, "--provider", f"{adhoc_file}:skips_everything", "--provider", "eager")
    assert both.exit_code == 1, both.output


def test_bench_takes_adhoc_providers_and_refuses_unloadable_ones(tmp_path, adhoc_file):
    base = ["bench", "--kernel", "ce", "--smoke", "--out", str(tmp_path / "b")]
    ok = runner.invoke(app, [*base, "--provider", f"{adhoc_file}:correct"])
    assert ok.exit_code == 0, ok.output
    (run,) = (tmp_path / "b").iterdir()
    records = pd.read_csv(run / "records.csv", keep_default_na=False)
    timed = records[(records["provider"] == f"{adhoc_file}:correct") & (records["metric"] == "time_ms")]
    assert len(timed) and (timed["verdict"] == "not_a_measurement").all()
    bad = runner.invoke(app, [*base, "--provider", "no_such_package:fn"])
    assert bad.exit_code == 1, bad.output
    assert "No module named 'no_such_package'" in bad.stderr
    skipped = runner.invoke(app, [*base, "--provider", f"{adhoc_file}:skips_everything"])
    assert skipped.exit_code == 1, skipped.output
    assert "this kernel runs on TPUs only" in skipped.stderr


# --------------------------------------------------------------------------- failure messages


def test_a_nan_gradient_is_called_nan_with_its_row_and_column(tmp_path, adhoc_file):
    result = _verify(tmp_path, "--provider", f"{adhoc_file}:nan_gradient", "--suite", "gradients", "--json")
    assert result.exit_code == 1, result.output
    messages = [f["message"] for f in json.loads(result.stdout)["failures"]]
    assert messages and all("NaN where the float64 reference is 0" in m for m in messages), messages
    assert all("first at row 1, column 2" in m for m in messages)


# --------------------------------------------------------------------------- broken plugins


def _raises_on_register(reg):
    raise ImportError("No module named 'their_dependency'")


def _provider_for_a_misspelt_kernel(reg):
    reg.add(Provider(name="my_ce", kernel="cee", description="", load=lambda: None))


def _registers_a_name_twice(reg):
    reg.add(Provider(name="my_ce", kernel="ce", description="", load=lambda: None))
    reg.add(Provider(name="ours", kernel="ce", description="", load=lambda: None))


@pytest.mark.parametrize(
    "register, error",
    [
        (_raises_on_register, "ImportError: No module named 'their_dependency'"),
        (_registers_a_name_twice, "provider 'ours' of kernel 'ce' is already registered"),
        (_provider_for_a_misspelt_kernel, "names kernel 'cee', which is not registered (known kernels: ce, flce"),
    ],
)
def test_list_survives_a_broken_plugin_and_names_it_once(monkeypatch, register, error):
    register_plugin(monkeypatch, register, name="broken_plugin")
    result = runner.invoke(app, ["list"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert result.stderr.count("plugin 'broken_plugin' failed to load") == 1, result.stderr
    assert error in result.stderr
    assert "ours" in result.stdout  # the rest is listed
    assert "ce providers: fn(logits, target, *, weight, ignore_index" in result.stdout  # the contract's signature
    assert "my_ce" not in result.stdout  # what the broken plugin registered is left out


def test_verify_names_a_broken_plugin_once_and_runs(tmp_path, monkeypatch):
    register_plugin(monkeypatch, _raises_on_register, name="broken_plugin")
    result = _verify(tmp_path, "--provider", "eager")
    assert result.exit_code == 0, result.output
    assert result.stderr.count("plugin 'broken_plugin' failed to load") == 1


# --------------------------------------------------------------------------- selftest --control


def test_selftest_judges_kills_against_the_named_control(tmp_path, adhoc_file):
    args = ["selftest", "--kernel", "ce", "--mutant", "mutant_mean_counts_ignored", "--device", "cpu"]
    ok = runner.invoke(app, [*args, "--control", "eager", "--out", str(tmp_path / "a")])
    assert ok.exit_code == 0, ok.output
    (run,) = (tmp_path / "a").iterdir()
    providers = set(pd.read_csv(run / "records.csv")["provider"])
    assert providers == {"eager", "mutant_mean_counts_ignored"}  # the control named, not `ours`
    # a control that fails the same checks as the mutant leaves it unkilled: the kill is judged
    # against the named control, not assumed
    wrong = runner.invoke(
        app, [*args, "--control", "ligerbench.suites.ce.mutants:_mean_counts_ignored", "--out", str(tmp_path / "b")]
    )
    assert wrong.exit_code == 1, wrong.output
    assert "survived" in wrong.output


@pytest.mark.parametrize(
    "extra, code",
    [
        (["--control", "eager"], 2),  # no --kernel: a control is one kernel's
        (["--kernel", "ce", "--control", "nobody"], 2),  # not a provider of the kernel
        (["--kernel", "ce", "--control", "mutant_first_row_upstream"], 2),  # a planted bug cannot judge
        (["--kernel", "ce", "--control", "no_such_package:fn"], 1),  # cannot load: no kill can count
    ],
)
def test_selftest_control_refusals(tmp_path, extra, code):
    result = runner.invoke(app, ["selftest", "--device", "cpu", "--out", str(tmp_path), *extra])
    assert result.exit_code == code, result.output


def test_a_named_provider_reported_only_as_info_is_said_so_not_said_unrun():
    import pandas as pd

    from ligerbench.named import missing_evidence

    rows = pd.DataFrame({"provider": ["ours", "eager", "eager"], "verdict": ["pass", "info", "info"],
                         "message": ["", "", ""]})  # fmt: skip
    assert missing_evidence(rows, ["ours", "eager", "liger"]) == {
        "eager": "every case was reported as info, never judged: 2 rows, none with a limit",
        "liger": "no case of this selection ran it",
    }

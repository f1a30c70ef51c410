"""`ligerbench verify` and `list` through Typer's CliRunner, and proof that verify's checks fail
on the bugs they exist for (planted bugs in suites/*/mutants.py)."""

import json

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from ligerbench.cli import app

runner = CliRunner()
# one fp32 reduction-none case with a leading run of ignored tokens: small and fast
SMALL = [
    "--kernel",
    "ce",
    "--where",
    "reduction=none",
    "--where",
    "dtype=fp32",
    "--where",
    "ignore_pattern=leading_run",
]


def _verify(tmp_path, *args):
    result = runner.invoke(app, ["verify", *args, "--out", str(tmp_path), "--json"])
    payload = json.loads(result.stdout) if result.stdout.strip().startswith("{") else None
    return result, payload


def test_verify_passes_and_writes_results(tmp_path):
    result, payload = _verify(tmp_path, *SMALL)
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / payload["run_id"]
    records = pd.read_csv(run_dir / "records.csv")
    assert set(records["verdict"]) <= {"pass", "skip"}
    assert {"loss", "grad_logits", "input_unchanged"} <= set(records["quantity"])
    assert (records.loc[records["provider"] == "ours", "verdict"] == "pass").all()
    assert (records["reduction"] == "none").all()
    env = json.loads((run_dir / "env.json").read_text())
    for key in ("device_name", "torch", "triton", "transformers", "git_commit", "triton_mode", "seed"):
        assert key in env
    assert env["triton_mode"] == ("compiled" if torch.cuda.is_available() else "interpreter")
    assert "PASSED" in (run_dir / "summary.md").read_text()


def test_same_seed_same_numbers_new_folder(tmp_path):
    a, pa = _verify(tmp_path, *SMALL, "--provider", "ours", "--seed", "3")
    b, pb = _verify(tmp_path, *SMALL, "--provider", "ours", "--seed", "3")
    assert pa["run_id"] != pb["run_id"]  # never overwritten
    ra = pd.read_csv(tmp_path / pa["run_id"] / "records.csv")
    rb = pd.read_csv(tmp_path / pb["run_id"] / "records.csv")
    assert ra["value"].tolist() == rb["value"].tolist()


# Each planted bug, with the smallest slice of the grid that must expose it, and the suite
# that must report it.
MUTANTS = [
    ("mutant_first_row_upstream", SMALL, "gradients"),
    (
        "mutant_softcap_no_tanh_grad",
        ["--where", "option=softcap", "--where", "reduction=sum", "--where", "dtype=fp32"],
        "gradients",
    ),
    (
        "mutant_mean_counts_ignored",
        [
            "--where",
            "reduction=mean",
            "--where",
            "ignore_pattern=random_90",
            "--where",
            "dtype=fp32",
            "--where",
            "option=plain",
        ],
        "correctness",
    ),
    (
        "mutant_low_precision_target_grad",
        ["--where", "logits=confident", "--where", "reduction=sum", "--where", "dtype=fp32", "--where", "option=plain"],
        "gradients",
    ),
    ("mutant_silent_inplace", SMALL, "contracts"),
    (
        "mutant_zloss_no_grad",
        ["--where", "option=z_loss", "--where", "reduction=sum", "--where", "dtype=fp32", "--where", "logits=normal"],
        "gradients",
    ),
    (
        "mutant_smoothing_ignores_class_weight",
        ["--where", "option=smoothing_class_weight", "--where", "reduction=sum", "--where", "dtype=fp32"],
        "correctness",
    ),
]


@pytest.mark.parametrize("mutant,args,suite", MUTANTS, ids=[m[0] for m in MUTANTS])
def test_verify_fails_on_planted_bug(tmp_path, mutant, args, suite):
    result, payload = _verify(tmp_path, *args, "--provider", mutant, "--preset", "quick")
    assert result.exit_code == 1, result.output
    failing = {(f["provider"], f["suite"]) for f in payload["failures"] if f["verdict"] == "fail"}
    assert (mutant, suite) in failing, payload["failures"][:3]


def test_fails_are_named_in_the_table(tmp_path):
    result = runner.invoke(app, ["verify", *SMALL, "--provider", "mutant_first_row_upstream", "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert "failing checks" in result.stdout and "mutant_first_row_upstream" in result.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--where", "reduction=avg"],
        ["--where", "dtype=fp64"],
        ["--provider", "nope"],
        ["--device", "tpu"],
        ["--kernel", "xx"],
    ],
)
def test_usage_errors_exit_2(tmp_path, args):
    result = runner.invoke(app, ["verify", *args, "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output


# an unknown axis lists the kernel's axes; an unknown value lists the axis's values (quick preset)
@pytest.mark.parametrize(
    "item, listed",
    [
        ("reduce=none", ("reduction", "ignore_pattern", "layout", "upstream")),
        ("layout=4d", ("2d", "3d", "padded_vocab", "transposed")),
        ("n=17", ("16", "8", "1")),
        ("reduction", ("AXIS=VALUE",)),
    ],
)
def test_where_names_the_valid_axes_and_values(tmp_path, item, listed):
    result = runner.invoke(app, ["verify", "--kernel", "ce", "--device", "cpu", "--where", item, "--collect-only"])
    assert result.exit_code == 2, result.output
    for name in listed:
        assert name in result.output


def test_where_narrows_on_any_axis_int_ones_too():
    args = ["verify", "--kernel", "ce", "--device", "cpu", "--collect-only", "--json"]
    result = runner.invoke(app, [*args, "--where", "layout=transposed", "--where", "n=8", "--where", "n=1"])
    assert result.exit_code == 0, result.output
    ids = json.loads(result.stdout)["case_ids"]
    assert ids and all(i.endswith("/lay-transposed") and i.split("/")[1] in ("n8", "n1") for i in ids)


def test_list_shows_registry():
    result = runner.invoke(app, ["list"])
    assert result.exit_code == 0
    for name in ("ours", "eager", "liger", "correctness", "gradients", "quick", "full"):
        assert name in result.stdout

"""`ligerbench verify --kernel flce` through Typer's CliRunner: a filtered slice passes for our
kernel (default and 5-token chunks) and eager, and the planted chunk-loop bug is caught."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from ligerbench.builtin import default_registry
from ligerbench.cli import app

runner = CliRunner()
# bf16 and every option at once: all reductions, confident and large logits, odd shapes, and
# a bias in the core's cases, so grad_bias is checked too (9 core cases, plus the covering
# design's with option 'all': layouts and upstreams)
ALL_OPTIONS_BF16 = ["--kernel", "flce", "--where", "dtype=bf16", "--where", "option=all"]
# a leading run of ignored tokens: with 5-token chunks the first chunk is entirely ignored and
# 12 tokens leave a partial last chunk (2 cases)
LEADING_RUN_FP32 = ["--kernel", "flce", "--where", "dtype=fp32", "--where", "ignore_pattern=leading_run"]


def _verify(tmp_path, *args):
    result = runner.invoke(app, ["verify", *args, "--out", str(tmp_path), "--json"])
    assert result.stdout.strip().startswith("{"), result.output
    payload = json.loads(result.stdout)
    return result, payload, pd.read_csv(tmp_path / payload["run_id"] / "records.csv")


@pytest.mark.slow(seconds=26)
@pytest.mark.interpreter
def test_verify_flce_passes_on_a_slice(tmp_path):
    result, _, records = _verify(tmp_path, *ALL_OPTIONS_BF16)
    assert result.exit_code == 0, result.output
    assert set(records["verdict"]) <= {"pass", "skip"}
    ran = records[records["verdict"] != "skip"]
    assert set(ran["provider"]) == {"ours", "ours_small_chunks", "ours_float32_store", "eager", "textbook"}
    assert {"loss", "z_loss", "grad_hidden", "grad_weight", "grad_bias", "input_unchanged"} <= set(ran["quantity"])
    grid = default_registry().kernels["flce"].grid("quick", "cpu")
    assert records["case"].nunique() == len([c for c in grid if c.dtype == "bf16" and c.option == "all"]) >= 9
    for provider in ("ours", "ours_small_chunks", "ours_float32_store"):
        mine = records[records["provider"] == provider]
        assert (mine["verdict"] == "pass").all()
        assert len(mine) == len(records[records["provider"] == "eager"])  # nothing skipped
    # the GPU-only peers say why they did not run, the 72-chunk settings need 72 tokens, and the
    # vocabulary split and the 2-byte store refuse the slice's label smoothing and z-loss
    skipped = records[records["verdict"] == "skip"]
    many = {"ours_dtype_32_chunks", "ours_fp32_72_chunks", "ours_auto_72_chunks"}
    refused = {"ours_vocab_split", "ours_shifted16_store"}
    native = {"torch_native", "torch_native_chunked"}  # no softcap or z-loss (suites/peers/torch_native.py)
    assert set(skipped["provider"]) == {"torch_compile", "liger", "cce", "quack", *refused, *many, *native}
    gpu_only = skipped["provider"].isin(["torch_compile", "liger", "cce", "quack"])
    options = skipped["provider"].isin(refused)
    torch_native = skipped["provider"].isin(native)
    assert skipped.loc[gpu_only, "message"].str.contains("runs on cuda only").all()
    assert skipped.loc[options, "message"].str.contains("no label smoothing").all()
    assert skipped.loc[torch_native, "message"].str.contains("linear_cross_entropy has n").all()
    assert skipped.loc[~gpu_only & ~options & ~torch_native, "message"].str.contains("fewer than 72 tokens").all()


def test_verify_catches_a_chunk_loop_that_drops_the_last_partial_chunk(tmp_path):
    result, payload, records = _verify(
        tmp_path,
        *LEADING_RUN_FP32,
        *("--provider", "mutant_drops_last_chunk", "--provider", "ours_small_chunks"),
    )
    assert result.exit_code == 1, result.output
    mutant = records[records["provider"] == "mutant_drops_last_chunk"]
    failed = set(mutant.loc[mutant["verdict"] == "fail", "quantity"])
    assert {"loss", "grad_hidden", "grad_weight"} <= failed
    # the same slice with the right loop passes: the failure is the bug, not the slice
    assert (records.loc[records["provider"] == "ours_small_chunks", "verdict"] == "pass").all()
    assert {f["provider"] for f in payload["failures"]} == {"mutant_drops_last_chunk"}

"""`ligerbench bench` end to end on CPU: --smoke writes records, markdown, plots and env, all
marked not-a-measurement; without CUDA and without --smoke it refuses with exit 2."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from helpers import once_per_run
from ligerbench.cli import app
from ligerbench.records import read_records

runner = CliRunner()
# ours twice (copying and in-place, which needs the restore and the clone row) and eager as the
# peer; Liger through the interpreter would triple the runtime and tests nothing more here
SMOKE_PROVIDERS = ["--provider", "ours", "--provider", "ours_inplace", "--provider", "eager"]


def _only_run(root: Path) -> Path:
    runs = [p for p in root.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def _records(run: Path) -> pd.DataFrame:
    df = read_records(run / "records.csv")
    df["value"] = df["value"].astype(float)  # "nan" (skips, memory on CPU) reads as text otherwise
    return df


@pytest.fixture(scope="module")
def ce_smoke(tmp_path_factory):
    def invoke(out):
        return runner.invoke(app, ["bench", "--kernel", "ce", "--smoke", "--out", str(out), *SMOKE_PROVIDERS])

    result, out = once_per_run(tmp_path_factory, "ce_bench_smoke", invoke)
    return result, _only_run(out)


@pytest.mark.interpreter
def test_smoke_run_exits_zero_and_writes_every_output(ce_smoke):
    result, run = ce_smoke
    assert result.exit_code == 0, result.output
    for name in ("records.csv", "summary.md", "env.json", "time_vs_vocab.png", "ratios.png"):
        assert (run / name).stat().st_size > 0, name
    # CPU has no allocator figures: the memory plot would be an empty panel, so it is left out
    assert not (run / "memory_vs_vocab.png").exists()
    assert (run / "time_vs_vocab.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.interpreter
def test_smoke_output_is_marked_not_a_measurement(ce_smoke):
    _, run = ce_smoke
    df = _records(run)
    assert len(df) > 0
    assert set(df["verdict"]) == {"not_a_measurement"}
    assert df["message"].str.contains("NOT A MEASUREMENT").all()
    assert "**NOT A MEASUREMENT**" in (run / "summary.md").read_text()
    env = json.loads((run / "env.json").read_text())
    assert env["measurement"] is False and env["device_type"] == "cpu" and env["triton_mode"] == "interpreter"


@pytest.mark.interpreter
def test_smoke_records_hold_every_figure_per_provider_and_case(ce_smoke):
    _, run = ce_smoke
    df = _records(run)
    cases = df[df["provider"] != "ceiling"]["case"].unique()
    assert len(cases) == 2  # the two smoke vocabularies
    expected = {
        "time_ms": "ms",
        "p20_ms": "ms",
        "p80_ms": "ms",
        "extra_mib": "MiB",
        "peak_mib": "MiB",
        "rate": "GB/s",
        "pct_ceiling": "%",
        "ratio_time_ms": "x best",
        "loss": "nats",
    }
    for provider in ("ours", "ours_inplace", "eager"):
        for case in cases:
            rows = df[(df["provider"] == provider) & (df["case"] == case)]
            units = dict(zip(rows["metric"], rows["unit"], strict=False))
            for metric, unit in expected.items():
                assert units.get(metric) == unit, (provider, case, metric)
            assert ("clone_ms" in units) is (provider == "ours_inplace")
    # one ratio is exactly 1 per case (the best), none below it
    ratios = df[df["metric"] == "ratio_time_ms"]
    assert (ratios.groupby("case")["value"].min() == 1.0).all()
    assert (ratios["value"] >= 1.0).all()
    # every provider saw the same inputs: the same loss, to bf16 precision
    losses = df[df["metric"] == "loss"].groupby("case")["value"]
    assert ((losses.max() - losses.min()) / losses.max() < 1e-2).all()
    assert set(df[df["provider"] == "ceiling"]["metric"]) == {"copy_gbps", "matmul_tflops"}


def test_without_cuda_bench_refuses_with_exit_2(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = runner.invoke(app, ["bench", "--kernel", "ce", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "needs a CUDA GPU" in result.output
    assert list(tmp_path.iterdir()) == []  # nothing written that could pass for a result


@pytest.mark.interpreter
@pytest.mark.parametrize(
    "args, hint",
    [
        (["--sweep", "layers"], "tokens"),  # invalid choice: the message lists the choices
        (["--mode", "both"], "forward"),
        (["--provider", "nope"], "ours_inplace"),
        (["--baseline"], "baseline"),  # a smoke run cannot become a baseline
    ],
)
def test_usage_errors_exit_2(tmp_path, args, hint):
    result = runner.invoke(app, ["bench", "--smoke", "--out", str(tmp_path), *args])
    assert result.exit_code == 2, result.output
    assert hint in result.output


@pytest.mark.interpreter
def test_flce_bench_runs_registered_flce_providers(tmp_path):
    """flce through its registered eager provider, so this test does not depend on the fused
    kernel's speed under the interpreter; the other flce providers go through the same path."""
    result = runner.invoke(
        app,
        ["bench", "--kernel", "flce", "--sweep", "heads", "--provider", "eager", "--smoke", *("--out", str(tmp_path))],
    )
    assert result.exit_code == 0, result.output
    df = _records(_only_run(tmp_path))
    rates = df[df["metric"] == "rate"]
    assert set(rates["unit"]) == {"TFLOP/s"}
    assert len(rates) == 2 and (rates["h"] > 0).all()  # the two smoke heads, with a hidden size
    loss = df[df["metric"] == "loss"]["value"]
    assert all(math.isfinite(v) for v in loss)

"""The budget sweep's picture: time against extra memory per point (ligerbench/bench/pareto.py)."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from ligerbench.bench import pareto
from ligerbench.bench.spec import SweepPoint
from ligerbench.builtin import default_registry
from ligerbench.cli import app
from ligerbench.commands import bench as bench_command
from ligerbench.records import Record, read_records, settings_of, settings_text, to_frame
from ligerbench.suites.flce import bench as flce_bench
from ligerbench.suites.flce.axes import case as flce_case

POINT = SweepPoint("llama3-8b", 0.0, flce_case(n=8192, v=128256, h=4096, dtype="bf16"))


def _rows(values: dict[str, tuple[float, float]], settings: dict[str, dict] | None = None) -> list[Record]:
    rows = []
    for provider, (mib, ms) in values.items():
        for metric, value in (("extra_mib", mib), ("time_ms", ms)):
            rows.append(
                Record.for_case(
                    POINT.case, run_id="r", suite="bench", provider=provider, quantity="full", metric=metric,
                    value=value, unit="", limit=math.nan, verdict="measured",
                    settings=settings_text((settings or {}).get(provider, {})),
                )
            )  # fmt: skip
    return rows


def test_the_frontier_comes_from_the_settings_in_the_records_not_from_names():
    values = {"mine_small": (1129.0, 64.0), "mine_large": (3070.0, 39.0), "ours_budget_128": (1500.0, 50.0)}
    settings = {"mine_small": {"chunk_mib": 64}, "mine_large": {"chunk_mib": 2048}}
    assert pareto.budgets(to_frame(_rows(values, settings))) == {"mine_small": 64.0, "mine_large": 2048.0}


def test_pareto_plot_is_drawn_from_the_records(tmp_path):
    values = {"torch_compile": (3070.0, 36.8), "ours_budget_64": (1129.0, 64.0), "ours_budget_2048": (3070.0, 39.0)}
    assert pareto._point_values(to_frame(_rows(values)), POINT.case.id) == values
    (path,) = pareto.draw(to_frame(_rows(values)), [POINT], title="t", folder=tmp_path)
    assert path == tmp_path / "pareto.png" and path.stat().st_size > 10_000


def test_no_panel_without_memory_figures(tmp_path):
    # a CPU smoke run has no allocator figures: no empty picture
    df = to_frame(_rows({"ours": (math.nan, 1.0), "eager": (math.nan, 2.0)}))
    assert pareto.draw(df, [POINT], title="t", folder=tmp_path) == []
    assert not (tmp_path / "pareto.png").exists()


@pytest.mark.interpreter
def test_budget_sweep_times_ours_over_budgets_and_only_there(tmp_path):
    runner = CliRunner()
    args = ["bench", "--kernel", "flce", "--smoke", "--provider", "eager"]
    budget = runner.invoke(app, [*args, "--provider", "ours_budget_64", "--sweep", "budget", "--out", tmp_path / "b"])
    assert budget.exit_code == 0, budget.output
    (run,) = (tmp_path / "b").iterdir()
    timed = read_records(run / "records.csv").query("metric == 'time_ms'")
    assert set(timed["provider"]) == {"eager", "ours_budget_64"}
    assert len(timed) == 4  # two smoke heads x two providers
    # each row carries its provider's settings as data
    got = {
        p: settings_of(s if isinstance(s, str) else "")
        for p, s in zip(timed["provider"], timed["settings"], strict=True)
    }
    assert got == {"ours_budget_64": {"chunk_mib": 64}, "eager": {}}
    # the budget providers stay out of another sweep unless named
    registry = default_registry()
    spec = registry.kernels["flce"].bench
    heads = bench_command._providers(registry, spec, "flce", None, "heads")
    assert not any(p.name.startswith("ours_budget_") for p in heads)
    assert {p.name for p in bench_command._providers(registry, spec, "flce", None, "budget")} >= set(
        flce_bench.BUDGET_PROVIDERS
    )

"""Plots that do not mislead: bars compared by length start at zero on a linear axis, and no
plot or panel is drawn without data (a CPU smoke run has no memory figures)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from run_fixtures import write_run

from ligerbench.bench import plots
from ligerbench.bench.spec import SweepPoint
from ligerbench.report import build
from ligerbench.suites.ce.axes import case as ce_case


def _capture_axes(monkeypatch) -> list:
    axes = []
    real = plt.subplots

    def subplots(*args, **kwargs):
        fig, ax = real(*args, **kwargs)
        axes.append(ax)
        return fig, ax

    monkeypatch.setattr(plt, "subplots", subplots)
    return axes


def test_report_checks_bars_start_at_zero_on_a_linear_axis(tmp_path, monkeypatch):
    axes = _capture_axes(monkeypatch)
    run = write_run(tmp_path / "run", check="fail")  # one check ~3000x over its limit
    build.build(run)
    (ax,) = [a for a in axes if "checks against float64" in a.get_title()]
    assert ax.get_xscale() == "linear" and ax.get_xlim()[0] == 0
    assert any("off scale" in t.get_text() for t in ax.texts)  # the clipped bar says its value


def _smoke_rows(points) -> pd.DataFrame:
    rows = []
    for pt in points:
        for provider, ms in (("ours", 1.0), ("eager", 2.0)):
            for metric, value in (("time_ms", ms), ("ratio_time_ms", ms), ("extra_mib", float("nan"))):
                rows.append({"provider": provider, "case": pt.case.id, "quantity": "full", "metric": metric,
                             "value": value, "verdict": "not_a_measurement"})  # fmt: skip
    rows += [{**r, "metric": "ratio_extra_mib"} for r in rows if r["metric"] == "extra_mib"]
    return pd.DataFrame(rows)


def test_bench_plots_leave_out_what_has_no_data(tmp_path, monkeypatch):
    axes = _capture_axes(monkeypatch)
    points = [SweepPoint(case=ce_case(n=8, v=v, dtype="fp32", reduction="mean"), x=v, label=str(v))
              for v in (64, 128)]  # fmt: skip
    drawn = plots.draw(_smoke_rows(points), points, sweep="vocab", mode="full", title="t", folder=tmp_path)
    assert [p.name for p in drawn] == ["time_vs_vocab.png", "ratios.png"]  # no empty memory plot
    assert not (tmp_path / "memory_vs_vocab.png").exists()
    (ratio_axes,) = [a for a in axes if hasattr(a, "shape")]  # ratios.png: a grid of panels
    assert ratio_axes.shape == (1, 1) and "time" in ratio_axes[0][0].get_ylabel()  # no empty memory panel

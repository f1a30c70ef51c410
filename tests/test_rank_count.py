"""The rank-count suite and the RL ratio (ligerbench/verify/invariance.py): the ratio's bands on
known log-probs, the counts a case is compared at, a planted rank-dependent provider seen and a
rank-invariant one not, and the suite on our vocab-parallel cross entropy over simulated ranks."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import pandas as pd
import torch

from ligerbench.problems import Outcome
from ligerbench.rowwise import Ranks, Rows, count_of, take_fields
from ligerbench.verify.invariance import batch_invariance, rank_count, ratio_off
from ligerbench.verify.summary import same_row_figures


def test_the_ratio_counts_tokens_outside_each_band_and_only_counted_ones():
    a = torch.zeros(5)
    b = torch.tensor([0.0, 5e-4, 2e-3, 0.2, math.nan])  # ratios 1, ~0.9995, ~0.998, ~0.82, NaN
    off = ratio_off([(a, b, None)])
    assert off == {"ratio_off_0.1pct": (3, 5), "ratio_off_10pct": (2, 5)}  # a NaN is outside every band
    counted = torch.tensor([True, True, True, False, False])
    assert ratio_off([(a, b, counted)]) == {"ratio_off_0.1pct": (1, 3), "ratio_off_10pct": (0, 3)}


@dataclass
class _P:
    x: torch.Tensor
    world: int = 1
    replicas: int = 1


def _split(p: _P, count: int) -> _P:
    return dataclasses.replace(p, world=count, replicas=2 if count == 1 else 1)  # replicas as on real ranks


def _invariant(p: _P) -> Outcome:
    logp = p.x.expand(p.world * p.replicas, *p.x.shape)  # every rank holds it whole
    return Outcome(values={"logp": logp, "grad": torch.cat([p.x * 2] * p.replicas)})


def _by_world(p: _P) -> Outcome:
    # a planted bug: the log-probs move with the number of ranks (2e-3 a rank: a ratio ~0.998 off 1)
    out = _invariant(p)
    return Outcome(values={**out.values, "logp": out.values["logp"] - 2e-3 * p.world})


RANKS = Ranks(split=_split, replicas=lambda p: p.replicas, world=lambda p: p.world, whole=("logp",),
              sharded=("grad",))  # fmt: skip
ROWS = Rows(take=take_fields("x"), count=count_of("x"), per_row=("logp",), log_prob="logp",
            counted=lambda p: p.x > -10, ranks=RANKS)  # fmt: skip


def test_rank_count_compares_the_counts_below_the_cases_that_divide_it():
    p = _P(torch.randn(6), world=4)
    names = {n for n, _ in rank_count(_invariant, p, _invariant(p), RANKS, ROWS)}
    assert {n.split(":")[0] for n in names} == {"ranks1", "ranks2"}
    three = _P(torch.randn(6), world=3)
    assert {n.split(":")[0] for n, _ in rank_count(_invariant, three, _invariant(three), RANKS, ROWS)} == {"ranks1"}
    one = _P(torch.randn(6), world=1)
    assert rank_count(_invariant, one, _invariant(one), RANKS, ROWS) == []


def test_rank_count_sees_a_rank_dependent_provider_and_not_an_invariant_one():
    p = _P(torch.randn(6), world=2)
    good = dict(rank_count(_invariant, p, _invariant(p), RANKS, ROWS))
    assert {f["value"] for f in good.values()} == {0.0} and {f["verdict"] for f in good.values()} == {"info"}
    bad = dict(rank_count(_by_world, p, _by_world(p), RANKS, ROWS))
    assert bad["ranks1:logp"]["value"] > 0 and bad["ranks1:grad"]["value"] == 0
    assert bad["ranks1:ratio_off_0.1pct"]["value"] == 1.0 and bad["ranks1:ratio_off_10pct"]["value"] == 0.0
    assert "6 of 6 tokens" in bad["ranks1:ratio_off_0.1pct"]["message"]  # rank 0's tokens, once each
    promised = dict(rank_count(_by_world, p, _by_world(p), RANKS, ROWS, promised=True))
    assert promised["ranks1:logp"]["verdict"] == "fail" and promised["ranks1:ratio_off_0.1pct"]["verdict"] == "fail"


def _rows_by_count(p: _P) -> Outcome:
    # a planted bug: a row's log-prob moves with the rows in the batch
    return Outcome(values={"logp": p.x - 2e-3 * p.x.shape[0]})


def test_batch_invariance_reports_the_ratio_of_the_log_prob_it_names():
    p = _P(torch.randn(6))
    rows = dataclasses.replace(ROWS, promised=("logp",))
    good = dict(batch_invariance(lambda q: Outcome(values={"logp": q.x * 1.0}), p, Outcome(values={"logp": p.x}),
                                 rows, ours=True))  # fmt: skip
    assert good["ratio_off_0.1pct"]["value"] == 0 and good["ratio_off_0.1pct"]["verdict"] == "pass"
    bad = dict(batch_invariance(_rows_by_count, p, _rows_by_count(p), rows, ours=True))
    assert bad["ratio_off_0.1pct"]["verdict"] == "fail" and 0 < bad["ratio_off_0.1pct"]["value"] < 1
    peer = dict(batch_invariance(_rows_by_count, p, _rows_by_count(p), rows, ours=False))
    assert peer["ratio_off_0.1pct"]["verdict"] == "info"


def test_the_summary_has_a_row_per_provider_and_comparison():
    records = pd.DataFrame([
        dict(suite="rank_count", provider="ours", case="c", quantity="ranks1:logp", metric="ulp_max", value=3.0,
             verdict="info"),
        dict(suite="rank_count", provider="ours", case="c", quantity="ranks1:ratio_off_0.1pct", metric="ratio_off",
             value=0.25, verdict="info"),
        dict(suite="rank_count", provider="ours", case="c", quantity="ranks1:ratio_off_10pct", metric="ratio_off",
             value=0.0, verdict="info"),
        dict(suite="batch_invariance", provider="peer", case="c", quantity="alone:logp", metric="ulp_max", value=1.0,
             verdict="info"),
        dict(suite="correctness", provider="ours", case="c", quantity="logp", metric="rel_l2", value=1e-7,
             verdict="pass"),
    ])  # fmt: skip
    figures = same_row_figures(records).set_index(["provider", "between"])
    assert len(figures) == 2
    ours = figures.loc[("ours", "vocabulary over fewer ranks")]
    assert ours["largest ulp"] == 3.0 and ours["tokens off [0.999, 1.001]"] == "25%"
    assert figures.loc[("peer", "batches of the same rows")]["tokens off [0.9, 1.1]"] == "-"


def test_vp_ce_over_one_simulated_rank_is_the_same_global_problem():
    from ligerbench.registry import Registry
    from ligerbench.suites import vp_ce

    registry = Registry()
    vp_ce.register(registry)
    spec = registry.kernels["vp_ce"]
    case = next(c for c in spec.grid("quick", "cpu") if c.id == vp_ce.RANK_COUNT_CASES[0])
    problem = spec.make_problem(case, 0, torch.device("cpu"))
    fn = registry.provider("vp_ce", "ours").load()
    first = spec.run(fn, problem)
    records = dict(rank_count(lambda q: spec.run(fn, q), problem, first, spec.rows.ranks, spec.rows))
    assert set(records) == {"ranks1:loss", "ranks1:z_loss", "ranks1:grad_logits"}
    # the merge of two shards sums in another order than one rank's loop: a few ulp, never more
    assert all(0 <= f["value"] <= 4 and f["verdict"] == "info" for f in records.values()), records
    # a planted second division by the world size is right on one rank and halves the loss on two
    bug = registry.provider("vp_ce", "mutant_vp_world_division").load()
    first = spec.run(bug, problem)
    records = dict(rank_count(lambda q: spec.run(bug, q), problem, first, spec.rows.ranks, spec.rows))
    assert records["ranks1:loss"]["value"] > 1e6, records


def test_a_run_of_the_rank_count_suite_alone_reports_and_does_not_pass(tmp_path):
    # every row it writes is `info` (a distance no limit applies to): a run that judged nothing
    # says so and exits 1, where it once printed "PASSED: 1 case, 0 checks"
    from typer.testing import CliRunner

    from ligerbench.cli import app

    out = CliRunner().invoke(app, ["verify", "--kernel", "vp_ce", "--suite", "rank_count", "--preset", "quick",
                                   "--device", "cpu", "--provider", "ours", "--out", str(tmp_path)])  # fmt: skip
    assert out.exit_code == 1, out.output
    said = " ".join(out.output.split())
    assert "PASSED" not in said and "reported as info, never judged" in said and "it judged nothing" in said
    (run,) = tmp_path.iterdir()
    rows = pd.read_csv(run / "records.csv")
    assert len(rows) and set(rows["verdict"]) == {"info"}
    assert "judged nothing" in (run / "summary.md").read_text()

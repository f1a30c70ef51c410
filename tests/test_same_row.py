"""The determinism and batch-invariance checks (ligerbench/verify/invariance.py): the ulp measure
on known floats, and each check failing on a planted difference and passing without one."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch

from ligerbench.problems import Outcome
from ligerbench.rowwise import Rows, count_of, take_fields
from ligerbench.verify.invariance import batch_invariance, determinism, ulp_distance


def test_ulp_distance_counts_floats_between():
    one = torch.tensor([1.0])
    assert ulp_distance(one, one.clone()) == 0
    assert ulp_distance(one, torch.nextafter(one, torch.tensor([2.0]))) == 1
    # across zero: the smallest negative and positive subnormals are two ulp apart, 0 and -0 none
    tiny = torch.tensor([1e-45])
    assert ulp_distance(tiny, -tiny) == 2
    assert ulp_distance(torch.tensor([0.0]), torch.tensor([-0.0])) == 0
    b = torch.tensor([1.0], dtype=torch.bfloat16)
    assert ulp_distance(b, torch.tensor([1.0078125], dtype=torch.bfloat16)) == 1
    assert ulp_distance(torch.tensor([math.nan]), torch.tensor([math.nan])) == 0
    assert math.isinf(ulp_distance(torch.tensor([math.nan]), one))
    assert math.isinf(ulp_distance(one, torch.ones(2)))


@dataclass
class _P:
    x: torch.Tensor


def _rowwise(p: _P) -> Outcome:
    return Outcome(values={"y": p.x * 3.0, "total": p.x.sum(0)})


def _tiled(p: _P) -> Outcome:
    # a planted bug: the rows' result depends on how many rows there are
    return Outcome(values={"y": p.x * 3.0 + (1e-6 if p.x.shape[0] > 2 else 0.0), "total": p.x.sum(0)})


ROWS = Rows(take=take_fields("x"), count=count_of("x"), per_row=("y",), promised=("y",), shared=("total",))


def test_batch_invariance_passes_a_row_wise_provider_and_fails_a_tiled_one():
    p = _P(torch.randn(6, 5))
    good = batch_invariance(_rowwise, p, _rowwise(p), ROWS, ours=True)
    assert {f["verdict"] for n, f in good if not n.endswith(":total")} == {"pass"}
    bad = dict(batch_invariance(_tiled, p, _tiled(p), ROWS, ours=True))
    assert bad["alone:y"]["verdict"] == "fail" and bad["alone:y"]["value"] > 0
    assert bad["position:y"]["verdict"] == "pass"  # the same six rows reordered
    # a peer, or a quantity nobody promises, is reported, never failed
    peer = dict(batch_invariance(_tiled, p, _tiled(p), ROWS, ours=False))
    assert peer["alone:y"]["verdict"] == "info" and peer["alone:y"]["value"] > 0
    assert peer["position:total"]["verdict"] == "info"


def test_determinism_fails_a_provider_whose_bits_move():
    p = _P(torch.randn(4, 3))
    calls = iter(range(10))

    def moving(q: _P) -> Outcome:
        return Outcome(values={"y": q.x + (1e-6 if next(calls) % 2 else 0.0)})

    first = moving(p)
    rows = dict(determinism(lambda: moving(p), first, promised=True))
    assert rows["y"]["verdict"] == "fail" and rows["y"]["value"] > 0
    same = dict(determinism(lambda: _rowwise(p), _rowwise(p), promised=True))
    assert same["y"]["verdict"] == "pass" and same["y"]["value"] == 0


def test_the_last_rows_batch_compares_the_tail_alone():
    from ligerbench.rowwise import LAST

    p = _P(torch.randn(6, 5))
    rows = dict(batch_invariance(_tiled, p, _tiled(p), ROWS, ours=True, batches=LAST))
    assert set(rows) == {"last_rows:y"}
    assert rows["last_rows:y"]["verdict"] == "fail"  # two rows alone miss the planted offset
    assert dict(batch_invariance(_rowwise, p, _rowwise(p), ROWS, ours=True, batches=LAST))["last_rows:y"]["value"] == 0


def test_rows_past_int32_are_only_in_the_past_int32_suite_of_a_gpu_full_grid():
    from ligerbench.builtin import default_registry

    registry = default_registry()
    for kernel in ("ce", "lp"):
        suites = {s.name: s for s in registry.suites_for(kernel)}
        big = [c for c in registry.cases_of(suites["past_int32"], "full", "cuda")]
        assert [(c.n, c.v) for c in big] == [(32768, 128256)]
        assert big[0].n * big[0].v > 2**31
        for name in ("correctness", "gradients", "contracts"):
            assert big[0].id not in {c.id for c in registry.cases_of(suites[name], "full", "cuda")}
        assert registry.cases_of(suites["past_int32"], "quick", "cpu") == []


def test_a_batch_that_raises_is_an_error_and_the_other_batches_are_still_measured():
    # verl's fused head raises on one token: the `alone` batch is its error, the rest are figures
    def no_single_row(p: _P) -> Outcome:
        if p.x.shape[0] == 1:
            raise RuntimeError("one row")
        return _rowwise(p)

    p = _P(torch.randn(6, 5))
    rows = dict(batch_invariance(no_single_row, p, no_single_row(p), ROWS, ours=False, describe=str))
    assert rows["alone:y"]["verdict"] == "error" and "one row" in rows["alone:y"]["message"]
    assert rows["smaller:y"]["verdict"] == "info" and rows["smaller:y"]["value"] == 0
    assert rows["position:total"]["verdict"] == "info"
    try:  # without a describer the call's exception is the caller's
        batch_invariance(no_single_row, p, no_single_row(p), ROWS, ours=False)
    except RuntimeError:
        pass
    else:
        raise AssertionError("the exception was swallowed")


@dataclass
class _VP:
    """A vocab-parallel problem's shape: the global problem in `base`, a flat mesh of two ranks."""

    base: _P
    world: int = 2
    mesh: object = None


def _per_rank(fn):
    # each rank returns the rows whole (stacked on dim 0, rows on dim 1) and its half of the
    # gradient's columns (rows on dim 0), as the vocab-parallel kernels' outcomes hold them
    def run(p: _VP) -> Outcome:
        y = fn(p.base).values["y"]
        return Outcome(values={"loss": torch.stack([y[:, 0], y[:, 0]]), "grad": y, "total": y.sum(0)})

    return run


def test_a_vocab_parallel_batch_is_cut_from_the_global_problem_and_compared_on_its_row_dims():
    from ligerbench.suites.vp_ce.mesh import Mesh, vocab_parallel_rows

    rows = vocab_parallel_rows(whole=("loss",), sharded=("grad", "total"), base=ROWS, sharded_rows=("grad",))
    assert rows.per_row == ("loss", "grad") and rows.shared == ("total",) and rows.row_dim("loss") == 1
    p = _VP(_P(torch.randn(6, 5)), mesh=Mesh(tp=2))
    good = dict(batch_invariance(_per_rank(_rowwise), p, _per_rank(_rowwise)(p), rows, ours=False))
    assert {n: f["value"] for n, f in good.items() if not n.endswith(":total")} == dict.fromkeys(
        (f"{b}:{q}" for b in ("alone", "position", "smaller", "padded") for q in ("loss", "grad")), 0.0
    )
    bad = dict(batch_invariance(_per_rank(_tiled), p, _per_rank(_tiled)(p), rows, ours=False))
    assert bad["alone:loss"]["value"] > 0 and bad["alone:grad"]["value"] > 0 and bad["position:loss"]["value"] == 0
    # a mesh's replicas lie on dim 0: no batch is cut there (an error row, the run goes on)
    with_replicas = _VP(p.base, mesh=Mesh(tp=2, dp=2))
    with pytest.raises(ValueError, match="flat mesh"):
        rows.take(with_replicas, torch.tensor([0]))

"""The split step (suites/common/split_step.py): a batch cut into data-parallel ranks or micro-batches,
with uneven, one-token and empty pieces. In float64 (no kernel: the harness's own recipe), the
pieces' summed gradients are the one batch's for `ce`, `flce` and every `grpo` normaliser that
splits; a trainer that normalises each piece by its own count gives Megatron-LM #7452's
fractions; and each kernel's grid holds the pieces its spreads promise."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ligerbench.builtin import default_registry
from ligerbench.suites.ce import spec as ce_spec
from ligerbench.suites.ce.axes import case as ce_case
from ligerbench.suites.common import split_step
from ligerbench.suites.flce import spec as flce_spec
from ligerbench.suites.flce.axes import case as flce_case
from ligerbench.suites.grpo import spec as grpo_spec
from ligerbench.suites.grpo.axes import case as grpo_case
from ligerbench.tolerance import rel_error

CPU = torch.device("cpu")
SPLITS = [s for s in split_step.SPLITS if s != "none"]
SPREADS = [s for s in split_step.SPREADS if s != "drawn"]
# In one process a split's kind and count are all that differ; these two hold both kinds and both
# counts (the kind changes grpo's per-token recipe: num_items over the world, or not)
TWO_SPLITS = ["accum2", "dp4"]
EXACT = 1e-12  # float64 sums of the same terms in another order


def _f64(problem, *names):
    return dataclasses.replace(problem, **{k: None if getattr(problem, k) is None else getattr(problem, k).double()
                                           for k in names})  # fmt: skip


def _ce(split, spread, **kw):
    problem = ce_spec.make_problem(ce_case(n=16, v=7, split=split, spread=spread, **kw), 0, CPU)
    return _f64(problem, "logits", "weight", "token_weight", "upstream")


def _flce(split, spread, **kw):
    problem = flce_spec.make_problem(flce_case(n=12, v=9, h=5, split=split, spread=spread, **kw), 0, CPU)
    return _f64(problem, "hidden", "weight", "bias", "class_weight", "token_weight", "upstream")


def _grpo(split, spread, **kw):
    problem = grpo_spec.make_problem(grpo_case(b=4, t=6, h=16, v=64, split=split, spread=spread, **kw), 0, CPU)
    return _f64(problem, "hidden", "weight")


def _valid_per_piece(problem) -> list[int]:
    counted = problem.target.reshape(-1) != problem.ignore_index
    return [int(counted[p].sum()) for p in split_step.token_pieces(counted.numel(), problem.split)]


# every split with every spread: the pieces hold what the spread says, whatever the split
@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("spread", SPREADS)
def test_each_spread_puts_the_valid_tokens_where_it_says(split, spread):
    per_piece = _valid_per_piece(_ce(split, spread))
    assert len(per_piece) == split_step.Split.of(split).pieces
    if spread == "uneven":
        assert per_piece[-1] == 1 and min(per_piece[:-1]) > 1
    elif spread == "one_token":
        assert sum(per_piece) == 1
    else:
        assert per_piece[0] == 0 and sum(per_piece[1:]) > 2


# mean: the step's denominator; sum: none. Options: plain, and every term at once (class weights
# make the denominator a weight sum; token weights, smoothing, softcap and z-loss ride along)
@pytest.mark.parametrize("split", TWO_SPLITS)
@pytest.mark.parametrize("spread", SPREADS)
@pytest.mark.parametrize("reduction, upstream, option", [("mean", "ones", "plain"), ("mean", "grad_scaler", "all"),
                                                         ("sum", "random", "all")])  # fmt: skip
def test_the_pieces_sum_to_the_one_batch_gradient(split, spread, reduction, upstream, option):
    ce = _ce(split, spread, reduction=reduction, upstream=upstream, option=option)
    out = ce_spec.run_ce(ce_spec.ce_torch, ce)
    assert rel_error(out.values["split_grad_logits"], out.values["grad_logits"]) < EXACT
    flce = _flce(split, spread, reduction=reduction, upstream=upstream, option=option, bias=True)
    out = flce_spec.run_flce(flce_spec.flce_torch, flce)
    for name in ("hidden", "weight", "bias"):
        assert rel_error(out.values[f"split_grad_{name}"], out.values[f"grad_{name}"]) < EXACT, name


# the normalisers that split (bnpo is a token mean of each piece by definition: tests/test_grpo.py)
@pytest.mark.parametrize("split", TWO_SPLITS)
@pytest.mark.parametrize("spread", [*SPREADS, "drawn"])
@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo", "cispo"])
def test_every_grpo_normaliser_splits_over_uneven_one_token_and_empty_pieces(split, spread, loss_type):
    if spread == "uneven" and split == "dp4":
        pytest.skip("4 uneven pieces need 5 sequences; the grid's uneven cases split in 2")
    problem = _grpo(split, spread, loss_type=loss_type)
    out = grpo_spec.run_grpo(grpo_spec.truth_loss, problem)
    for name in ("hidden", "weight"):
        assert out.values[f"grad_{name}"].abs().max() > 0
        assert rel_error(out.values[f"split_grad_{name}"], out.values[f"grad_{name}"]) < EXACT, name


# Megatron-LM #7452 / #7513: one valid token, each piece its own mean: 1/2 of the gradient at
# CP=2, 1/4 at CP=4; the same for micro-batches averaged (Liger-Kernel #1082, TRL #6024)
@pytest.mark.parametrize("split, fraction", [("dp2", 1 / 2), ("dp4", 1 / 4), ("accum2", 1 / 2), ("accum4", 1 / 4)])
def test_a_trainer_normalising_each_piece_by_its_own_count_gives_the_fields_fractions(split, fraction):
    problem = _ce(split, "one_token")
    out = ce_spec.run_ce(split_step.LocalNormaliser(ce_spec.ce_torch), problem)
    assert rel_error(out.values["split_grad_logits"], fraction * out.values["grad_logits"]) < EXACT
    problem = _grpo(split, "one_token", loss_type="dapo")
    out = grpo_spec.run_grpo(split_step.LocalNormaliser(grpo_spec.truth_loss), problem)
    assert rel_error(out.values["split_grad_weight"], fraction * out.values["grad_weight"]) < EXACT


def test_per_sequence_normalisers_taken_locally_are_wrong_on_pieces_of_unequal_sequences():
    problem = _grpo("accum2", "uneven", loss_type="grpo")
    assert [p.stop - p.start for p in grpo_spec.piece_rows(problem.split, problem.spread, 4)] == [3, 1]
    out = grpo_spec.run_grpo(split_step.LocalNormaliser(grpo_spec.truth_loss), problem)
    assert rel_error(out.values["split_grad_weight"], out.values["grad_weight"]) > 0.1
    even = _grpo("accum2", "drawn", loss_type="grpo")  # equal pieces: the local mean is right
    out = grpo_spec.run_grpo(split_step.LocalNormaliser(grpo_spec.truth_loss), even)
    assert rel_error(out.values["split_grad_weight"], out.values["grad_weight"]) < EXACT


@pytest.mark.parametrize("kernel", ["ce", "flce", "grpo"])
def test_every_split_and_spread_is_in_the_quick_grid_and_each_dp_split_on_its_ranks(kernel):
    spec = default_registry().kernels[kernel]
    cases = spec.grid("quick", "cpu")
    split_cases = [c for c in cases if c.split != "none"]
    assert {c.split for c in split_cases} == set(SPLITS)
    assert {c.spread for c in split_cases} >= set(SPREADS)
    assert {spec.ranks(c) for c in split_cases} == {2, 4, None}
    assert all(spec.ranks(c) == split_step.Split.of(c.split).pieces for c in split_cases if c.split.startswith("dp"))
    if kernel != "grpo":  # the per-token kernels' split cases stay tiny (CI runs them through the interpreter)
        assert all(c.n <= 32 and c.v <= 512 for c in split_cases)
        assert {c.reduction for c in split_cases} == {"mean", "sum"}


def test_a_case_whose_pieces_cannot_hold_its_spread_is_refused():
    with pytest.raises(ValueError, match="reduces its tokens"):
        ce_spec.make_problem(ce_case(n=16, v=7, reduction="none", upstream="ones", split="dp2"), 0, CPU)
    with pytest.raises(ValueError, match="needs a split"):
        ce_spec.make_problem(ce_case(n=16, v=7, spread="one_token"), 0, CPU)
    for spread in ("uneven", "empty_piece"):  # every token ignored: no full piece beside the short or empty one
        with pytest.raises(ValueError, match="valid tokens per piece"):
            ce_spec.make_problem(ce_case(n=16, v=7, split="dp2", spread=spread, ignore_pattern="all"), 0, CPU)
    with pytest.raises(ValueError, match="uneven pieces"):
        grpo_spec.make_problem(grpo_case(b=4, t=6, h=16, v=64, split="dp4", spread="uneven"), 0, CPU)

"""Inputs reach the provider as the case built them (layouts), the contracts suite sees writes
anywhere in the caller's storage (padding included), upstream gradients and ignore patterns are
never degenerate, and the grids' covering designs really hold every pair of axis values."""

from __future__ import annotations

import itertools

import pytest
import torch

from ligerbench import cases as cases_mod
from ligerbench import problems as common
from ligerbench.builtin import default_registry
from ligerbench.cases import UPSTREAMS
from ligerbench.registry import Provider
from ligerbench.suites.ce import axes as ce_axes
from ligerbench.suites.ce import grid as ce_grid
from ligerbench.suites.ce import spec as ce_spec
from ligerbench.suites.ce.axes import case as ce_case
from ligerbench.suites.common.covering import all_pairs, pairs_of, required_pairs
from ligerbench.suites.flce import axes as flce_axes
from ligerbench.suites.flce import grid as flce_grid
from ligerbench.suites.flce import spec as flce_spec
from ligerbench.suites.flce.axes import case as flce_case
from ligerbench.verify.engine import _compare

CPU = torch.device("cpu")
CE = ce_case(n=16, v=100, reduction="none", upstream="random")
FLCE = flce_case(n=12, v=64, h=8, reduction="none", upstream="random")
PROVIDER = Provider(name="p", kernel="ce", description="", load=lambda: None)


def _eager_ce(logits, target, **opts):
    return ce_spec.ce_torch(logits, target, **opts)


# ----------------------------------------------------------------------------- layouts


@pytest.mark.parametrize("layout", ce_axes.LAYOUT.values)  # every layout a real caller hands over
def test_ce_case_builds_its_layout_and_the_provider_receives_it(layout):
    case = CE.replace(layout=layout)
    problem = ce_spec.make_problem(case, 0, CPU)
    x = problem.logits
    expect = {
        "2d": lambda: x.dim() == 2 and x.is_contiguous(),
        "3d": lambda: x.dim() == 3 and x.is_contiguous() and x.shape[0] > 1,
        "padded_vocab": lambda: x.dim() == 3 and x.stride(1) > x.shape[-1] and x.stride(1) % cases_mod.VOCAB_PAD == 0,
        "transposed": lambda: x.dim() == 2 and x.stride() == (1, x.shape[0]),
    }[layout]
    assert expect(), (layout, x.shape, x.stride())
    assert tuple(problem.target.shape) == tuple(x.shape[:-1])
    outcome = ce_spec.run_ce(_eager_ce, problem)
    assert outcome.received["logits"] == common.layout_of(x)
    assert _compare("input_layout", case, PROVIDER, outcome, None, None)["verdict"] == "pass"
    assert outcome.values["grad_logits"].shape == x.shape
    assert not outcome.input_mutated


@pytest.mark.parametrize("layout", flce_axes.LAYOUT.values)
def test_flce_case_builds_its_layout_and_the_provider_receives_it(layout):
    case = FLCE.replace(layout=layout)
    problem = flce_spec.make_problem(case, 0, CPU)
    h = problem.hidden
    w = problem.weight
    if layout == "kept_slice":
        assert h.dim() == 3 and not h.is_contiguous() and h.storage_offset() > 0
    elif layout == "column_major":
        assert h.dim() == 2 and h.stride() == (1, h.shape[0])
    else:
        assert h.dim() == (3 if layout == "3d" else 2) and h.is_contiguous()
    assert w.stride() == ((1, w.shape[0]) if layout == "weight_column_major" else (w.shape[1], 1))
    outcome = flce_spec.run_flce(flce_spec.flce_torch, problem)
    assert outcome.received["hidden"] == common.layout_of(h)
    assert outcome.received["weight"] == common.layout_of(w)
    assert _compare("input_layout", case, PROVIDER, outcome, None, None)["verdict"] == "pass"


@pytest.mark.parametrize(
    "layout",
    ["padded_vocab", "transposed"],  # the layouts a dense copy changes (3d stays contiguous)
)
def test_a_runner_that_hands_over_a_dense_copy_fails_input_layout(layout, monkeypatch):
    """The check can fail: the old runner's .detach().clone()-style densifying copy."""

    def densifying(t, *, requires_grad):
        flat, _ = common.fresh_view(t, requires_grad=False)
        return flat, t.detach().contiguous().clone().requires_grad_(requires_grad)

    monkeypatch.setattr(ce_spec, "fresh_view", densifying)
    case = CE.replace(layout=layout)
    outcome = ce_spec.run_ce(_eager_ce, ce_spec.make_problem(case, 0, CPU))
    fields = _compare("input_layout", case, PROVIDER, outcome, None, None)
    assert fields["verdict"] == "fail" and "logits: built" in fields["message"], fields


def test_a_callable_never_called_fails_input_layout():
    outcome = common.Outcome(values={}, built={"logits": ((2, 3), (3, 1), 0)}, received=None)
    assert _compare("input_layout", CE, PROVIDER, outcome, None, None)["verdict"] == "fail"


def test_kept_slice_of_flce_reaches_the_provider_with_its_offset(monkeypatch):
    def densifying(t, *, requires_grad):
        flat, _ = common.fresh_view(t, requires_grad=False)
        return flat, t.detach().contiguous().requires_grad_(requires_grad)

    monkeypatch.setattr(flce_spec, "fresh_view", densifying)
    case = FLCE.replace(layout="kept_slice")
    outcome = flce_spec.run_flce(flce_spec.flce_torch, flce_spec.make_problem(case, 0, CPU))
    assert _compare("input_layout", case, PROVIDER, outcome, None, None)["verdict"] == "fail"


def _writes_padding(logits, target, **opts):
    """Correct loss, but writes one padding column of the caller's storage (beyond the slice)."""
    wide = torch.as_strided(logits.detach(), (*logits.shape[:-1], logits.stride(-2)), logits.stride())
    wide[..., -1] = 0.0
    return ce_spec.ce_torch(logits, target, **opts)


def test_contracts_see_a_write_into_the_padding_columns():
    problem = ce_spec.make_problem(CE.replace(layout="padded_vocab"), 0, CPU)
    assert ce_spec.run_ce(_writes_padding, problem).input_mutated
    assert not ce_spec.run_ce(_eager_ce, problem).input_mutated
    # the case's own tensor is never written: each run works on a copy of the whole storage
    again = ce_spec.make_problem(CE.replace(layout="padded_vocab"), 0, CPU)
    assert common.same_bits(problem.logits, again.logits)


def test_contracts_see_a_write_into_the_rows_before_a_kept_slice():
    def writes_earlier_rows(hidden, weight, target, **opts):
        whole = torch.as_strided(hidden.detach(), (hidden.stride(0) * hidden.shape[0],), (1,), 0)
        whole[0] = 1234.0  # the first row before the kept slice
        return flce_spec.flce_torch(hidden, weight, target, **opts)

    problem = flce_spec.make_problem(FLCE.replace(layout="kept_slice"), 0, CPU)
    assert flce_spec.run_flce(writes_earlier_rows, problem).input_mutated
    assert not flce_spec.run_flce(flce_spec.flce_torch, problem).input_mutated


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_reference_of_a_3d_layout_is_the_2d_reference_reshaped(reduction):
    up = {"none": "random", "mean": "ones", "sum": "random"}[reduction]
    flat = ce_spec.make_problem(CE.replace(reduction=reduction, upstream=up, option="all"), 0, CPU)
    three = ce_spec.CEProblem(**{**flat.__dict__})
    b, t = cases_mod.batch_split(CE.n)
    three.logits = flat.logits.reshape(b, t, -1)
    three.target = flat.target.reshape(b, t)
    three.token_weight = flat.token_weight.reshape(b, t)
    three.upstream = flat.upstream.reshape(b, t) if reduction == "none" else flat.upstream
    r2, r3 = ce_spec.reference(flat), ce_spec.reference(three)
    assert torch.equal(r3.values["loss"].reshape(-1), r2.values["loss"].reshape(-1))
    assert torch.equal(r3.values["grad_logits"].reshape(CE.n, -1), r2.values["grad_logits"])


# ----------------------------------------------------------------------------- degenerate draws


@pytest.mark.parametrize("reduction, upstream", [(r, u) for r, ups in UPSTREAMS.items() for u in ups])
def test_upstream_is_never_degenerate(reduction, upstream):
    """Random draws are never (all) near 1, and masked rows hold exact zeros and live rows."""
    for seed in range(200):
        for n in (1, 2, 16):
            case = CE.replace(n=n, reduction=reduction, upstream=upstream)
            up = cases_mod.draw_upstream(case, (n,), cases_mod.generator_for(case, seed))
            if upstream == "random":
                live = up.reshape(-1)
                assert ((live - 1).abs() >= cases_mod.NEAR_ONE).any(), (seed, n, up)
            if upstream == "masked" and n >= 2:
                assert (up == 0).any() and (up != 0).any(), (seed, n, up)
            if upstream == "masked" and n >= 3:
                assert (up[n // 3 : 2 * n // 3] == 0).all()  # the long run
    assert float(cases_mod.draw_upstream(CE.replace(reduction="mean", upstream="accum"), (), None)) == 0.125
    assert float(cases_mod.draw_upstream(CE.replace(reduction="sum", upstream="grad_scaler"), (), None)) == 65536


def test_random_ignore_patterns_never_ignore_everything_or_nothing():
    for pattern in cases_mod.RANDOM_PATTERNS:
        for seed in range(200):
            for n in (1, 2, 5):
                case = CE.replace(n=n, ignore_pattern=pattern)
                m = cases_mod.draw_ignored(case, n, cases_mod.generator_for(case, seed))
                assert (~m).any(), (pattern, seed, n)
                assert n < 2 or m.any(), (pattern, seed, n)
    case = CE.replace(n=1, ignore_pattern="all")  # a fixed pattern is what it says
    assert cases_mod.draw_ignored(case, 1, cases_mod.generator_for(case, 0)).all()


def test_an_impossible_draw_is_refused_loudly():
    with pytest.raises(ValueError, match="non-degenerate"):
        cases_mod.redraw(lambda: torch.ones(1), lambda t: False, CE)


def test_an_upstream_not_made_for_the_reduction_is_refused():
    with pytest.raises(ValueError, match="masked"):
        cases_mod.draw_upstream(CE.replace(reduction="mean", upstream="masked"), (), torch.Generator())


# ----------------------------------------------------------------------------- covering designs


def test_all_pairs_covers_every_pair_and_is_deterministic():
    axes = {"a": (1, 2, 3), "b": ("x", "y"), "c": (True, False), "d": tuple(range(5))}
    rows = all_pairs(axes)
    assert rows == all_pairs(axes)
    covered = set().union(*(pairs_of(r, axes) for r in rows))
    assert covered == required_pairs(axes, lambda r: True)
    assert len(rows) < 3 * 2 * 2 * 5 and len(rows) >= 15  # far below the product, at least |a| x |d|


def test_all_pairs_respects_allowed_and_counts_covered_rows():
    axes = {"a": (1, 2), "b": ("x", "y"), "c": (0, 1)}
    forbid = lambda r: not (r.get("a") == 1 and r.get("b") == "y")  # noqa: E731
    rows = all_pairs(axes, allowed=forbid)
    assert all(forbid(r) for r in rows)
    core = [{"a": 1, "b": "x", "c": 0}, {"a": 2, "b": "y", "c": 1}]
    more = all_pairs(axes, allowed=forbid, covered=core)
    covered = set().union(*(pairs_of(r, axes) for r in [*core, *more]))
    assert covered == required_pairs(axes, forbid)
    assert len(more) < len(rows)


def test_a_pair_missing_from_a_design_is_noticed():
    axes = {"a": (1, 2), "b": ("x", "y")}
    rows = all_pairs(axes)[:-1]
    covered = set().union(*(pairs_of(r, axes) for r in rows))
    assert covered != required_pairs(axes, lambda r: True)


@pytest.mark.parametrize(
    "grid, preset, device",
    [(g, p, d) for g in (ce_grid, flce_grid) for p, d in (("quick", "cpu"), ("full", "cuda"))],
)
def test_every_grid_holds_every_pair_of_axis_values(grid, preset, device):
    kernel = "ce" if grid is ce_grid else "flce"
    cases = (ce_grid.ce_cases if kernel == "ce" else flce_grid.flce_cases)(preset, device)
    n, v, *rest = {"ce": ce_grid.SIZES, "flce": flce_grid.SIZES}[kernel][preset]
    dtypes = grid.DTYPES[device]
    axes = grid.axes(n, v, *rest, dtypes) if kernel == "ce" else grid.axes(n, v, rest[0], rest[1], dtypes)
    covered = set().union(*(pairs_of(grid.as_row(c), axes) for c in cases))
    missing = required_pairs(axes, grid.allowed) - covered
    assert not missing
    assert len(cases) == len(set(cases))
    # every layout and upstream of the kernel is in the grid
    assert {c.layout for c in cases} == set({"ce": ce_axes.LAYOUT, "flce": flce_axes.LAYOUT}[kernel].values)
    assert {(c.reduction, c.upstream) for c in cases} == {(r, u) for r, ups in UPSTREAMS.items() for u in ups}


def test_grid_sizes_stay_within_their_budget():
    """quick on CPU within 5 minutes per kernel, full on one H100 within ~8 minutes per kernel."""
    reg = default_registry()
    presets = (("quick", "cpu"), ("full", "cuda"))
    sizes = {(k, p): len(reg.kernels[k].grid(p, d)) for k in ("ce", "flce") for p, d in presets}
    # ce quick: 330 cases with the thin-kill crossings (suites/ce/grid.py, T), whose five providers
    # took 73-75 s on the 2-core CPU; 336 with the split step's six tiny cases (S: 16 tokens, V=256),
    # 342 with three of a second backward and three of logits far below 0 (R, F: the same size)
    assert sizes[("ce", "quick")] <= 342 and sizes[("flce", "quick")] <= 180, sizes
    assert sizes[("ce", "full")] <= 480 and sizes[("flce", "full")] <= 535, sizes


def test_default_layout_keeps_old_case_ids():
    assert "lay-" not in CE.id and CE.replace(layout="3d").id.endswith("/lay-3d")
    assert len({CE.replace(layout=lay).id for lay in ce_axes.LAYOUT.values}) == len(ce_axes.LAYOUT.values)


def test_layout_names_are_distinct_per_kernel():
    for a, b in itertools.combinations(ce_axes.LAYOUT.values, 2):
        assert a != b


def test_contracts_see_a_write_into_the_targets_or_token_weights():
    """Every input is compared, not only the logits: a provider that rewrites the targets in place
    (e.g. ignore_index -> 0 to avoid a gather out of range) is caught, and named."""

    def rewrites_targets(logits, target, **opts):
        target[target < 0] = 0
        return ce_spec.ce_torch(logits, target, **opts)

    def scales_token_weight(logits, target, *, token_weight, **opts):
        token_weight.mul_(2.0)
        return ce_spec.ce_torch(logits, target, token_weight=token_weight, **opts)

    problem = ce_spec.make_problem(CE.replace(ignore_pattern="leading_run", option="token_weight"), 0, CPU)
    kept = problem.target.clone()
    outcome = ce_spec.run_ce(rewrites_targets, problem)
    assert outcome.mutated_inputs == ("target",)
    assert torch.equal(problem.target, kept)  # the case's own targets are safe for the next provider
    fields = _compare("input_unchanged", CE, PROVIDER, outcome, None, None)
    assert fields["verdict"] == "fail" and "target" in fields["message"]
    assert ce_spec.run_ce(scales_token_weight, problem).mutated_inputs == ("token_weight",)
    assert ce_spec.run_ce(_eager_ce, problem).mutated_inputs == ()


@pytest.mark.parametrize(
    "what, pred",
    [
        ("label smoothing with a class as ignore_index",
         lambda c: c.option in ("label_smoothing", "all") and c.ignore_pattern == "index_is_class"),
        ("exact-zero upstream rows", lambda c: c.upstream == "masked"),
        ("the padded-vocabulary stride", lambda c: c.layout == "padded_vocab"),
    ],
)  # fmt: skip
def test_thinly_crossed_triggers_are_in_every_dtype_and_several_cases(what, pred):
    # planted bugs' triggers the covering crossed thinly (suites/ce/grid.py, T): each trigger in
    # both CPU dtypes, 4+ cases each
    hits = [c for c in ce_grid.ce_cases("quick", "cpu") if pred(c)]
    for dtype in ("fp32", "bf16"):
        assert sum(c.dtype == dtype for c in hits) >= 4, (what, dtype)


def test_large_inputs_are_drawn_on_the_device_and_cpu_draws_are_unchanged(device):
    """On CPU the logits come from the case's own generator, exactly as the committed baselines
    were drawn; on a GPU from a generator there (drawing on the host cost 119 of 151 s of a
    warm full `verify --kernel ce` on an H100), the same for the same seed."""
    from ligerbench.cases import device_generator, draw_logits, generator_for

    spec = default_registry().kernels["ce"]
    case = next(c for c in spec.grid("quick", "cpu") if c.logits == "confident" and c.layout == "2d")
    p = spec.make_problem(case, 0, torch.device(device))
    again = spec.make_problem(case, 0, torch.device(device))
    assert p.logits.device.type == torch.device(device).type and torch.equal(p.logits, again.logits)
    g = generator_for(case, 0)
    assert device_generator(g, "cpu") is g
    target = torch.zeros(case.n, dtype=torch.long)
    x = draw_logits("confident", case.n, case.v, target, g)
    assert x.device.type == "cpu" and (x.argmax(1) == 0).all()  # the target's logit on top

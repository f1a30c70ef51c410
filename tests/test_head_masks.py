"""A sampler's mask through a fused head's bias (suites/vp_ce/head_masks.py): the masks are where
they say, the targets finite, the float64 reference finite on them (0 * -inf = 0), and each
planted bug only they expose fails there while ours passes."""

from __future__ import annotations

import torch

from ligerbench.builtin import default_registry
from ligerbench.suites.vp_ce.head_masks import BIAS_MASKED, BIAS_SINGLE, finite_targets, mask
from ligerbench.suites.vp_ce.spec import shard_bounds

REG = default_registry()


def test_the_masks_cover_a_middle_run_the_last_shard_and_scattered_classes():
    g = torch.Generator().manual_seed(0)
    v, world = 257, 3
    m = mask(v, world, BIAS_MASKED, g)
    lo, hi = shard_bounds(v, world)[-1]
    assert m[v // 4 : 3 * v // 4].all() and m[lo:hi].all()  # the middle run and the last rank's shard
    rest = torch.cat([m[: v // 4], m[3 * v // 4 : lo]])
    assert 0 < rest.sum() < rest.numel()  # scattered banned classes, some finite
    assert not m[0]
    single = mask(v, world, BIAS_SINGLE, g)
    assert (~single).sum() == 1 and int((~single).nonzero()) < shard_bounds(v, world)[0][1]


def test_every_counted_target_is_moved_onto_a_finite_class():
    m = torch.ones(10, dtype=torch.bool)
    m[3] = m[7] = False
    target = torch.tensor([0, 1, 2, -100, 9])
    moved = finite_targets(target, -100, m)
    assert moved[3] == -100 and set(moved[[0, 1, 2, 4]].tolist()) <= {3, 7}


def _case(kernel: str, kind: str):
    return next(c for c in REG.kernels[kernel].grid("quick", "cpu") if c.logits == kind)


def test_the_reference_is_finite_on_masked_heads_and_one_finite_logit_is_certain():
    spec = REG.kernels["vp_flp"]
    for kind in (BIAS_MASKED, BIAS_SINGLE):
        problem = spec.make_problem(_case("vp_flp", kind), 0, torch.device("cpu"))
        assert torch.isinf(problem.base.bias).any()
        ref = spec.reference(problem)
        for name, value in ref.values.items():
            assert value is None or torch.isfinite(value).all(), (kind, name)
        if kind == BIAS_SINGLE:
            assert ref.values["logp"].abs().max() == 0 and ref.values["entropy"].abs().max() == 0


def _errors(kernel: str, provider: str, case) -> dict:
    from ligerbench.verify.engine import Yardsticks, _compare

    spec = REG.kernels[kernel]
    problem = spec.make_problem(case, 0, torch.device("cpu"))
    ref = spec.reference(problem)
    yard = Yardsticks(spec.eager(problem), spec.textbook(problem) if spec.textbook else None)
    out = spec.run(REG.provider(kernel, provider).load(), problem)
    p = REG.provider(kernel, provider)
    return {q: _compare(q, case, p, out, ref, yard, strict=True, hints=lambda *a: (), promised=None)["verdict"]
            for q in ("loss", "entropy", "grad_hidden") if q in out.values}  # fmt: skip


def test_the_planted_bugs_fail_on_the_masks_where_ours_passes():
    for kernel, mutant, quantity in (("vp_flp", "mutant_vpflp_entropy_nan_at_zero", "entropy"),
                                     ("vp_flce", "mutant_vpf_shard_sum_unguarded", "loss")):  # fmt: skip
        case = _case(kernel, BIAS_MASKED)
        assert set(_errors(kernel, "ours", case).values()) == {"pass"}, kernel
        assert _errors(kernel, mutant, case)[quantity] == "fail", mutant

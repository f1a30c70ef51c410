"""The vocab-parallel log-probs and entropy op (kernels/vocab_parallel_fused_linear_log_probs.py)
against the float64 truth of the global problem on simulated ranks (threads), through the
harness's own spec (suites/vp_flp/spec.py) and tolerance rule; every planted bug of
suites/vp_flp/mutants.py failing the check it exists for; the op's collectives; and the merge
against the cancellation it is written to avoid."""

from __future__ import annotations

import pytest
import torch
from vp_checks import count_collectives

from ligerbench import tolerance
from ligerbench.builtin import default_registry
from ligerbench.cases import DTYPES
from ligerbench.distributed.simulated import run_ranks
from ligerbench.selftest.model import targeted
from ligerbench.suites.vp_flp.axes import case as vp_flp_case

pytestmark = pytest.mark.interpreter  # our op runs through Triton's interpreter on CPU
REG = default_registry(plugins=False)
SPEC = REG.kernels["vp_flp"]
CHECKED = ("logp", "entropy", "grad_hidden", "grad_weight", "grad_bias")


def _check(provider: str, case) -> dict[str, tuple[float, float]]:
    """{quantity: (error against float64, limit)} of `provider` on `case`, and the contracts asserted."""
    problem = SPEC.make_problem(case, 0, torch.device("cpu"))
    ref, eager = SPEC.reference(problem), SPEC.eager(problem)
    got = SPEC.run(REG.provider("vp_flp", provider).load(), problem)
    out = {}
    for q in CHECKED:
        if q in ref.values:
            err = tolerance.rel_error(got.values[q], ref.values[q])
            limit = tolerance.limit_for(tolerance.rel_error(eager.values[q], ref.values[q]), DTYPES[case.dtype])
            out[q] = (err, limit)
    out["outputs_float32"] = (float(got.values["outputs_float32"]), 1.0)
    out["input_unchanged"] = (float(got.input_mutated), 0.0)
    return out


# Each config is there for one reason; all run at world sizes 1 (no collective), 2 (V=37: 19/18)
# and 3 (13/12/12).
CONFIGS = {
    # K targets on the shards' edges, softcap after the logit scale, a bias, a sharpening temperature
    "k3_softcap_bias_edges": dict(targets=3, softcap=30.0, logit_scale=0.5, bias=True, temperature=0.6,
                                  placement="edges"),
    # bf16 inputs, a confident head (one rank holds p ~ 1), the entropy's gradient alone
    "bf16_peaked_entropy": dict(dtype="bf16", logits="peaked", upstream="entropy"),
    # every logit 200 below zero through the bias, masked rows of zeros, [B, T, H]
    "shifted_zero_rows_3d": dict(logits="shifted", bias=True, upstream="zero_rows", layout="3d"),
    # near-uniform rows (entropy ~ log V: the merge's U / s is most of it), a prompt mask
    "flat_leading_run": dict(logits="flat", ignore_pattern="leading_run", temperature=1.5),
}  # fmt: skip


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_rank_matches_the_float64_truth(world, name):
    case = vp_flp_case(n=8, v=37, h=8, world=world, **CONFIGS[name])
    for q, (err, limit) in _check("ours", case).items():
        assert err <= limit, (q, err, limit)


@pytest.mark.parametrize(
    "provider, shape",
    [
        ("ours_3_slices", dict(n=8, v=37, world=2)),  # the row's softmax carried over 3 slices per shard
        ("ours", dict(n=6, v=5, world=8)),  # 3 empty shards: they gather "nothing seen" and join the reduce
        ("ours", dict(n=1, v=37, world=3)),  # one token
        ("gathered", dict(n=8, v=37, world=3, targets=3, bias=True)),  # the PyTorch yardstick itself
    ],
)
def test_slices_empty_shards_one_token_and_the_yardstick(provider, shape):
    case = vp_flp_case(h=8, softcap=30.0, **shape)
    for q, (err, limit) in _check(provider, case).items():
        assert err <= limit, (q, err, limit)


MUST_FAIL = {  # mutant -> the quantity it must fail (tests/test_selftest.py runs them through selftest)
    "mutant_vpflp_entropy_not_moved": "entropy",
    "mutant_vpflp_max_copy_per_rank": "logp",
    "mutant_vpflp_logp_summed_over_ranks": "logp",
    "mutant_vpflp_target_wrong_offset": "logp",
    "mutant_vpflp_dh_not_reduced": "grad_hidden",
    "mutant_vpflp_vocab_start_ignored": "logp",
    "mutant_vpflp_world_rank_offset": "logp",  # on a mesh only (suites/vp_ce/mesh.py)
    "mutant_vpflp_world_group": "logp",
    "mutant_vpflp_target_logp_plain_all_reduce": "grad_weight",
    "mutant_vpflp_entropy_identity_log_softmax": "grad_hidden",
    "mutant_vpflp_entropy_nan_at_zero": "entropy",  # a sampler's mask through the bias only
}


@pytest.mark.parametrize("mutant", sorted(MUST_FAIL))
def test_each_planted_bug_fails_its_check_where_ours_passes(mutant):
    assert {p.name for p in REG.mutants_for("vp_flp")} == set(MUST_FAIL)
    case = next(c for c in SPEC.grid("quick", "cpu") if targeted(REG.provider("vp_flp", mutant))(c))
    err, limit = _check(mutant, case)[MUST_FAIL[mutant]]
    assert not err <= limit, (case.id, err, limit)
    ours = _check("ours", case)
    assert all(err <= limit for err, limit in ours.values()), (case.id, ours)


def test_one_gather_in_forward_one_float32_reduce_in_backward_and_the_same_bits_on_every_rank():
    from ligerbench.kernels.vocab_parallel_fused_linear_log_probs import vocab_parallel_fused_linear_log_probs

    g = torch.Generator().manual_seed(1)
    h = torch.randn(7, 4, generator=g).bfloat16()
    w = torch.randn(10, 4, generator=g).bfloat16()
    t = torch.randint(0, 10, (7, 2), generator=g)
    calls, outs = [], {}

    def body(rank, group):
        count_collectives(group, calls, rank, dtypes=True)
        leaf = h.clone().requires_grad_(True)
        logp, entropy = vocab_parallel_fused_linear_log_probs(
            leaf, w[5 * rank : 5 * rank + 5], t, group=group, vocab_start=5 * rank, chunk_cols=2
        )
        calls.append((rank, "backward"))
        (logp.sum() + entropy.sum()).backward()
        outs[rank] = (logp.detach(), entropy.detach(), leaf.grad)

    run_ranks(2, body)
    mine = [c[1:] for c in calls if c[0] == 0]
    # [N, 3 + K] statistics gathered once (3 slices per shard make no collective), dh reduced in float32
    assert mine == [("all_gather", (7, 5)), ("backward",), ("all_reduce", (7, 4), torch.float32)]
    for a, b in zip(outs[0], outs[1], strict=True):
        assert torch.equal(a, b)
    assert outs[0][0].dtype == outs[0][1].dtype == torch.float32 and outs[0][2].dtype == torch.bfloat16


def test_no_rank_owns_a_target_outside_the_vocabulary_nan_as_on_one_gpu():
    from ligerbench.kernels.vocab_parallel_fused_linear_log_probs import vocab_parallel_fused_linear_log_probs

    h, w = torch.randn(3, 4), torch.randn(6, 4)
    t = torch.tensor([5, 6, -100])  # the last class, one past it, ignored

    def body(rank, group):
        return vocab_parallel_fused_linear_log_probs(h, w[3 * rank : 3 * rank + 3], t, group=group,
                                                     vocab_start=3 * rank)[0]  # fmt: skip

    for logp in run_ranks(2, body):
        assert torch.isfinite(logp[0]) and torch.isnan(logp[1]) and logp[2] == 0.0


def test_the_merge_moves_each_rank_to_the_global_max_without_cancelling():
    """Logits 1e4 + N(0, 1) (float32): lse and sum p z agree to ~4 digits, so an entropy taken
    as their difference keeps only those (docs/bugs.md, vp_flce's smoothing note). The merge of
    per-rank statistics, fed the float32 statistics of the shards, must stay within float32
    rounding of the float64 entropy."""
    from ligerbench.kernels.vocab_parallel_fused_linear_log_probs import merge

    g = torch.Generator().manual_seed(0)
    z = (1e4 + torch.randn(5, 300, generator=g, dtype=torch.float64)).float()
    shards = torch.tensor_split(z, 3, dim=1)
    rows = []
    for x in shards:  # the statistics the forward kernel leaves, computed here in float64
        x = x.double()
        m = x.amax(1)
        e = torch.exp(x - m[:, None])
        rows.append(torch.stack((m, e.sum(1) - 1.0, (e * (m[:, None] - x)).sum(1), torch.full_like(m, float("nan"))),
                                dim=1).float())  # fmt: skip
    _, entropy, _ = merge(torch.stack(rows), torch.ones(5, 1, dtype=torch.bool), 0)
    p = torch.softmax(z.double(), dim=1)
    truth = -(p * torch.log_softmax(z.double(), dim=1)).sum(1)
    assert torch.allclose(entropy.double(), truth, rtol=1e-6, atol=0), (entropy, truth)

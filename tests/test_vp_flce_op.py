"""The vocab-parallel fused linear cross entropy op (kernels/vocab_parallel_fused_linear_cross_entropy.py)
against the float64 truth of the global problem: on real gloo ranks (2 processes) and on
simulated ranks (threads) at world sizes the real run cannot afford here; its collective count;
its documented errors; and the simulated group's all_reduce."""

from __future__ import annotations

import pytest
import torch
from vp_checks import count_collectives, run_gloo
from vp_flce_checks import CONFIGS, check_all, check_rank

from ligerbench.distributed.simulated import run_ranks


@pytest.mark.slow
def test_every_config_on_two_real_gloo_ranks(tmp_path):
    run_gloo(2, check_all, store=str(tmp_path / "store"), timeout_s=120)


# world sizes: 1 (degenerate, no collective), 2 (V=37: 19/18), 3 (V=7: 3/2/2), 8 (V=7: an empty shard)
@pytest.mark.parametrize("world", [1, 2, 3, 8])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_config_on_simulated_ranks(world, name):
    run_ranks(world, lambda rank, group: check_rank(rank, group, world, name))


# The Triton paths a GPU takes, through the interpreter: "fused" (the default there: the statistics
# kernel and the finishing kernel per chunk) and "triton" (the staged passes, with the merge in
# PyTorch ops: the path of a variant that replaces OWNS or MERGED); each writes a 16-bit gradient
# under its float32 logits (the bf16 config). World 2 (uneven shards) and, for the default path,
# 8 (an empty shard).
@pytest.mark.interpreter
@pytest.mark.parametrize("passes, world", [("fused", 2), ("fused", 8), ("triton", 2)])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_config_on_the_triton_paths(monkeypatch, passes, world, name):
    from ligerbench.kernels import vocab_parallel_cross_entropy as vp

    monkeypatch.setattr(vp, "PASSES", passes)
    run_ranks(world, lambda rank, group: check_rank(rank, group, world, name))


def test_the_fused_path_runs_where_asked_and_a_variant_leaves_it(monkeypatch):
    """PASSES "fused" sends each chunk through the finishing kernel; a variant with FUSED = False
    (one that replaces OWNS or MERGED: suites/vp_flce/mutants.py) takes the staged steps, where
    its replaced part runs. A planted failure in the kernel proves which path ran."""
    from ligerbench.kernels import vocab_parallel_cross_entropy as vp
    from ligerbench.kernels import vocab_parallel_fused_linear_cross_entropy as vpf

    def broken(*args, **kwargs):
        raise RuntimeError("finishing kernel reached")

    monkeypatch.setattr(vp, "PASSES", "fused")
    monkeypatch.setattr(vpf.passes, "finish", broken)
    h, w, t = torch.randn(6, 4), torch.randn(5, 4), torch.arange(6) % 5
    with pytest.raises(RuntimeError, match="finishing kernel reached"):
        vpf.vocab_parallel_fused_linear_cross_entropy(h, w, t)
    staged = type("Staged", (vpf.VocabParallelFusedLinearCrossEntropyFunction,), {"FUSED": False})
    monkeypatch.setattr(vp, "PASSES", "torch")  # the staged steps in PyTorch ops (no interpreter)
    loss, _ = staged.apply(h, w, None, t, None, None, None, 0, -100, "mean", 0.0, None, 0.0, 2**20, None, "auto", True)
    ref = torch.nn.functional.cross_entropy(h @ w.t(), t)
    torch.testing.assert_close(loss, ref)


@pytest.mark.parametrize(
    "reduction, in_forward, in_backward",
    [
        # gradients formed in forward: dh reduced there, backward only rescales
        ("sum", [("all_reduce", (13, 4))], []),
        # formed in backward (each row's upstream): dh reduced there, the statistics kept from forward
        ("none", [], [("all_reduce", (13, 4))]),
    ],
)
def test_collectives_a_gather_per_chunk_and_one_dh_all_reduce(reduction, in_forward, in_backward):
    from ligerbench.kernels.vocab_parallel_fused_linear_cross_entropy import vocab_parallel_fused_linear_cross_entropy

    calls = []

    def body(rank, group):
        count_collectives(group, calls, rank)
        h = torch.randn(13, 4, requires_grad=True)
        w = torch.randn(5, 4, requires_grad=True)
        loss = vocab_parallel_fused_linear_cross_entropy(
            h, w, torch.arange(13) % 10, group=group, vocab_start=5 * rank, reduction=reduction, chunk_tokens=5
        )
        calls.append((rank, "backward", ()))
        loss.backward(torch.ones_like(loss))

    run_ranks(2, body)
    mine = [(k, s) for r, k, s in calls if r == 0]
    split = mine.index(("backward", ()))
    # a [6] layout row, then one [chunk + 1, 6] statistics gather per chunk (13 tokens: 5, 5, 3)
    gathers = [("all_gather", (6,)), ("all_gather", (6, 6)), ("all_gather", (6, 6)), ("all_gather", (4, 6))]
    assert mine[:split] == gathers + in_forward
    assert mine[split + 1 :] == in_backward


def test_every_rank_gets_the_same_loss_and_hidden_gradient_bits():
    from ligerbench.kernels.vocab_parallel_fused_linear_cross_entropy import vocab_parallel_fused_linear_cross_entropy

    g = torch.Generator().manual_seed(3)
    h, w, t = torch.randn(9, 6, generator=g), torch.randn(11, 6, generator=g), torch.randint(0, 11, (9,), generator=g)

    def body(rank, group):
        lo, hi = (0, 6) if rank == 0 else (6, 11)
        hid = h.clone().requires_grad_(True)
        loss = vocab_parallel_fused_linear_cross_entropy(
            hid, w[lo:hi].clone().requires_grad_(True), t, group=group, vocab_start=lo, label_smoothing=0.1
        )
        loss.backward()
        return loss.detach(), hid.grad

    (l0, g0), (l1, g1) = run_ranks(2, body)
    assert torch.equal(l0, l1) and torch.equal(g0, g1)


def _call(rank, group, target=None, vocab_start=None, **kw):
    from ligerbench.kernels.vocab_parallel_fused_linear_cross_entropy import vocab_parallel_fused_linear_cross_entropy

    t = torch.tensor([1, 2, 9]) if target is None else target
    start = 5 * rank if vocab_start is None else vocab_start
    return vocab_parallel_fused_linear_cross_entropy(
        torch.randn(3, 4), torch.randn(5, 4), t, group=group, vocab_start=start, **kw
    )


def test_a_target_outside_the_global_vocab_raises():
    with pytest.raises(ValueError, match="outside \\[0, 10\\)"):
        run_ranks(2, lambda r, g: _call(r, g, target=torch.tensor([1, 10, 3])))


def test_shards_that_do_not_tile_the_vocab_raise():
    with pytest.raises(ValueError, match="do not tile"):
        run_ranks(2, lambda r, g: _call(r, g, vocab_start=0))


def test_backward_twice_is_refused():
    def body(rank, group):
        from ligerbench.kernels.vocab_parallel_fused_linear_cross_entropy import (
            vocab_parallel_fused_linear_cross_entropy,
        )

        w = torch.randn(5, 4, requires_grad=True)
        loss = vocab_parallel_fused_linear_cross_entropy(torch.randn(3, 4), w, torch.tensor([1, 2, 9]), group=group,
                                                         vocab_start=5 * rank)  # fmt: skip
        loss.backward(retain_graph=True)
        with pytest.raises(RuntimeError, match="backward ran twice"):
            loss.backward()

    run_ranks(2, body)


def test_the_simulated_all_reduce_sums_in_rank_order_and_refuses_mismatches():
    out = run_ranks(3, lambda r, g: (g.all_reduce(t := torch.full((2,), float(r + 1), dtype=torch.bfloat16)), t)[1])
    for t in out:
        assert t.dtype == torch.bfloat16 and t.tolist() == [6.0, 6.0]

    def mismatched(rank, group):
        group.all_reduce(torch.ones(rank + 1))

    with pytest.raises(RuntimeError, match="simulated all_reduce"):
        run_ranks(2, mismatched)

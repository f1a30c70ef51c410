"""Planted bugs of the vocab-parallel fused linear cross entropy: the slips of a sharded lm_head
(most shared with the vocab-parallel cross entropy, suites/vp_ce/mutants.py) and
those of its own, the hidden gradient's reduction over the group. Each runs only when named or
by selftest, on the case slices (`targets`) that expose it. Those that need the kernel's insides
replace one part of it (OWNS, MERGED, REDUCE, GRAD_H_BUFFER or backward, by subclassing the
autograd Function); the others wrap our op.
"""

from __future__ import annotations

import functools

import torch

from ligerbench.registry import Provider
from ligerbench.suites.common.input_mutants import upstream_read_dense
from ligerbench.suites.vp_ce.head_masks import KINDS
from ligerbench.suites.vp_ce.mesh import MESHES, with_world_group, with_world_rank_offset
from ligerbench.suites.vp_ce.mutants import local_vocab_merged
from ligerbench.suites.vp_flce.providers import three_chunks


def _ours(**fixed):
    from ligerbench.kernels.vocab_parallel_fused_linear_cross_entropy import (
        vocab_parallel_fused_linear_cross_entropy,
    )

    return functools.partial(vocab_parallel_fused_linear_cross_entropy, return_z_loss=True, **fixed)


def _with_parts(**parts):
    """Our op with some of its parts replaced (class attributes of the autograd Function). The
    fused path (a GPU's) runs neither OWNS nor MERGED, so a variant replacing either takes the
    staged steps, where they run."""
    if "OWNS" in parts or "MERGED" in parts:
        parts = {"FUSED": False, **parts}
    Buggy = type("Buggy", (_base(),), parts)

    def call(hidden, weight_shard, target, *, group, vocab_start, bias_shard, class_weight_shard, ignore_index,
             reduction, label_smoothing, softcap, z_loss_scale, token_weight):  # fmt: skip
        chunk = three_chunks(target.numel())
        return Buggy.apply(
            hidden, weight_shard, bias_shard, target, class_weight_shard, token_weight, group, vocab_start,
            ignore_index, reduction, label_smoothing, softcap, z_loss_scale, 2**20, chunk, "auto", False,
        )  # fmt: skip

    return call


def _reduce(times: int = 1, divide: bool = False):
    """The hidden gradient's reduction: `times` all_reduces (0: none), then / world if `divide`."""

    def reduce(t, group):
        from ligerbench.kernels.vocab_parallel_cross_entropy import all_reduce_, group_rank_size

        for _ in range(times):
            all_reduce_(t, group)
        if divide:
            t.div_(group_rank_size(group)[1])
        return t

    return staticmethod(reduce)


def _edge_off_by_one():
    def owns(local_t, n_cols, counted):
        return counted & (local_t > 0) & (local_t < n_cols)

    return _with_parts(OWNS=staticmethod(owns))


def _base():
    from ligerbench.kernels import vocab_parallel_fused_linear_cross_entropy as vpf

    return vpf.VocabParallelFusedLinearCrossEntropyFunction


def _upstream_ignored():
    """Backward runs as if the upstream gradient were all ones (per-row ones for reduction none)."""

    def backward(cls, ctx, grad_loss, grad_zloss):
        return _base().backward.__func__(cls, ctx, torch.ones_like(grad_loss), grad_zloss)

    return _with_parts(backward=classmethod(backward))


def _upstream_read_dense():
    """Backward reads reduction none's upstream as a dense vector: wrong for the stride-0 one of
    loss.sum().backward() (docs/bugs.md, bug 8), right for a materialised one."""

    def backward(cls, ctx, grad_loss, grad_zloss):
        return _base().backward.__func__(cls, ctx, upstream_read_dense(grad_loss), grad_zloss)

    return _with_parts(backward=classmethod(backward))


def _dh_unreduced_in_backward():
    """For reduction none the gradients are formed in backward, and there the hidden gradient
    is left unreduced (the forward's reduction was the only one written)."""

    def backward(cls, ctx, grad_loss, grad_zloss):
        no_reduce = type("NoReduce", (cls,), {"REDUCE": _reduce(times=0)})
        return _base().backward.__func__(no_reduce, ctx, grad_loss, grad_zloss)

    return _with_parts(backward=classmethod(backward))


def _even_shards(hidden, weight_shard, target, *, group, vocab_start, **opts):
    """Each rank's offset taken as rank * its width: right only when V divides evenly."""
    from ligerbench.kernels.vocab_parallel_cross_entropy import group_rank_size

    rank, _ = group_rank_size(group)
    start = rank * weight_shard.shape[0]
    return _ours(check_targets=False)(hidden, weight_shard, target, group=group, vocab_start=start, **opts)


def _ignore_by_local_id(hidden, weight_shard, target, *, vocab_start, ignore_index, **opts):
    """ignore_index compared with the LOCAL target id (t - vocab_start)."""
    return _ours(check_targets=False)(
        hidden, weight_shard, target, vocab_start=vocab_start, ignore_index=ignore_index + vocab_start, **opts
    )


def _local_mean(hidden, weight_shard, target, *, reduction, vocab_start, ignore_index, class_weight_shard, **opts):
    """reduction='mean' divided by the count of targets THIS rank holds."""
    kw = dict(vocab_start=vocab_start, ignore_index=ignore_index, class_weight_shard=class_weight_shard, **opts)
    if reduction != "mean":
        return _ours()(hidden, weight_shard, target, reduction=reduction, **kw)
    loss, z = _ours()(hidden, weight_shard, target, reduction="sum", **kw)
    local = target - vocab_start
    held = ((target != ignore_index) & (local >= 0) & (local < weight_shard.shape[0])).sum().clamp_min(1)
    return loss / held, z / held


def _mean_of_nothing_is_zero(hidden, weight_shard, target, *, reduction, ignore_index, class_weight_shard, **opts):
    """reduction='mean' with the denominator clamped to 1: rows ignored on every rank give 0."""
    kw = dict(ignore_index=ignore_index, class_weight_shard=class_weight_shard, **opts)
    if reduction != "mean" or class_weight_shard is not None:
        return _ours()(hidden, weight_shard, target, reduction=reduction, **kw)
    loss, z = _ours()(hidden, weight_shard, target, reduction="sum", **kw)
    count = (target != ignore_index).sum().clamp_min(1)
    return loss / count, z / count


def _weight_rows(inputs) -> int:
    return inputs[1].shape[0]


def _shard_sum_unguarded():
    """A shard wholly -inf in a row (a sampler's mask through the bias: suites/vp_ce/head_masks.py)
    taken into the merge as a naive shard pass leaves it: its sum about its own max of -inf is
    exp(-inf - -inf) = NaN (as a Triton pass's is), and the merge multiplies it by exp(m_r - M) = 0
    instead of leaving the shard out. An empty shard (no columns) still sums to 0."""
    from ligerbench.kernels.vocab_parallel_cross_entropy import _Merged

    class Unguarded(_Merged):
        def __init__(self, gathered, n_rows, has_w, rank):
            super().__init__(gathered, n_rows, has_w, rank)
            m_r = self.rows[..., 0]
            wholly_inf = (m_r == float("-inf")) & (self.widths[:, None] > 0)
            s_r = torch.where(wholly_inf, float("nan"), self.rows[..., 1])
            self.s_o = (s_r * torch.exp(m_r - self.m)).sum(dim=0)

    return Unguarded


def _mutant(name: str, description: str, load, **kw) -> Provider:
    return Provider(name=name, kernel="vp_flce", description=description, load=load, mutant=True, **kw)


FP32 = {"dtype": "fp32"}
PLAIN_SUM = {**FP32, "option": "plain", "reduction": "sum", "ignore_pattern": "random_10", "logits": "normal"}
PROVIDERS = (
    _mutant(
        "mutant_vpf_local_smoothing",
        "label smoothing averaged over the local vocab shard instead of the global vocab",
        lambda: _with_parts(MERGED=local_vocab_merged()),
        targets=({**FP32, "option": "label_smoothing", "reduction": "sum"},),
    ),
    _mutant(
        "mutant_vpf_dh_not_reduced",
        "the hidden gradient is not summed over the group: each rank keeps its shard's share",
        lambda: _with_parts(REDUCE=_reduce(times=0)),
        targets=(PLAIN_SUM,),
    ),
    _mutant(
        "mutant_vpf_dh_reduced_twice",
        "the hidden gradient is all-reduced twice (world x the truth)",
        lambda: _with_parts(REDUCE=_reduce(times=2)),
        targets=(PLAIN_SUM,),
    ),
    _mutant(
        "mutant_vpf_dh_averaged",
        "the hidden gradient's all-reduce averages (divides by the world size) instead of summing",
        lambda: _with_parts(REDUCE=_reduce(times=1, divide=True)),
        targets=(PLAIN_SUM,),
    ),
    _mutant(
        "mutant_vpf_dh_not_reduced_in_backward",
        "the hidden gradient is reduced in forward but not when backward forms it (reduction none)",
        _dh_unreduced_in_backward,
        targets=({**FP32, "reduction": "none", "option": "plain", "ignore_pattern": "random_10"},),
    ),
    _mutant(
        "mutant_vpf_even_shards",
        "shard offsets assumed even (rank * local width): wrong when V % world != 0",
        lambda: _even_shards,
        targets=(PLAIN_SUM,),
    ),
    _mutant(
        "mutant_vpf_edge_off_by_one",
        "a target on a shard's first class is owned by no rank (ownership test off by one)",
        _edge_off_by_one,
        targets=({**FP32, "targets": "edges"},),
    ),
    _mutant(
        "mutant_vpf_ignore_by_local_id",
        "ignore_index compared with the local target id (breaks ignore_index equal to a valid class)",
        lambda: _ignore_by_local_id,
        targets=({**FP32, "ignore_pattern": "index_is_class", "targets": "edges"},),
    ),
    _mutant(
        "mutant_vpf_local_mean",
        "reduction='mean' divided by the number of targets the rank holds",
        lambda: _local_mean,
        targets=({**FP32, "reduction": "mean", "option": "plain", "logits": "normal"},),
    ),
    _mutant(
        "mutant_vpf_mean_of_nothing_is_zero",
        "reduction='mean' over rows ignored on every rank gives 0 instead of NaN (denominator clamped)",
        lambda: _mean_of_nothing_is_zero,
        targets=({**FP32, "reduction": "mean", "ignore_pattern": "all"},),
    ),
    _mutant(
        "mutant_vpf_upstream_ignored",
        "backward ignores the upstream gradient (per-row for reduction none, a scale otherwise)",
        _upstream_ignored,
        targets=({**FP32, "upstream": "random", "option": "plain", "ignore_pattern": "random_10"},),
    ),
    _mutant(
        "mutant_vpf_upstream_read_dense",
        "reduction='none': the upstream read row by row as a dense vector (loss.sum().backward() hands a 1 "
        "expanded over the rows)",
        _upstream_read_dense,
        targets=({**FP32, "reduction": "none", "upstream": "ones"},),
    ),
    _mutant(
        "mutant_vpf_dh_in_hidden",
        "forms the hidden gradient in the caller's hidden states (a buffer saved) without declaring it",
        lambda: _with_parts(GRAD_H_BUFFER=staticmethod(lambda h: h)),
        targets=(PLAIN_SUM,),
    ),
    _mutant(
        "mutant_vpf_world_rank_offset",
        "the vocabulary offset from the world rank, not the tensor-parallel group's (Liger-Kernel #1422, #1458)",
        lambda: with_world_rank_offset(_ours(check_targets=False), _weight_rows),
        targets=({**FP32, "mesh": MESHES, "option": "plain"},),
    ),
    _mutant(
        "mutant_vpf_world_group",
        "the statistics merged and the hidden gradient reduced over the world's group, not the mesh's "
        "tensor-parallel group",
        lambda: with_world_group(_ours(check_targets=False)),
        targets=({**FP32, "mesh": MESHES, "option": "plain"},),
    ),
    _mutant(
        "mutant_vpf_shard_sum_unguarded",
        "a shard wholly -inf in a row (a sampler's mask through the bias) merged as a naive shard pass leaves "
        "it: its sum about a max of -inf is exp(-inf - -inf) = NaN, not left out",
        lambda: _with_parts(MERGED=_shard_sum_unguarded()),
        targets=({"logits": KINDS},),
    ),
)

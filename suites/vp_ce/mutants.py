"""Planted bugs of the vocab-parallel cross entropy, each a slip a real implementation made or
easily makes once the vocab is sharded; each runs only when named or by selftest, on the case
slices (`targets`) that expose it. Those that need the kernel's insides replace one part of it
(its OWNS or MERGED, by subclassing the autograd Function); the others wrap our op.
"""

from __future__ import annotations

import functools

import torch

from ligerbench.registry import Provider
from ligerbench.suites.vp_ce.mesh import MESHES, with_world_group, with_world_rank_offset


def _ours(**fixed):
    from ligerbench.kernels.vocab_parallel_cross_entropy import vocab_parallel_cross_entropy

    return functools.partial(vocab_parallel_cross_entropy, return_z_loss=True, **fixed)


def _with_parts(owns=None, merged=None, backward=None):
    """Our op with one of its parts replaced."""
    from ligerbench.kernels import vocab_parallel_cross_entropy as vp

    class Buggy(vp.VocabParallelCrossEntropyFunction):
        OWNS = staticmethod(owns or vp.owns)
        MERGED = merged or vp._Merged
        FUSED = owns is None and merged is None  # the fused path runs neither replaced part

    if backward is not None:
        Buggy.backward = staticmethod(backward)

    def call(logits_shard, target, *, group, vocab_start, class_weight_shard, ignore_index, reduction,
             label_smoothing, softcap, z_loss_scale, token_weight):  # fmt: skip
        return Buggy.apply(
            logits_shard, target, class_weight_shard, token_weight, group, vocab_start, ignore_index, reduction,
            label_smoothing, softcap, z_loss_scale, False, False,
        )  # fmt: skip

    return call


def local_vocab_merged():
    """The merged statistics with label smoothing's eps / V taken with this shard's width (a
    known bug elsewhere); shared with the fused kernel's planted bugs."""
    from ligerbench.kernels.vocab_parallel_cross_entropy import _Merged

    class LocalV(_Merged):
        def __init__(self, gathered, n_rows, has_w, rank):
            super().__init__(gathered, n_rows, has_w, rank)
            local = self.widths[rank]
            self.w_all = self.w_all if has_w else local
            self.v = local

    return LocalV


def _local_smoothing():
    """Label smoothing's eps / V taken with this shard's width (a known bug elsewhere)."""
    return _with_parts(merged=local_vocab_merged())


def _remote_target_lost():
    """Max and sum of exp are combined across ranks, the target's logit is not: a rank that does
    not hold the target uses 0 for it (and weight 0)."""
    from ligerbench.kernels.vocab_parallel_cross_entropy import _Merged

    class OwnTargetOnly(_Merged):
        def __init__(self, gathered, n_rows, has_w, rank):
            super().__init__(gathered, n_rows, has_w, rank)
            self.x_y = self.rows[rank, :, 2]
            self.w_y = torch.where(self.rows[rank, :, 3] > 0, self.w_y, 1.0 if not has_w else 0.0)
            self.owners = torch.ones_like(self.owners)
            self.derive()

    return _with_parts(merged=OwnTargetOnly)


def _edge_off_by_one():
    """Ownership tested with local id > 0: a target on the first class of a shard belongs to no
    rank (its row then comes out NaN: the check that one rank owns the target catches it)."""

    def owns(local_t, n_cols, counted):
        return counted & (local_t > 0) & (local_t < n_cols)

    return _with_parts(owns=owns)


def _upstream_ignored():
    """Backward hands back the gradient formed in forward as it is: the upstream gradient (a
    per-row one for reduction='none', a scale for a reduced loss) never applied."""

    def backward(ctx, grad_loss, _grad_zloss):
        grad, ctx.grad = ctx.grad, None
        return (grad.view(ctx.grad_shape),) + (None,) * 12

    return _with_parts(backward=backward)


def _mean_of_nothing_is_zero(logits_shard, target, *, reduction, ignore_index, class_weight_shard, **opts):
    """reduction='mean' with the denominator clamped to 1: a batch whose every row is ignored
    (on every rank) gives 0 instead of PyTorch's NaN, hiding an empty batch."""
    kw = dict(ignore_index=ignore_index, class_weight_shard=class_weight_shard, **opts)
    if reduction != "mean" or class_weight_shard is not None:
        return _ours()(logits_shard, target, reduction=reduction, **kw)
    loss, z = _ours()(logits_shard, target, reduction="sum", **kw)
    count = (target != ignore_index).sum().clamp_min(1)
    return loss / count, z / count


def _even_shards(logits_shard, target, *, group, vocab_start, **opts):
    """Each rank's offset taken as rank * its width: right only when V divides evenly."""
    from ligerbench.kernels.vocab_parallel_cross_entropy import group_rank_size

    rank, _ = group_rank_size(group)
    start = rank * logits_shard.shape[1]
    return _ours(check_targets=False)(logits_shard, target, group=group, vocab_start=start, **opts)


def _ignore_by_local_id(logits_shard, target, *, vocab_start, ignore_index, **opts):
    """ignore_index compared with the LOCAL target id (t - vocab_start): with ignore_index 0,
    the first class of every shard but the first is dropped on its rank."""
    return _ours(check_targets=False)(
        logits_shard, target, vocab_start=vocab_start, ignore_index=ignore_index + vocab_start, **opts
    )


def _local_mean(logits_shard, target, *, reduction, vocab_start, ignore_index, class_weight_shard, **opts):
    """reduction='mean' divided by the count of targets THIS rank holds."""
    kw = dict(vocab_start=vocab_start, ignore_index=ignore_index, class_weight_shard=class_weight_shard, **opts)
    if reduction != "mean":
        return _ours()(logits_shard, target, reduction=reduction, **kw)
    loss, z = _ours()(logits_shard, target, reduction="sum", **kw)
    local = target - vocab_start
    held = ((target != ignore_index) & (local >= 0) & (local < logits_shard.shape[1])).sum().clamp_min(1)
    return loss / held, z / held


def _world_division(logits_shard, target, *, group, **opts):
    """The loss (hence the gradient) divided by the world size once more, as an all-reduce
    average of an already global loss does."""
    from ligerbench.kernels.vocab_parallel_cross_entropy import group_rank_size

    _, world = group_rank_size(group)
    loss, z = _ours()(logits_shard, target, group=group, **opts)
    return loss / world, z / world


def _logits_width(inputs) -> int:
    return inputs[0].shape[1]


def _mutant(name: str, description: str, load, **kw) -> Provider:
    return Provider(name=name, kernel="vp_ce", description=description, load=load, mutant=True, **kw)


FP32 = {"dtype": "fp32"}
PROVIDERS = (
    _mutant(
        "mutant_vp_local_smoothing",
        "label smoothing averaged over the local vocab shard instead of the global vocab",
        _local_smoothing,
        targets=({**FP32, "option": "label_smoothing", "reduction": "sum"},),
    ),
    _mutant(
        "mutant_vp_remote_target_lost",
        "the target logit is not combined across ranks: ranks not holding it use 0",
        _remote_target_lost,
        targets=({**FP32, "option": "plain", "reduction": "sum", "ignore_pattern": "random_10", "logits": "normal"},),
    ),
    _mutant(
        "mutant_vp_edge_off_by_one",
        "a target on a shard's first class is owned by no rank (ownership test off by one)",
        _edge_off_by_one,
        targets=({**FP32, "targets": "edges"},),
    ),
    _mutant(
        "mutant_vp_even_shards",
        "shard offsets assumed even (rank * local width): wrong when V % world != 0",
        lambda: _even_shards,
        targets=({**FP32, "option": "plain", "reduction": "sum", "ignore_pattern": "random_10", "logits": "normal"},),
    ),
    _mutant(
        "mutant_vp_ignore_by_local_id",
        "ignore_index compared with the local target id (breaks ignore_index equal to a valid class)",
        lambda: _ignore_by_local_id,
        targets=({**FP32, "ignore_pattern": "index_is_class", "targets": "edges"},),
    ),
    _mutant(
        "mutant_vp_local_mean",
        "reduction='mean' divided by the number of targets the rank holds",
        lambda: _local_mean,
        targets=({**FP32, "reduction": "mean", "option": "plain", "logits": "normal"},),
    ),
    _mutant(
        "mutant_vp_world_division",
        "the global loss divided by the world size once more (an all-reduce average)",
        lambda: _world_division,
        targets=({**FP32, "reduction": "mean", "option": "plain", "ignore_pattern": "random_10"},),
    ),
    _mutant(
        "mutant_vp_upstream_ignored",
        "backward ignores the upstream gradient (per-row for reduction none, a scale otherwise)",
        _upstream_ignored,
        targets=({**FP32, "upstream": "random", "option": "plain", "ignore_pattern": "random_10"},),
    ),
    _mutant(
        "mutant_vp_mean_of_nothing_is_zero",
        "reduction='mean' over rows ignored on every rank gives 0 instead of NaN (denominator clamped)",
        lambda: _mean_of_nothing_is_zero,
        targets=({**FP32, "reduction": "mean", "ignore_pattern": "all"},),
    ),
    _mutant(
        "mutant_vp_world_rank_offset",
        "the vocabulary offset from the world rank, not the tensor-parallel group's (Liger-Kernel #1422, #1458)",
        lambda: with_world_rank_offset(_ours(check_targets=False), _logits_width),
        targets=({**FP32, "mesh": MESHES, "option": "plain"},),
    ),
    _mutant(
        "mutant_vp_world_group",
        "the statistics merged over the world's group, not the tensor-parallel group of a mesh",
        lambda: with_world_group(_ours(check_targets=False)),
        targets=({**FP32, "mesh": MESHES, "option": "plain"},),
    ),
    _mutant(
        "mutant_vp_gathered_accepted",
        "logits handed gathered already (every rank the whole vocabulary) computed, not refused (Megatron-LM #7452)",
        lambda: _ours(check_targets=False),
        targets=({"handed": "gathered"},),
    ),
    _mutant(
        "mutant_vp_silent_inplace",
        "writes its gradient into the caller's logits shard without declaring it",
        lambda: _ours(inplace_backward=True),
        targets=({**FP32, "reduction": "sum", "option": "plain", "ignore_pattern": "random_10"},),
    ),
)

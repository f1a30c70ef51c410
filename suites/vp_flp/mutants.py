"""Planted bugs of the vocab-parallel log-probs and entropy: the slips of merging per-rank
softmax statistics, and of a column-parallel head's hidden gradient. Each runs only when named
or by selftest, on the case slices (`targets`) that expose it. Those that need the kernel's
insides replace one part of it (MERGE, REDUCE or TARGET_START, by subclassing the autograd
Function); the other wraps our op.

    mutant                             the slip
    vpflp_entropy_not_moved            each rank's sum p (m_r - z) added without moving it to the
                                       global max: the entropy is short of sum_r p_r (M - m_r)
    vpflp_max_copy_per_rank            every rank leaves its own max's 1 out of s (R = sum r_r
                                       e^(m_r - M)): log s too small, every logp too large
    vpflp_logp_summed_over_ranks       each rank's partial log-prob (its z_t, or 0 where another
                                       rank owns the target, minus the lse) summed over the group:
                                       the lse counted world times (the target logit taken from
                                       every rank)
    vpflp_target_wrong_offset          the target's logit looked up at its global id as a local
                                       column (the slice's vocab_start left out)
    vpflp_dh_not_reduced               the hidden gradient not summed over the group
    vpflp_vocab_start_ignored          every rank takes its shard to start at class 0
    vpflp_entropy_nan_at_zero          the entropy as -(p * log p).sum(-1) with log 0 = -inf: NaN
                                       wherever the head's bias masks a class (0 * -inf)
"""

from __future__ import annotations

import torch

from ligerbench.registry import Provider
from ligerbench.suites.vp_ce.head_masks import KINDS
from ligerbench.suites.vp_ce.mesh import MESHES, with_world_group, with_world_rank_offset


def _base():
    from ligerbench.kernels import vocab_parallel_fused_linear_log_probs as vp

    return vp.VocabParallelFusedLinearLogProbsFunction


def _with_parts(**parts):
    """Our op with some of its parts replaced (class attributes of the autograd Function)."""
    buggy = type("Buggy", (_base(),), parts)

    def call(hidden, weight_shard, target, *, bias, temperature, softcap, logit_scale, ignore_index, group,
             vocab_start):  # fmt: skip
        return buggy.apply(hidden, weight_shard, bias, target, group, vocab_start, temperature, softcap, logit_scale,
                           ignore_index, 2**20, None)  # fmt: skip

    return call


def _rank_weights(gathered: torch.Tensor):
    """(alpha [world, N]: each rank's e^(m_r - M), 0 where it saw nothing; seen [world, N])."""
    m_r = gathered[..., 0]
    seen = m_r > float("-inf")
    m = m_r.amax(dim=0)
    alpha = torch.where(seen, torch.exp(torch.where(seen, m_r - torch.where(m > float("-inf"), m, 0.0), 0.0)), 0.0)
    return alpha, seen


def _entropy_not_moved(gathered, valid, rank):
    from ligerbench.kernels.vocab_parallel_fused_linear_log_probs import merge

    logp, entropy, stats = merge(gathered, valid, rank)
    alpha, _ = _rank_weights(gathered)
    big_r = stats[:, 1]
    mean_gap = (alpha * gathered[..., 2]).sum(dim=0) / (1.0 + big_r)  # u_r about m_r, never moved to M
    stats = torch.stack((stats[:, 0], big_r, mean_gap), dim=1).contiguous()
    return logp, torch.where(valid.any(dim=1), torch.log1p(big_r) + mean_gap, 0.0), stats


def _max_copy_per_rank(gathered, valid, rank):
    from ligerbench.kernels.vocab_parallel_fused_linear_log_probs import merge

    logp, _, stats = merge(gathered, valid, rank)
    alpha, _ = _rank_weights(gathered)
    good_r, u = stats[:, 1], stats[:, 2] * (1.0 + stats[:, 1])
    big_r = (alpha * gathered[..., 1]).sum(dim=0)  # each rank's r_r: one 1 left out per rank
    log_s = torch.log1p(big_r)
    logp = torch.where(valid, logp + (torch.log1p(good_r) - log_s)[:, None], 0.0)  # z_t - M kept
    mean_gap = u / (1.0 + big_r)
    entropy = torch.where(valid.any(dim=1), log_s + mean_gap, 0.0)
    return logp, entropy, torch.stack((stats[:, 0], big_r, mean_gap), dim=1).contiguous()


def _logp_summed_over_ranks(gathered, valid, rank):
    from ligerbench.kernels.vocab_parallel_fused_linear_log_probs import merge

    logp, entropy, stats = merge(gathered, valid, rank)
    lse = stats[:, 0] + torch.log1p(stats[:, 1])
    world = gathered.shape[0]
    return torch.where(valid, logp - (world - 1) * lse[:, None], 0.0), entropy, stats


def _no_reduce(t, group):
    return t


def _vocab_start_ignored():
    from ligerbench.kernels.vocab_parallel_fused_linear_log_probs import vocab_parallel_fused_linear_log_probs

    def call(hidden, weight_shard, target, *, vocab_start, **opts):
        return vocab_parallel_fused_linear_log_probs(hidden, weight_shard, target, vocab_start=0, **opts)

    return call


def _ours():
    from ligerbench.kernels.vocab_parallel_fused_linear_log_probs import vocab_parallel_fused_linear_log_probs

    return vocab_parallel_fused_linear_log_probs


def _weight_rows(inputs) -> int:
    return inputs[1].shape[0]


def _target_logp_plain_all_reduce(hidden, weight_shard, target, *, vocab_start, **opts):
    """ms-swift #9947: each rank's masked target logit summed over the group by a plain
    `dist.all_reduce`, which autograd does not see; on a rank whose shard does not hold a row's
    target the log-prob then has no gradient path at all. Our log-prob with its gradient cut on
    those ranks: the shards' softmax terms of those rows get no gradient."""
    logp, entropy = _ours()(hidden, weight_shard, target, vocab_start=vocab_start, **opts)
    local = target - vocab_start
    here = (local >= 0) & (local < weight_shard.shape[0])
    return torch.where(here, logp, logp.detach()), entropy


def _gathered_logits_and_logp(hidden, weight_shard, target, bias, group, vocab_start, temperature, softcap, logit_scale,
                              ignore_index):  # fmt: skip
    """The whole head gathered (suites/vp_flp/providers.py `gathered_head`): its float32 logits from
    the unrounded inputs, and the reference's log-prob of the target."""
    from ligerbench.suites.families.log_prob import reference
    from ligerbench.suites.vp_flp.providers import gathered_head

    weight, full_bias = gathered_head(weight_shard, bias, group, vocab_start)
    x = hidden.float() @ weight.float().t()
    if full_bias is not None:
        x = x + full_bias.float()
    options = dict(temperature=temperature, softcap=softcap, logit_scale=logit_scale, ignore_index=ignore_index)
    return x, reference(x, target, **options)[0]


def _entropy_identity_log_softmax(hidden, weight_shard, target, *, bias, group, vocab_start, temperature, softcap,
                                  logit_scale, ignore_index):  # fmt: skip
    """PyTorch #190746: under `loss_parallel()` a log_softmax of logits sharded on the vocabulary
    has a backward that passes its gradient through unchanged, which is right only when an
    nll_loss (whose own backward forms the softmax term) consumes it. The entropy built on it,
    -(p * logp).sum(-1) with p = exp(logp), then gets -p (logp + 1) for its gradient where
    -p (logp + H) is right. The whole head gathered (suites/vp_flp/providers.py `gathered`), the
    log-prob of the target right, the entropy through that log_softmax."""
    x, logp = _gathered_logits_and_logp(hidden, weight_shard, target, bias, group, vocab_start, temperature, softcap,
                                        logit_scale, ignore_index)  # fmt: skip
    z = logit_scale * x
    if softcap:
        z = softcap * torch.tanh(z / softcap)
    z = z / temperature
    logp_all = z + (torch.log_softmax(z, dim=-1) - z).detach()  # the value of log_softmax, an identity backward
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    counted = (target != ignore_index) if target.dim() == hidden.dim() - 1 else (target != ignore_index).any(-1)
    return logp, torch.where(counted, entropy, 0.0)


def _entropy_nan_at_zero(hidden, weight_shard, target, *, bias, group, vocab_start, temperature, softcap, logit_scale,
                         ignore_index):  # fmt: skip
    """The entropy written as users write it, -(p * log_softmax(z)).sum(-1), on the whole head
    gathered (float32 logits from the unrounded inputs): right wherever every logit is finite,
    NaN where a masked class has p = 0 and log p = -inf (the sampler's masks through the bias,
    suites/vp_ce/head_masks.py). The log-prob of the target is the reference's."""
    x, logp = _gathered_logits_and_logp(hidden, weight_shard, target, bias, group, vocab_start, temperature, softcap,
                                        logit_scale, ignore_index)  # fmt: skip
    z = logit_scale * x
    if softcap:
        z = torch.where(z == float("-inf"), z, softcap * torch.tanh(z / softcap))
    logp_all = torch.log_softmax(z / temperature, dim=-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    counted = (target != ignore_index) if target.dim() == hidden.dim() - 1 else (target != ignore_index).any(-1)
    return logp, torch.where(counted, entropy, 0.0)


def _mutant(name: str, description: str, load, **kw) -> Provider:
    return Provider(name=f"mutant_{name}", kernel="vp_flp", description=description, load=load, mutant=True, **kw)


# the core cases of suites/vp_flp/grid.py each bug shows on (the quick grid has one or two of each)
FP32 = {"dtype": "fp32"}
PLAIN = {**FP32, "temperature": 1.0, "upstream": "both", "ignore_pattern": "random", "logits": "normal", "n": 12,
         "v": 257, "layout": "2d", "targets": 1, "softcap": 0.0}  # fmt: skip
PROVIDERS = (
    _mutant("vpflp_entropy_not_moved", "each rank's entropy sum added about its own max, not moved to the global max",
            lambda: _with_parts(MERGE=staticmethod(_entropy_not_moved)), targets=(PLAIN,)),
    _mutant("vpflp_max_copy_per_rank", "every rank leaves its own max's 1 out of the merged sum of exponentials",
            lambda: _with_parts(MERGE=staticmethod(_max_copy_per_rank)), targets=(PLAIN,)),
    _mutant("vpflp_logp_summed_over_ranks", "each rank's partial log-prob summed over the group: the log-sum-exp "
            "counted once per rank (the target logit taken from every rank)",
            lambda: _with_parts(MERGE=staticmethod(_logp_summed_over_ranks)), targets=(PLAIN,)),
    _mutant("vpflp_target_wrong_offset", "the target's logit read at its global id as a local column (vocab_start "
            "left out of the lookup)", lambda: _with_parts(TARGET_START=staticmethod(lambda vocab_start, c0: c0)),
            targets=({**FP32, "placement": "edges"},)),
    _mutant("vpflp_dh_not_reduced", "the hidden gradient is not summed over the group: each rank keeps its share",
            lambda: _with_parts(REDUCE=staticmethod(_no_reduce)), targets=(PLAIN,)),
    _mutant("vpflp_vocab_start_ignored", "every rank takes its shard to start at class 0", _vocab_start_ignored,
            targets=(PLAIN,)),
    _mutant("vpflp_world_rank_offset", "the vocabulary offset from the world rank, not the tensor-parallel group's "
            "(Liger-Kernel #1422, #1458)", lambda: with_world_rank_offset(_ours(), _weight_rows),
            targets=({**FP32, "mesh": MESHES},)),
    _mutant("vpflp_world_group", "the statistics merged and the hidden gradient reduced over the world's group, "
            "not the mesh's tensor-parallel group", lambda: with_world_group(_ours()),
            targets=({**FP32, "mesh": MESHES},)),
    _mutant("vpflp_target_logp_plain_all_reduce", "the target's log-prob reaches every rank through an all-reduce "
            "autograd does not see: the shards not holding the target get no gradient from it (ms-swift #9947)",
            lambda: _target_logp_plain_all_reduce, targets=(PLAIN,)),
    _mutant("vpflp_entropy_identity_log_softmax", "the entropy's gradient through a sharded log_softmax whose "
            "backward is the identity, right only for a cross entropy consumer (PyTorch #190746, loss_parallel)",
            lambda: _entropy_identity_log_softmax, targets=(PLAIN,)),
    _mutant("vpflp_entropy_nan_at_zero", "the entropy as -(p * log p).sum(-1), log 0 = -inf: NaN where the head's "
            "bias masks a class (0 * -inf)", lambda: _entropy_nan_at_zero, targets=({"logits": KINDS},)),
)  # fmt: skip

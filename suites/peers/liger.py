"""Liger-Kernel (LinkedIn) as providers of the RL kernels, called as its own frontends call them.

- `flp` (`liger`): `LigerFusedLinearScaledCrossEntropyFunction`, its fused NLL + entropy (on SM90
  its frontend picks a CuTe DSL path that needs `nvidia-cutlass-dsl`; elsewhere a PyTorch path);
  `liger_torch_path` (bench only): that PyTorch fallback called directly.
- `grpo` (`liger_triton`): `triton_grpo_loss` over the full logits [B, T+1, V] (it reads one
  position past the last completion token), reduced as TRL's compute_loss reduces (its
  `reduce=True`, `num_items_in_batch`, the count over every process, as TRL passes it: Liger divides
  it by the world size itself); `liger_fused_linear`: `LigerFusedLinearGRPOLoss`, the
  chunked fused-linear loss (torch.compile'd chunks), as Liger's docs build it.
  Liger's KL is the k3 estimator only: k1 cases are skipped (its documented limit).

- vocab-parallel (each on a rank's shard, with the group): `vp_ce` `liger_vp` (bench only):
  `LigerVocabParallelCEFunction`; `vp_flp` `liger_tp`: `liger_fused_linear_scaled_cross_entropy_tp`
  (NLL + entropy), and the same as a `vp_flce` bench peer (`liger_tp`, the NLL's mean).

Liger's cross entropy and fused linear cross entropy providers live with `ce` and `flce`.
"""

from __future__ import annotations

import torch

from ligerbench.cases import Case
from ligerbench.registry import Provider
from ligerbench.suites.ce.providers import LIGER
from ligerbench.suites.peers.limits import chunked_distill_lacking, lacking, refusal
from ligerbench.suites.peers.tensor_parallel import equal_shards, reduced

PEER = LIGER  # one pin for every Liger provider (suites/ce/providers.py)
DISTRIBUTION, PINNED = PEER["library"], PEER["pinned"]


# ---- flp


def _flp():
    from liger_kernel.ops.fused_linear_scaled_cross_entropy import LigerFusedLinearScaledCrossEntropyFunction as F

    if torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9:
        import cutlass  # noqa: F401 -- on SM90 its frontend takes the CuTe DSL path (nvidia-cutlass-dsl)

    def call(hidden, weight, target, *, temperature=1.0, ignore_index=-100, **_):
        # Liger takes [M, H] and [M] only: [B, T, H] flattened as a trainer would (a copy where
        # the strides do not allow a view), its outputs shaped back
        rows = hidden.reshape(-1, hidden.shape[-1])
        # (input, weight, target, temperature, ignore_index, m_tiles_per_cluster, return_entropy)
        nll, entropy = F.apply(rows, weight, target.reshape(-1), temperature, ignore_index, 1, True)
        return -nll.reshape(target.shape), entropy.reshape(hidden.shape[:-1])

    return call


def _flp_torch_path():
    """The fused NLL + entropy's PyTorch fallback (512-row chunks), called directly: on an H100
    the frontend picks the CuTe DSL path, which needs nvidia-cutlass-dsl."""
    from liger_kernel.ops.fused_linear_scaled_cross_entropy import _FusedLinearPPOFallbackFunction as F

    def call(hidden, weight, target, *, temperature=1.0, ignore_index=-100, **_):
        rows = hidden.reshape(-1, hidden.shape[-1])
        # (input, weight, target, temperature, ignore_index, return_entropy)
        nll, entropy = F.apply(rows, weight, target.reshape(-1), temperature, ignore_index, True)
        return -nll.reshape(target.shape), entropy.reshape(hidden.shape[:-1])

    return call


def _cute_path() -> bool:
    """Whether Liger's frontend takes its CuTe DSL path here: an SM90 GPU with nvidia-cutlass-dsl
    importable (it checks both when called, and does not fall back by dtype)."""
    import importlib.util

    return (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
            and importlib.util.find_spec("cutlass") is not None)  # fmt: skip


def flp_supports(case: Case) -> str | None:
    """What Liger-Kernel 0.8.5's fused NLL + entropy has no parameter for (it would be ignored);
    and on SM90 with nvidia-cutlass-dsl, the dtypes its CuTe DSL path refuses (TypeError "supports
    BF16 input and weight only", measured on an H200 2026-11-28)."""
    if case.dtype != "bf16" and _cute_path():
        return "Liger's CuTe DSL path (its pick on SM90 with nvidia-cutlass-dsl) takes bf16 only"
    return refusal("Liger's fused NLL + entropy", lacking(case, "softcap", "logit_scale", "bias", "targets"))


# ---- grpo


def grpo_supports(case: Case) -> str | None:
    if case.get("kl") == "k1":
        return "Liger's GRPO losses take the k3 KL estimator only (no k1)"
    return None


def _raw_bound(loss_type: str, eps_high: float) -> float:
    """Liger (as TRL) takes CISPO's `epsilon_high` as the raw bound on the ratio (min(r, eps_high));
    grpo's contract passes the excess over 1 (min(r, 1 + eps_high)), as for the PPO clip."""
    return 1.0 + eps_high if loss_type == "cispo" else eps_high


def _liger_num_items(num_items):
    """grpo's `num_items` as Liger takes it. Liger 0.8.5's DAPO / CISPO normaliser is TRL's
    (`_compute_dapo_normalizer` in liger_kernel/ops/grpo_loss.py and chunked_loss/fused_linear_ppo.py):
    `num_items_in_batch` is the count over every process, which it divides by the world size of
    torch.distributed's default group (where initialised), DDP then averaging the ranks'
    gradients. grpo's `num_items` is a piece's own normaliser already (the step's count over the
    world divided by the world: suites/grpo/spec.py's piece_recipe); handed on as is, on real ranks
    Liger divided it by the world again, and a rank's gradient came out `world` times too large
    (2x on `verify --kernel grpo --nproc 2`). Multiplied back by the world size Liger reads, its
    normaliser is the contract's, on real ranks and in one process alike."""
    if num_items is None or not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return num_items
    return num_items * torch.distributed.get_world_size()


def _triton_grpo():
    """The product in the inputs' dtype, as a trainer's model forward forms the logits."""
    from liger_kernel.transformers.grpo_loss import triton_grpo_loss

    def call(hidden, weight, completion_ids, old_logp, ref_logp, advantages, mask, *, loss_type, importance_level,
             eps_low, eps_high, beta, temperature, num_items=None, max_completion_length=None, **_):  # fmt: skip
        eps_high = _raw_bound(loss_type, eps_high)
        padded = torch.nn.functional.pad(hidden, (0, 0, 0, 1))
        logits = padded @ weight.t()
        loss, _ = triton_grpo_loss(logits, old_logp, ref_logp if beta else None, completion_ids, advantages, mask,
                                   temperature=temperature, beta=beta, eps_low=eps_low, eps_high=eps_high,
                                   loss_type=loss_type, max_completion_length=max_completion_length,
                                   importance_sampling_level=importance_level, reduce=True,
                                   num_items_in_batch=_liger_num_items(num_items))  # fmt: skip
        return loss

    return call


def _fused_linear_grpo():
    from liger_kernel.chunked_loss import LigerFusedLinearGRPOLoss

    modules = {}

    def call(hidden, weight, completion_ids, old_logp, ref_logp, advantages, mask, *, loss_type, importance_level,
             eps_low, eps_high, beta, temperature, num_items=None, max_completion_length=None, **_):  # fmt: skip
        eps_high = _raw_bound(loss_type, eps_high)
        max_completion_length = max_completion_length or mask.shape[-1]  # required for dr_grpo; TRL passes its own
        key = (loss_type, importance_level, eps_low, eps_high, beta, temperature, max_completion_length)
        if key not in modules:
            modules[key] = LigerFusedLinearGRPOLoss(
                beta=beta, loss_type=loss_type, importance_sampling_level=importance_level, epsilon_low=eps_low,
                epsilon_high=eps_high, temperature=temperature, use_ref_model=bool(beta),
                max_completion_length=max_completion_length)  # fmt: skip
        out = modules[key](hidden, weight, completion_ids, mask, advantages, ref_per_token_logps=ref_logp,
                           old_per_token_logps=old_logp, num_items_in_batch=_liger_num_items(num_items))  # fmt: skip
        return out[0] if isinstance(out, tuple) else out

    return call


PROVIDERS = (
    Provider(name="liger", kernel="flp", **PEER, load=_flp, supports=flp_supports,
             description="Liger-Kernel's fused NLL + entropy (LigerFusedLinearScaledCrossEntropyFunction; its "
             "PyTorch path off SM90)"),
    Provider(name="liger_torch_path", kernel="flp", **PEER, bench_only=True, load=_flp_torch_path,
             supports=flp_supports, description="Liger-Kernel's fused NLL + entropy, its PyTorch path"),
    Provider(name="liger_triton", kernel="grpo", **PEER, load=_triton_grpo, supports=grpo_supports,
             description="Liger-Kernel's triton_grpo_loss on the full logits (the product in the inputs' dtype)"),
    Provider(name="liger_fused_linear", kernel="grpo", **PEER, load=_fused_linear_grpo, supports=grpo_supports,
             devices=("cuda",), description="Liger-Kernel's LigerFusedLinearGRPOLoss (chunked, compiled)"),
)  # fmt: skip


# ----------------------------------------------------------------------------- kd, flkd (distillation)
# Distillation, as Liger's docs and trainers call it: log-softmaxes (at the temperature) handed to
# LigerJSD / LigerKLDIVLoss, probabilities to LigerTVDLoss, labels as shift_labels. Their
# "batchmean" with labels divides by the counted rows: the `kd` kernel's "mean".


def _distill_rows_2d(student, teacher, labels):
    v = student.shape[-1]
    return student.reshape(-1, v), teacher.reshape(-1, v), None if labels is None else labels.reshape(-1)


def _liger_jsd():
    from liger_kernel.transformers.jsd import LigerJSD

    def call(student, teacher, *, labels=None, divergence="jsd", beta=0.5, temperature=1.0, ignore_index=-100, **_):
        s, t, y = _distill_rows_2d(student, teacher, labels)
        beta = {"forward_kl": 0.0, "reverse_kl": 1.0}.get(divergence, beta)
        log_q = torch.log_softmax(s.float() / temperature, dim=-1)
        log_p = torch.log_softmax(t.float() / temperature, dim=-1)
        return LigerJSD(beta=beta, ignore_index=ignore_index)(log_q, log_p, y)

    return call


def _liger_tvd():
    from liger_kernel.transformers.tvd import LigerTVDLoss

    def call(student, teacher, *, labels=None, temperature=1.0, ignore_index=-100, reduction="mean", **_):
        s, t, y = _distill_rows_2d(student, teacher, labels)
        p = torch.softmax(s.float() / temperature, dim=-1)
        q = torch.softmax(t.float() / temperature, dim=-1)
        theirs = {"mean": "batchmean", "sum": "sum", "none": "none"}[reduction]
        out = LigerTVDLoss(reduction=theirs, ignore_index=ignore_index)(p, q, y)
        return out.sum(-1).reshape(student.shape[:-1]) if reduction == "none" else out

    return call


def _liger_kldiv():
    from liger_kernel.transformers.kl_div import LigerKLDIVLoss

    def call(student, teacher, *, temperature=1.0, reduction="batchmean", **_):
        s, t, _ = _distill_rows_2d(student, teacher, None)
        log_q = torch.log_softmax(s.float() / temperature, dim=-1)
        log_p = torch.log_softmax(t.float() / temperature, dim=-1)
        out = LigerKLDIVLoss(reduction="none" if reduction == "none" else reduction, log_target=True)(log_q, log_p)
        return out.sum(-1).reshape(student.shape[:-1]) if reduction == "none" else out

    return call


# Log-probs of -inf in both inputs (a vocabulary padded and masked with -inf): LigerJSD at every
# beta and LigerKLDIVLoss(log_target=True) form exp(Y) * (Y - X) = 0 * (-inf - -inf) = NaN, as
# PyTorch's own F.kl_div(log_target=True) does; their docs take log-probs of a model's (finite)
# logits, and the trainers hand those (docs/repro/liger_distill.py, docs/peers.md).
MASKED_COLUMNS = "-inf log-probs (a vocabulary masked with -inf: NaN, as F.kl_div(log_target=True))"


def _kd_common(case: Case, what: str, *, log_space: bool = True) -> list[str]:
    missing = []
    if case.get("teacher", "full") != "full":
        missing.append("a top-K teacher")
    if case.get("teacher_grad"):
        missing.append("a teacher gradient")
    if log_space and case.get("layout") == "padded_vocab":
        missing.append(MASKED_COLUMNS)
    return missing + ([what] if what else [])


def kd_jsd_supports(case: Case) -> str | None:
    missing = _kd_common(case, "")
    if case.divergence == "tvd":
        missing.append("tvd (LigerTVDLoss is its own provider)")
    if case.reduction != "mean":
        missing.append(f"reduction {case.reduction} (LigerJSD divides by the counted rows: mean)")
    return refusal("LigerJSD", missing)


def kd_tvd_supports(case: Case) -> str | None:
    missing = _kd_common(case, "", log_space=False)  # probabilities: a masked column is a 0
    if case.divergence != "tvd":
        missing.append(case.divergence)
    if case.reduction == "batchmean":
        missing.append("batchmean over every row (its batchmean counts the rows with a label)")
    return refusal("LigerTVDLoss", missing)


def kd_kldiv_supports(case: Case) -> str | None:
    missing = _kd_common(case, "")
    if case.divergence != "forward_kl" and not (case.divergence == "jsd" and case.beta == 0.0):
        missing.append(case.divergence)
    if case.ignore_pattern != "none":
        missing.append("labels (no ignore_index)")
    if case.reduction == "mean":
        missing.append("mean over counted rows (its mean is over N * V elements)")
    return refusal("LigerKLDIVLoss", missing)


def _liger_fused_linear_jsd():
    from liger_kernel.chunked_loss import LigerFusedLinearJSDLoss

    def call(student_hidden, student_weight, teacher_hidden, teacher_weight, *, labels=None, divergence="jsd",
             beta=0.5, temperature=1.0, ignore_index=-100, **_):  # fmt: skip
        beta = {"forward_kl": 0.0, "reverse_kl": 1.0}.get(divergence, beta)
        # the distillation alone: its defaults train 0.5 CE + 0.5 JSD (TRL #5731)
        loss_fn = LigerFusedLinearJSDLoss(weight_hard_loss=0.0, weight_soft_loss=1.0, beta=beta,
                                          ignore_index=ignore_index, temperature=temperature,
                                          compiled=student_hidden.is_cuda)  # fmt: skip
        hs, ht = (
            student_hidden.reshape(-1, student_hidden.shape[-1]),
            teacher_hidden.reshape(-1, teacher_hidden.shape[-1]),
        )
        y = labels.reshape(-1) if labels is not None else torch.zeros(hs.shape[0], dtype=torch.long, device=hs.device)
        return loss_fn(hs, student_weight, ht, teacher_weight, y)

    return call


def _liger_fused_linear_jsd_triton():
    from liger_kernel.transformers.fused_linear_jsd import LigerFusedLinearJSD

    def call(student_hidden, student_weight, teacher_hidden, teacher_weight, *, labels=None, divergence="jsd",
             beta=0.5, temperature=1.0, ignore_index=-100, **_):  # fmt: skip
        beta = {"forward_kl": 0.0, "reverse_kl": 1.0}.get(divergence, beta)
        loss_fn = LigerFusedLinearJSD(jsd_beta=beta, ignore_index=ignore_index, temperature=temperature)
        hs = student_hidden.reshape(-1, student_hidden.shape[-1])
        ht = teacher_hidden.reshape(-1, teacher_hidden.shape[-1])
        return loss_fn(hs, student_weight, ht, teacher_weight, None if labels is None else labels.reshape(-1))

    return call


# liger_kernel/ops/fused_linear_jsd.py, fused_linear_jsd_forward (0.8.5; Liger #1432 was about the
# cast that came after a 16-bit product): so the model code's 16-bit logits are no yardstick of it
FUSED_LINEAR_JSD_PROMISE = (
    "Everything from the logits to the final JSD loss runs in FP32. The float32 output is requested "
    "from the projection GEMM itself rather than cast afterwards"
)


def flkd_jsd_supports(case: Case) -> str | None:
    return refusal("LigerFusedLinearJSDLoss", chunked_distill_lacking(case))


PROVIDERS += (
    Provider(name="liger", kernel="kd", **PEER, load=_liger_jsd, supports=kd_jsd_supports,
             description="Liger-Kernel's LigerJSD (beta 0 / 1 for the KLs) on log-softmaxes at T"),
    Provider(name="liger_tvd", kernel="kd", **PEER, load=_liger_tvd, supports=kd_tvd_supports, devices=("cuda",),
             description="Liger-Kernel's LigerTVDLoss on softmaxes at T (its kernel fails under Triton's interpreter: "
             "a float argument's .to)"),
    Provider(name="liger_kldiv", kernel="kd", **PEER, load=_liger_kldiv, supports=kd_kldiv_supports,
             devices=("cuda",), description="Liger-Kernel's LigerKLDIVLoss(log_target=True) (interpreter: as tvd)"),
    Provider(name="liger_fused_linear_jsd_triton", kernel="flkd", **PEER, load=_liger_fused_linear_jsd_triton,
             supports=flkd_jsd_supports, promises_float32_logits=True, promise_quote=FUSED_LINEAR_JSD_PROMISE,
             description="Liger-Kernel's LigerFusedLinearJSD (liger_kernel.transformers: its Triton JSD kernel over "
             "float32 logits chunks), distillation only; judged by its promise of float32 logits"),
    Provider(name="liger_fused_linear_jsd", kernel="flkd", **PEER, load=_liger_fused_linear_jsd,
             supports=flkd_jsd_supports, description="Liger-Kernel's LigerFusedLinearJSDLoss, distillation only "
             "(weight_hard_loss=0, weight_soft_loss=1); compiled on a GPU"),
)  # fmt: skip
# ----------------------------------------------------------------------------- end of kd, flkd


# ----------------------------------------------------------------------------- vocab-parallel
# Liger's tensor-parallel losses, each called on a rank's shard with the global targets and the
# group (None: Liger takes the default group). Both put rank r's vocabulary at r * V_local, so
# uneven shards are refused.


def _vp_ce():
    """LigerVocabParallelCEFunction as LigerVocabParallelCrossEntropy calls it: [S, B, V_local]
    logits, per-token loss (reduced here as F.cross_entropy reduces it)."""
    from liger_kernel.ops.vocab_parallel_cross_entropy import LigerVocabParallelCEFunction

    def call(logits_shard, target, *, group, ignore_index, reduction, label_smoothing):
        g = group if group is not None else torch.distributed.group.WORLD
        # (logits, target, tp_group, ignore_index, label_smoothing, formula, mode)
        per_token = LigerVocabParallelCEFunction.apply(logits_shard.unsqueeze(1), target.unsqueeze(1), g,
                                                       ignore_index, label_smoothing, "pytorch", "global")  # fmt: skip
        return reduced(per_token.reshape(-1), target, ignore_index, reduction)

    return call


def _tp_head(*, entropy: bool):
    """liger_fused_linear_scaled_cross_entropy_tp (Liger's tensor-parallel fused NLL + entropy):
    hidden [M, H] replicated, the weight shard, global targets, the group; the hidden gradient
    comes back summed over the group. Off its native path (CUTLASS + NVSHMEM on Hopper or
    Blackwell, with liger_cute_kernels) it runs its PyTorch path (512-row chunks)."""
    from liger_kernel.transformers.functional import liger_fused_linear_scaled_cross_entropy_tp as tp

    def log_probs(hidden, weight_shard, target, *, temperature=1.0, ignore_index=-100, group=None, **_):
        rows = hidden.reshape(-1, hidden.shape[-1])  # [B, T, H] flattened as a trainer would
        # (input, weight, target, tp_group, temperature, ignore_index, tiles_per_reduce, return_entropy)
        nll, ent = tp(rows, weight_shard, target.reshape(-1), group, float(temperature), ignore_index, 1, True)
        counted = target != ignore_index
        return torch.where(counted, -nll.reshape(target.shape), 0.0), torch.where(counted, ent.reshape(target.shape),
                                                                                  0.0)  # fmt: skip

    def cross_entropy(hidden, weight_shard, target, *, group=None, ignore_index=-100, reduction="mean"):
        nll = tp(hidden, weight_shard, target, group, 1.0, ignore_index, 1, False)
        return reduced(nll, target, ignore_index, reduction)

    return log_probs if entropy else cross_entropy


def vp_flp_supports(case: Case) -> str | None:
    missing = refusal("Liger's tensor-parallel NLL + entropy", lacking(case, "softcap", "logit_scale", "bias",
                                                                      "targets"))  # fmt: skip
    unequal = equal_shards(case)
    return missing or (f"Liger's tensor-parallel NLL + entropy {unequal}" if unequal else None)


def _vp_peer_supports(what: str):
    def supports(case: Case) -> str | None:
        unequal = equal_shards(case)
        return f"{what} {unequal}" if unequal else None

    return supports


PROVIDERS += (
    Provider(name="liger_vp", kernel="vp_ce", **PEER, bench_only=True, load=_vp_ce,
             supports=_vp_peer_supports("LigerVocabParallelCEFunction"),
             description="Liger-Kernel's LigerVocabParallelCEFunction (per-token loss; the mean taken here)"),
    Provider(name="liger_tp", kernel="vp_flp", **PEER, load=lambda: _tp_head(entropy=True), supports=vp_flp_supports,
             devices=("cuda",), description="Liger-Kernel's liger_fused_linear_scaled_cross_entropy_tp (NLL + "
             "entropy over the group; it refuses CPU tensors)"),
    Provider(name="liger_tp", kernel="vp_flce", **PEER, bench_only=True, load=lambda: _tp_head(entropy=False),
             supports=_vp_peer_supports("liger_fused_linear_scaled_cross_entropy_tp"), devices=("cuda",),
             description="Liger-Kernel's liger_fused_linear_scaled_cross_entropy_tp (per-token NLL; the mean "
             "taken here; it refuses CPU tensors)"),
)  # fmt: skip

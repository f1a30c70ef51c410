"""TRL (Hugging Face's trainers) as providers, called as its trainers call it.

- `lp`: `trl.kernels.selective_log_softmax_and_entropy` (its Triton kernel, straight: `trl_triton`),
  `trl.trainer.utils.selective_log_softmax_and_entropy` (what GRPO/TPO call: the Triton kernel on
  a CUDA device for the inputs it takes, PyTorch otherwise: `trl`), and the unfused pair
  `selective_log_softmax` + `entropy_from_logits` over `logits / temperature` (`trl_unfused`).
  The trainers hand every position with the completion mask as `row_mask` (masked rows give 0).
- `flp`: `trl.kernels.ChunkedLogProbFunction` as `add_fused_lm_head`'s forward calls it: only the
  counted rows scored on a Triton device (scattered back to zeros), every row on the others
  (targets clamped to 0, then masked), 32768-column tiles, entropy requested.
"""

from __future__ import annotations

import torch

from ligerbench.cases import Case
from ligerbench.registry import Provider
from ligerbench.suites.families import sampler_masks
from ligerbench.suites.peers.limits import chunked_distill_lacking, lacking, refusal

DISTRIBUTION = "trl"
PINNED = "1.16.0"
PEER = {"library": DISTRIBUTION, "pinned": PINNED}


NEG_INF_LOGITS = (
    "logits with -inf entries (a vocabulary masked with -inf, or a sampler's top-k/top-p/banned-token masks): "
    "its entropy forms p * logit or p * logp, 0 * -inf = NaN; its trainers hand it a model's finite logits"
)
LOW_PRECISION_OUT = (
    "16-bit logits on its PyTorch path: log-probs and entropy come back in the logits' dtype "
    "(documented: equivalent to logits.log_softmax(-1).gather(...)); lp's contract is float32"
)


def _torch_path(case: Case) -> bool:
    """Where trl.trainer.utils' dispatcher takes its PyTorch path: no CUDA device, or a last
    stride that is not 1, or K targets per row."""
    return not torch.cuda.is_available() or case.get("layout") == "transposed" or case.get("targets", 1) != 1


def _masked(target: torch.Tensor, ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(index, row_mask) as the trainers build them: every position a real id, the mask apart."""
    counted = target != ignore_index
    return torch.where(counted, target, 0), counted


# ---- lp


def _triton_lp():
    from trl.kernels import selective_log_softmax_and_entropy

    def call(logits, target, *, temperature=1.0, ignore_index=-100, **_):
        index, counted = _masked(target, ignore_index)
        return selective_log_softmax_and_entropy(logits, index, temperature, counted)

    return call


def _lp_limits(case: Case, torch_path: bool) -> str | None:
    if case.get("layout") == "padded_vocab" or case.get("logits") == sampler_masks.KIND:
        return NEG_INF_LOGITS
    if torch_path and case.get("dtype") in ("bf16", "fp16"):
        return LOW_PRECISION_OUT
    return None


def triton_lp_supports(case: Case) -> str | None:
    missing = lacking(case, "softcap", "logit_scale", "targets")
    if case.get("layout") == "transposed":
        missing.append("logits whose last stride is not 1 (TRL's dispatcher sends them to its PyTorch path)")
    return refusal("TRL's Triton log-prob + entropy kernel", missing) or _lp_limits(case, torch_path=False)


def _trainer_lp():
    from trl.trainer.utils import selective_log_softmax_and_entropy

    def call(logits, target, *, temperature=1.0, ignore_index=-100, **_):
        index, counted = _masked(target, ignore_index)
        return selective_log_softmax_and_entropy(logits, index, entropy_requires_grad=True, temperature=temperature,
                                                 row_mask=counted)  # fmt: skip

    return call


def trainer_lp_supports(case: Case) -> str | None:
    missing = lacking(case, "softcap", "logit_scale", "targets")
    return refusal("trl.trainer.utils.selective_log_softmax_and_entropy", missing) or _lp_limits(
        case, _torch_path(case)
    )


def _unfused_lp():
    from trl.trainer.utils import entropy_from_logits, selective_log_softmax

    def call(logits, target, *, temperature=1.0, ignore_index=-100, **_):
        index, counted = _masked(target, ignore_index)
        scaled = logits / temperature
        logp = torch.where(counted, selective_log_softmax(scaled, index), 0.0)
        entropy = entropy_from_logits(scaled)
        rows = counted if counted.dim() == entropy.dim() else counted.any(-1)
        return logp, torch.where(rows, entropy, 0.0)

    return call


def unfused_lp_supports(case: Case) -> str | None:
    missing = lacking(case, "softcap", "logit_scale")
    return refusal("TRL's selective_log_softmax + entropy_from_logits", missing) or _lp_limits(case, _torch_path(case))


# ---- flp


def _chunked_flp():
    from trl.kernels import ChunkedLogProbFunction
    from trl.trainer.utils import _CHUNKED_LOGPROB_CHUNK_SIZE

    try:
        from trl.kernels.chunked_logprob import _use_triton
    except ImportError:  # TRL <= 1.15: Triton folds everywhere, and its trainer always scores the counted rows only

        def _use_triton(device):
            return True

    def call(hidden, weight, target, *, bias=None, temperature=1.0, softcap=None, logit_scale=1.0,
             ignore_index=-100, **_):  # fmt: skip
        mask = target != ignore_index
        compact = _use_triton(hidden.device)
        rows = hidden[mask] if compact else hidden.reshape(-1, hidden.shape[-1])
        labels = target[mask] if compact else target.clamp(min=0).reshape(-1)
        logp, entropy, *_ = ChunkedLogProbFunction.apply(
            rows, weight, bias, labels, float(temperature), _CHUNKED_LOGPROB_CHUNK_SIZE, softcap, logit_scale,
            ("entropy",))  # fmt: skip
        if compact:
            return tuple(x.new_zeros(mask.shape).masked_scatter(mask, x) for x in (logp, entropy))
        return tuple(x.view(mask.shape).masked_fill(~mask, 0) for x in (logp, entropy))

    return call


def chunked_flp_supports(case: Case) -> str | None:
    return refusal("TRL's ChunkedLogProbFunction", lacking(case, "targets"))


PROVIDERS = (
    Provider(name="trl_triton", kernel="lp", **PEER, load=_triton_lp, supports=triton_lp_supports,
             description="TRL's Triton log-prob + entropy kernel (trl.kernels.selective_log_softmax_and_entropy)"),
    Provider(name="trl", kernel="lp", **PEER, load=_trainer_lp, supports=trainer_lp_supports,
             description="trl.trainer.utils.selective_log_softmax_and_entropy as GRPO calls it (the Triton kernel "
             "on CUDA for the inputs it takes, PyTorch otherwise)"),
    Provider(name="trl_unfused", kernel="lp", **PEER, load=_unfused_lp, supports=unfused_lp_supports,
             description="TRL's selective_log_softmax + entropy_from_logits over logits / temperature"),
    Provider(name="trl_chunked", kernel="flp", **PEER, load=_chunked_flp, supports=chunked_flp_supports,
             description="TRL's ChunkedLogProbFunction as add_fused_lm_head calls it (Triton folds on CUDA, "
             "PyTorch tiles elsewhere)"),
)  # fmt: skip


# ----------------------------------------------------------------------------- flkd (distillation)
# trl/kernels/chunked_divergence.py as DistillationTrainer's _chunked_divergence_loss calls it:
# only the counted rows are projected (on Triton devices), the per-token divergence summed and
# divided by their count (clamped at 1): the `flkd` kernel's "mean".


def _trl_chunked_divergence():
    from trl.kernels.chunked_divergence import ChunkedDivergenceFunction

    def call(student_hidden, student_weight, teacher_hidden, teacher_weight, *, labels=None, divergence="jsd",
             beta=0.5, temperature=1.0, ignore_index=-100, **_):  # fmt: skip
        beta = {"forward_kl": 0.0, "reverse_kl": 1.0}.get(divergence, beta)
        hs = student_hidden.reshape(-1, student_hidden.shape[-1])
        ht = teacher_hidden.reshape(-1, teacher_hidden.shape[-1])
        valid = labels.reshape(-1) != ignore_index
        per_token, _entropy = ChunkedDivergenceFunction.apply(hs[valid], student_weight, None, ht[valid],
                                                              teacher_weight, None, beta, temperature)  # fmt: skip
        return per_token.sum() / valid.sum().clamp(min=1)

    return call


def flkd_supports(case: Case) -> str | None:
    return refusal("TRL's ChunkedDivergenceFunction", chunked_distill_lacking(case))


PROVIDERS += (
    Provider(name="trl_chunked_divergence", kernel="flkd", **PEER, load=_trl_chunked_divergence,
             supports=flkd_supports, description="TRL's ChunkedDivergenceFunction as DistillationTrainer calls it "
             "(counted rows only, sum / count)"),
)  # fmt: skip
# ----------------------------------------------------------------------------- end of flkd

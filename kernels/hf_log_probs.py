"""Per-token log-probs and entropy of a Hugging Face causal LM's completions, from the lm_head
without materialising the logits: the step of an RL trainer (GRPO, PPO) that turns a batch of
prompts + sampled completions into the policy's log-probs.

    from ligerbench.kernels.hf_log_probs import completion_log_probs
    logp, entropy = completion_log_probs(model, input_ids, attention_mask, logits_to_keep=C,
                                         temperature=0.7, completion_mask=mask)
    # logp, entropy: float32 [B, C]; gradients reach the model through both

It does what TRL's GRPOTrainer does with the logits (`_get_per_token_logps_and_entropies`):
run the model on prompt + completion, keep the positions that predict the last C tokens
(logits_to_keep + 1 positions, the last dropped), divide by the sampling temperature, and take
log_softmax at the completion tokens `input_ids[:, -C:]` and the entropy. Here the base model
runs, its last hidden states at those C positions go to our fused kernel
(kernels/fused_linear_log_probs.py) with lm_head's weight and bias and the model's final-logit
softcap (Gemma-2), and no [B, C, V] tensor is ever stored. A position whose completion_mask is
0 (padding after EOS) gets logp 0, entropy 0 and no gradient.

How the weights are reached is the loss patch's (kernels/hf.py): the work runs as the model's
forward and the kernel as lm_head's, each through the module's call (call_as_forward), so that
FSDP2's hooks gather what the root and lm_head own and reduce-scatter their gradients (a model
whose instance has a forward of its own, e.g. inside CausalLMPatch, is refused: nest no patches).
Under tensor parallelism (lm_head ColwiseParallel: its weight a DTensor sharded on the vocab;
alone, or under FSDP2 on a 2-D mesh with lm_head in the root's unit: kernels/hf_parallel.py's
`vocab_sharded_head`) the vocab-parallel op (kernels/vocab_parallel_fused_linear_log_probs.py)
runs on this rank's shard with the tp mesh's group and the shard's first global row
(kernels/hf_parallel.py's `vocab_shard`, uneven shards included), not through lm_head's call;
the hidden states are the same on every rank and their gradient comes back summed over the
group. Every rank gets the whole (logp, entropy).

Supported models: those of kernels/hf.py's SUPPORTED_MODELS (base model, lm_head, optional
final-logit softcap); anything else is refused (TypeError) rather than computed wrong.
"""

from __future__ import annotations

import torch

from .hf import check_supported
from .hf_parallel import call_as_forward, is_dtensor, vocab_shard, vocab_sharded_head


def completion_log_probs(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    logits_to_keep: int,
    temperature: float = 1.0,
    completion_mask: torch.Tensor | None = None,
    ignore_index: int = -100,
    **model_kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp, entropy), float32 [B, logits_to_keep]: log p(input_ids[b, t] | input_ids[b, :t]) at
    `temperature` for the last `logits_to_keep` tokens of each row, and the entropy of that
    distribution (module docstring). `model_kwargs` go to the base model (position_ids, ...)."""
    check_supported(model)
    if input_ids.ndim != 2:
        raise ValueError(f"input_ids must be [batch, length], got shape {tuple(input_ids.shape)}")
    length = input_ids.shape[1]
    if not isinstance(logits_to_keep, int) or not 0 < logits_to_keep < length:
        raise ValueError(
            f"logits_to_keep must be an int in [1, {length - 1}] (the completion's length; position 0 predicts "
            f"nothing), got {logits_to_keep!r}"
        )
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    target = input_ids[:, -logits_to_keep:]
    if completion_mask is not None:
        if completion_mask.shape != target.shape:
            raise ValueError(
                f"completion_mask must be shaped like the completion {tuple(target.shape)}, "
                f"got {tuple(completion_mask.shape)}"
            )
        target = torch.where(completion_mask.bool(), target, ignore_index)
    head = model.lm_head
    softcap = getattr(model.config, "final_logit_softcapping", None)
    options = dict(temperature=temperature, softcap=softcap, ignore_index=ignore_index)

    def head_forward(x):  # runs as lm_head's forward: its weight is the one the module sees now
        if is_dtensor(head.weight):
            raise TypeError(
                "lm_head's weight is still a DTensor inside lm_head's own forward under FSDP2 (composed with "
                "tensor parallelism?): the fused op needs the whole weight there"
            )
        from .fused_linear_log_probs import fused_linear_log_probs

        return fused_linear_log_probs(x, head.weight, target.to(x.device), bias=head.bias, **options)

    def model_forward(ids):  # runs as the model's forward: FSDP2's root hooks gather what it owns
        # decided here, where the root has gathered what it owns (under FSDP2 x TP, lm_head's dp
        # dim), before the base model runs: other placements are refused before its work
        shard = vocab_shard(head) if vocab_sharded_head(model) else None
        outputs = model.model(input_ids=ids, attention_mask=attention_mask, **model_kwargs)
        # positions L-C-1 .. L-2 predict tokens L-C .. L-1 (a strided view, handed to the kernel as is)
        hidden = outputs.last_hidden_state[:, -logits_to_keep - 1 : -1, :]
        if shard is None:
            return call_as_forward(head, head_forward, hidden)
        from .vocab_parallel_fused_linear_log_probs import vocab_parallel_fused_linear_log_probs

        weight, bias, group, start = shard
        return vocab_parallel_fused_linear_log_probs(
            hidden, weight, target.to(hidden.device), bias=bias, group=group, vocab_start=start, **options
        )

    return call_as_forward(model, model_forward, input_ids)

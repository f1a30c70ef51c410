"""One training run of a mini model, as transformers does it or with a patch applied.

    from ligerbench.converge.train import train
    ref = train(model, batches, lr=1e-2)                            # transformers' own loss
    with patch_causal_lm(model2, "ce") as p: ours = train(model2, batches, lr=1e-2)

Both runs of a comparison start from the same weights (same builder and seed), see the same
batches in the same order and use the same AdamW settings, so any difference comes from the
loss path. Step 0 is also captured in detail (hidden states, logits and their gradients): there
the weights are still identical, so the kernel's own error can be judged against a float64
truth, apart from the drift that training adds later.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ligerbench.converge.data import Batch

# Transformers-style fine-tuning defaults; weight decay on so that the update touches every
# parameter every step (a parameter the loss does not reach would still be compared).
BETAS = (0.9, 0.95)
WEIGHT_DECAY = 0.01


@dataclass
class StepZero:
    """What the first forward/backward saw, weights untouched by the optimizer."""

    hidden: torch.Tensor | None = None  # last hidden state (lm_head's input), detached copy
    hidden_grad: torch.Tensor | None = None
    logits_grad: torch.Tensor | None = None  # of lm_head's output; None when never materialised
    head_weight: torch.Tensor | None = None
    labels: torch.Tensor | None = None
    grads: dict[str, torch.Tensor] | None = None  # every parameter's gradient (train's keep_grads)


@dataclass
class RunResult:
    losses: list[float]
    params: dict[str, torch.Tensor]
    step0: StepZero = field(default_factory=StepZero)


def _capture_step0(model, store: StepZero) -> list:
    """Per-instance module hooks (removed after step 0) that keep the tensors and their gradients.

    The logits gradient is taken from an autograd hook on lm_head's output, never read back from
    the logits buffer: a kernel that writes its gradient in place would make "the logits" after
    backward be the gradient (docs/bugs.md, bug 3)."""

    def on_base(_module, _args, output):
        h = output.last_hidden_state
        store.hidden = h.detach().clone()
        if h.requires_grad:
            h.register_hook(lambda g: setattr(store, "hidden_grad", g.detach().clone()))

    def on_head(_module, _args, output):
        # under the flce patch the fused loss runs as lm_head's forward: its output is then the
        # scalar loss, not logits (kernels/hf_parallel.py, call_as_forward), and there are no
        # logits; under completion_log_probs it is the (logp, entropy) pair
        if isinstance(output, torch.Tensor) and output.requires_grad and output.dim() >= 2:
            output.register_hook(lambda g: setattr(store, "logits_grad", g.detach().clone()))

    return [model.model.register_forward_hook(on_base), model.lm_head.register_forward_hook(on_head)]


def train(
    model: torch.nn.Module,
    batches: list[Batch],
    *,
    lr: float,
    on_step: Callable[[int, float], None] | None = None,
    loss_fn: Callable | None = None,
    keep_grads: bool = False,
) -> RunResult:
    """AdamW over `batches`, one step each; returns the loss per step and the final parameters.

    `loss_fn(model, inputs)` replaces `model(**inputs).loss` (the float64 truth run passes
    float64_causal_lm_loss). `keep_grads`: step 0's parameter gradients are kept in
    `step0.grads` (before the update: those of one forward/backward on the first batch).
    The losses are read back at the end, not per step, unless `on_step` asks for each: a read
    is a host sync, and the GPU would idle while the next step is launched."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=BETAS, weight_decay=WEIGHT_DECAY)
    device = next(model.parameters()).device
    step0 = StepZero(head_weight=model.lm_head.weight.detach().clone())
    losses = []
    for step, batch in enumerate([b.to(device) for b in batches]):
        handles = _capture_step0(model, step0) if step == 0 else []
        inputs = batch.inputs()
        if step == 0:
            step0.labels = inputs["labels"].clone()
        try:
            loss = loss_fn(model, inputs) if loss_fn else model(**inputs).loss
            loss.backward()
        finally:
            for h in handles:
                h.remove()
        if step == 0 and keep_grads:
            step0.grads = grads_of(model)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
        if on_step:
            on_step(step, float(losses[-1]))
    params = {name: p.detach().clone() for name, p in model.named_parameters()}
    return RunResult(torch.stack(losses).tolist() if losses else [], params, step0)


def float64_causal_lm_loss(model, inputs: dict) -> torch.Tensor:
    """transformers' ForCausalLMLoss (labels shifted by one, mean over targets != -100) computed
    in the logits' own dtype. transformers' version upcasts with `logits.float()`, which for a
    float64 model rounds the logits to float32: the float64 truth run must not use it. The
    logits come from the model's own forward (Gemma-2's softcap included)."""
    logits = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits
    target = torch.nn.functional.pad(inputs["labels"], (0, 1), value=-100)[..., 1:]
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), target.reshape(-1).to(logits.device), ignore_index=-100
    )


@torch.no_grad()
def eval_logprobs(model, batch: Batch) -> torch.Tensor:
    """Log-probabilities [B, T, V] in eval mode (no labels: the logits path), in float32, or
    float64 for a float64 model."""
    model.eval()
    b = batch.to(next(model.parameters()).device)
    logits = model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits
    model.train()
    return torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)


def topk_logprob_error(ref: torch.Tensor, ours: torch.Tensor, mask: torch.Tensor, k: int) -> float:
    """Largest |difference| of log-probabilities at the reference's top-k tokens, over real tokens
    (the reference is the float64 truth run in the convergence suite).

    Compared at the reference's indices (not each side's own top-k) so that two tokens of nearly
    equal probability swapping places does not count as an error, while a wrong value does."""
    idx = ref.topk(k, dim=-1).indices
    diff = (ref.gather(-1, idx).double() - ours.gather(-1, idx).double()).abs().amax(-1)
    return float(diff[mask.bool()].max())


def grads_of(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def flat(tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    """All tensors of a name -> tensor dict, in name order, as one float64 vector."""
    return torch.cat([tensors[n].reshape(-1).double() for n in sorted(tensors)])

"""The GRPO family of policy losses on our fused log-probs (kernels/fused_linear_log_probs.py):
the completion's per-token log-probs from the lm_head without the logits, then the loss in
PyTorch on [B, T] tensors.

    from ligerbench.kernels.grpo_loss import grpo_loss
    loss = grpo_loss(hidden, lm_head.weight, completion_ids, old_logp, ref_logp, advantages, mask,
                     loss_type="dapo", beta=0.04, temperature=0.7, num_items=tokens_in_the_whole_step)
    loss.backward()

Per token (logp: the policy's log-prob of completion_ids at `temperature`; A: the sequence's
advantage; r = exp(logp - old_logp), or under importance_level="sequence" (GSPO, Zheng et al.
2025) r = exp of the masked mean of (logp - old_logp) over the sequence, the same for its tokens):
  clipped losses (grpo, bnpo, dr_grpo, dapo):  l = -min(r * A, clip(r, 1 - eps_low, 1 + eps_high) * A)
                                               (PPO's pessimistic bound: for A < 0 the clip binds above)
  cispo (MiniMax-M1, 2025):                    l = -sg[min(r, 1 + eps_high)] * A * logp
plus, when beta > 0, beta * KL per token against the reference policy, with d = ref_logp - logp:
  k1: -d (= logp - ref_logp)      k3: exp(d) - d - 1 (Schulman's unbiased, >= 0 estimator)
The tokens are then reduced (m: the mask, 1 for a completion token, 0 for padding):
  grpo     mean over sequences of each sequence's token mean   (Shao et al. 2024, DeepSeekMath)
  bnpo     sum over the batch's tokens / their count            (a token mean of this batch)
  dr_grpo  sum / (B * max_completion_length)                    (Liu et al. 2025, "Dr. GRPO": a constant)
  dapo     sum / num_items                                      (Yu et al. 2025: a token mean over the
  cispo    sum / num_items                                       whole step; num_items None: this batch's)
Splitting a step: with gradient accumulation over k equal micro-batches or data parallelism over k
ranks, the one-batch gradient is the SUM of the micro-batches' (ranks') gradients when dapo/cispo
get num_items = the step's token count, and their MEAN for grpo and dr_grpo (equal micro-batch
sizes; dr_grpo's max_completion_length the step's). bnpo is a token mean of each micro-batch and
does not split exactly: that is its definition, not something num_items fixes.

Shapes: hidden [B, T, H] (any strides), weight [V, H], completion_ids / old_logp / ref_logp / mask
[B, T], advantages [B]; old_logp, ref_logp and advantages are data (no gradient). Returns the
float32 scalar loss; gradients reach hidden, weight and bias. No host sync.

Design, two paths (`path`; "auto", the default, takes "eager" wherever it applies and, on a GPU,
where its chunks are large enough to pay: eager_pays):
- "eager" (6*N*H*V FLOPs, N = B*T): the loss is a scalar and, with token-level ratios, each
  token's dL/dlogp_i depends only on its own logp_i, its data and constants known before the
  forward (the denominators), so forward forms the gradients, as fused_linear_cross_entropy does
  for its scalar reductions. Per chunk of rows: float32 logits (fp32_products.logits_fp32, never
  rounded to 16 bits); log_probs' forward kernel gives logp and the row statistics; the weights
  w_i = dL/dlogp_i by torch.autograd.grad of token_terms on the chunk (the very formula
  policy_loss differentiates: ties of min, clamp bounds and cispo's stop-gradient behave as
  there), with upstream the reduction's own gradient (token_coefficients, autograd of
  reduce_tokens: [B, T] floats); log_probs' backward kernel writes dL/dz with upstream w_i
  (entropy's: none) into the logits' own storage (16-bit inputs: the lower half of each row's
  bytes, fp32_products.grad_under_logits); then grad_hidden[chunk] = dz @ W, grad_weight +=
  dz.T @ h_chunk and grad_bias by kernels/chunk_grads.py, the weight's accumulation ("dtype" or
  "fp32") chosen by fused_linear_cross_entropy.plan (its AUTO_DTYPE_MAX_CHUNKS rule). The loss
  is policy_loss of the chunks' logp. Backward only scales the stored gradients by the upstream
  scalar, on the device (chunk_grads.scale_: nothing written when it is 1; no host sync); one
  backward per forward. Memory beyond the gradients (which exist from the forward on): the
  budget `chunk_bytes` for the chunk's float32 logits (4 bytes a logit, the gradient in the same
  storage; at least one row), the fp32 [V, H] accumulator only where plan takes it within the
  budget, O(N) floats, and a copy of hidden where its rows are not contiguous. At the Llama-3-8B
  head (V=128256), N=8192, bf16, the default 192 MiB: 22 chunks of 384 rows, "dtype"
  accumulation, ~1066 MiB of gradients + 188 MiB.
- "recompute" (8*N*H*V): fused_linear_log_probs gives logp (forward keeps 12 bytes a row), the
  loss is policy_loss on it, and autograd carries dL/dlogp into flp's backward, which recomputes
  the logits by vocabulary slices. Taken for importance_level="sequence" (a sequence's tokens
  share one ratio: a token's weight depends on the whole sequence's logp), when no gradient is
  wanted (no_grad, or none of hidden, weight, bias requires one), and when old_logp, ref_logp,
  advantages, mask or num_items requires a gradient (the data then takes part in autograd),
  and on a GPU where eager's chunks are too small to pay for their weight-gradient passes
  (eager_pays: fewer rows than ~2 x matmul rate / HBM bandwidth; an H100 at the default budget).
The two agree to float32 summation order (tests/test_grpo_eager.py); in 16-bit the eager
weight gradient is a running sum rounded once a chunk ("dtype"), as flce's.
"""

from __future__ import annotations

import functools
from typing import Literal

import torch

from .chunk_grads import ChunkGrads, scale_
from .chunking import DEFAULT_CHUNK_BYTES
from .compile_boundary import opaque
from .fp32_products import SHARED_LOGIT_BYTES, grad_under_logits, logits_fp32
from .fused_linear_cross_entropy import GradWeightAccum, check_accum, plan
from .fused_linear_log_probs import _spans, fused_linear_log_probs
from .fused_linear_log_probs import _validate as _validate_flp
from .log_probs import N_STATS, log_probs_grad_rows, log_probs_rows

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo")
IMPORTANCE_LEVELS = ("token", "sequence")
KL_ESTIMATORS = ("k1", "k3")
Path = Literal["auto", "eager", "recompute"]
PATHS = ("auto", "eager", "recompute")
IGNORE = -100  # the target id of a masked token


def _check(loss_type, importance_level, kl_estimator, eps_low, eps_high, beta, temperature, shapes) -> None:
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    if importance_level not in IMPORTANCE_LEVELS:
        raise ValueError(f"importance_level must be one of {IMPORTANCE_LEVELS}, got {importance_level!r}")
    if kl_estimator not in KL_ESTIMATORS:
        raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {kl_estimator!r}")
    if not (eps_low >= 0 and eps_high >= 0):
        raise ValueError(f"eps_low and eps_high must be >= 0, got {eps_low}, {eps_high}")
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    rows = shapes["completion_ids"]
    for name in ("old_logp", "ref_logp", "mask"):
        if shapes[name] is not None and shapes[name] != rows:
            raise ValueError(f"{name} must be shaped like completion_ids {tuple(rows)}, got {tuple(shapes[name])}")
    if shapes["advantages"] != rows[:1]:
        raise ValueError(f"advantages must be [B] = {tuple(rows[:1])}, got {tuple(shapes['advantages'])}")


_TERMS = ("loss_type", "importance_level", "eps_low", "eps_high", "beta", "kl_estimator")
_REDUCTION = ("loss_type", "num_items", "max_completion_length")


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    loss_type: str = "grpo",
    importance_level: str = "token",
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    beta: float = 0.0,
    kl_estimator: str = "k3",
    num_items=None,
    max_completion_length: int | None = None,
) -> torch.Tensor:
    """The loss (module docstring) from per-token log-probs logp [B, T] (float32, with gradient):
    the part of grpo_loss after the log-probs, for a caller that has them already."""
    m = mask.to(torch.float32)
    a = advantages.to(torch.float32)[:, None]
    per_token = token_terms(
        logp, old_logp, ref_logp, a, m, loss_type=loss_type, importance_level=importance_level, eps_low=eps_low,
        eps_high=eps_high, beta=beta, kl_estimator=kl_estimator,
    )  # fmt: skip
    return reduce_tokens(per_token, m, loss_type=loss_type, num_items=num_items,
                         max_completion_length=max_completion_length)  # fmt: skip


def token_terms(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    a: torch.Tensor,
    m: torch.Tensor,
    *,
    loss_type: str,
    importance_level: str,
    eps_low: float,
    eps_high: float,
    beta: float,
    kl_estimator: str,
) -> torch.Tensor:
    """Each token's loss times its mask m (float32), from logp, the advantages `a` broadcast to
    the tokens and the data: [B, T] tensors, or any rows of them under importance_level="token"
    (then every op is per token: the eager path calls it on a chunk of rows)."""
    log_ratio = logp - old_logp.to(torch.float32)
    if importance_level == "sequence":
        log_ratio = (log_ratio * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1.0)
    ratio = torch.exp(log_ratio)
    if loss_type == "cispo":
        per_token = -torch.clamp(ratio, max=1.0 + eps_high).detach() * a * logp
    else:
        per_token = -torch.minimum(ratio * a, torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * a)
    if beta > 0.0:
        d = ref_logp.to(torch.float32) - logp
        per_token = per_token + beta * (-d if kl_estimator == "k1" else torch.exp(d) - d - 1.0)
    return per_token * m


def reduce_tokens(
    per_token: torch.Tensor, m: torch.Tensor, *, loss_type: str, num_items=None, max_completion_length=None
) -> torch.Tensor:
    """The loss from the masked per-token losses [B, T] (token_terms) and the mask m: the
    reduction of the module docstring. Linear in per_token."""
    if loss_type == "grpo":
        return (per_token.sum(-1) / m.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return per_token.sum() / m.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        return per_token.sum() / (m.shape[0] * (max_completion_length or m.shape[1]))
    return per_token.sum() / (m.sum().clamp(min=1.0) if num_items is None else num_items)


def token_coefficients(m: torch.Tensor, reduction: dict) -> torch.Tensor:
    """d loss / d (masked per-token loss) [B, T], float32: the reduction's gradient, taken by
    autograd from reduce_tokens itself (it is linear, so any per-token values give it), so each
    denominator is divided in exactly as the recompute path's backward divides it."""
    with torch.enable_grad():
        leaf = torch.zeros_like(m, requires_grad=True)
        (coef,) = torch.autograd.grad(reduce_tokens(leaf, m, **reduction), leaf)
    return coef


class EagerGRPOFunction(torch.autograd.Function):
    """path="eager" (module docstring): the loss and, in forward, its gradients of hidden,
    weight and bias; backward only scales them by the upstream scalar. forward(...) returns the
    float32 scalar loss. Replaceable parts, as class attributes (a planted bug in
    suites/grpo/mutants.py is a subclass that overrides one): TOKEN_TERMS, the per-token
    formula the weights dL/dlogp are taken from; SCALE, the in-place rescaling by the upstream."""

    TOKEN_TERMS = staticmethod(token_terms)
    SCALE = staticmethod(scale_)

    @classmethod
    def forward(cls, ctx, hidden, weight, bias, target, old_logp, ref_logp, advantages, mask, options, need,
                chunk_bytes, grad_weight_accum):  # fmt: skip
        if options["importance_level"] != "token":
            raise ValueError("the eager path takes importance_level='token' only (module docstring)")
        temperature = options["temperature"]
        t2 = _validate_flp(hidden, weight, bias, target, temperature, None, 1.0)
        check_accum(grad_weight_accum)
        h = hidden.reshape(-1, hidden.shape[-1]).contiguous()
        w = weight.contiguous()
        b32 = None if bias is None else bias.float()
        n, v = h.shape[0], w.shape[0]
        chunk, accum = plan(n, v, h.shape[1], SHARED_LOGIT_BYTES, chunk_bytes, None, grad_weight_accum)
        need_h, need_w, need_b = need
        grads = ChunkGrads(h, w, need_h=need_h, need_w=need_w, need_b=need_b, accum=accum,
                           bias_dtype=None if bias is None else bias.dtype)  # fmt: skip
        terms = {k: options[k] for k in _TERMS}
        m = mask.to(torch.float32)
        # per-token data as rows [N], so a chunk of rows is a slice
        coef = token_coefficients(m, {k: options[k] for k in _REDUCTION}).reshape(-1)
        a = advantages.to(torch.float32)[:, None].expand(m.shape).reshape(-1)
        old, m_rows = old_logp.reshape(-1), m.reshape(-1)
        ref = None if ref_logp is None else ref_logp.reshape(-1)
        opts = dict(temperature=temperature, softcap=None, logit_scale=1.0, ignore_index=IGNORE)
        dev = h.device
        logp = torch.empty(n, 1, dtype=torch.float32, device=dev)
        rows_max = min(chunk, n)
        buf = torch.empty(rows_max * v, dtype=torch.float32, device=dev)
        entropy = torch.empty(rows_max, dtype=torch.float32, device=dev)  # written by the kernel, unused
        stats = torch.empty(rows_max, N_STATS, dtype=torch.float32, device=dev)
        for start, stop in _spans(n, chunk):
            k, rows, h_c = stop - start, slice(start, stop), h[start:stop]
            x = buf[: k * v].view(k, v)
            logits_fp32(h_c, w, b32, x)
            log_probs_rows(x, t2[rows], **opts, out=(logp[rows], entropy[:k], stats[:k]))
            if not any(need):
                continue
            with torch.enable_grad():
                lp = logp[rows, 0].detach().requires_grad_(True)
                per_token = cls.TOKEN_TERMS(lp, old[rows], None if ref is None else ref[rows], a[rows], m_rows[rows],
                                            **terms)  # fmt: skip
                (dlogp,) = torch.autograd.grad(per_token, lp, grad_outputs=coef[rows])
            dlogp = dlogp.reshape(k, 1).contiguous()  # as the kernel reads it: float32 [k, 1]
            # dL/dz into the float32 logits' own storage (16-bit: the lower half of each row's
            # bytes, fp32_products.grad_under_logits: the kernel walks a row forwards)
            g = grad_under_logits(x, h.dtype)
            log_probs_grad_rows(x, t2[rows], stats[:k], dlogp, None, g, **opts)
            grads.add(start, stop, h_c, g, w)
        del buf  # before the fp32 accumulator's conversion: the two never coexist
        ctx.grads = grads.result()
        ctx.hidden_shape = hidden.shape
        options = {k: options[k] for k in (*_TERMS, *_REDUCTION)}
        return policy_loss(logp.view(mask.shape), old_logp, ref_logp, advantages, mask, **options)

    @classmethod
    def backward(cls, ctx, grad_loss):
        grads, ctx.grads = ctx.grads, None
        if grads is None:
            raise RuntimeError(
                "grpo_loss (path='eager') backward ran twice on one forward: the gradients are formed "
                "in forward and scaled in place, so they can be used once"
            )
        for g in grads:
            if g is not None and g.numel():
                cls.SCALE(g, grad_loss)  # on the device: no host sync, nothing written when it is 1
        grad_h, grad_w, grad_b = grads
        grad_h = None if grad_h is None else grad_h.view(ctx.hidden_shape)
        return (grad_h, grad_w, grad_b) + (None,) * 9


def _requires_grad(t) -> bool:
    return isinstance(t, torch.Tensor) and t.requires_grad


# On a GPU the eager path's weight-gradient accumulation reads and writes the [V, H] gradient once
# a chunk (~4*V*H bytes that cuBLAS does not hide behind the product); the recompute path instead
# makes the logits twice (2*N*H*V more FLOPs). Eager pays when a chunk holds at least ~2 x the
# GPU's matmul rate / its HBM bandwidth rows: ~527 on an H100 (790 TFLOP/s, 3.0 TB/s), ~367 on an
# H200 (4.3 TB/s). Measured at the Llama-3-8B head, N=8192, bf16, the default budget (384 rows a
# chunk): H100 eager 54.26 ms, recompute 51.07 (results/runs/bench-grpo-heads-h100/); H200 eager
# 48.51, recompute 51.22 (results/runs/bench-grpo-heads-h200/).
EAGER_MIN_ROWS = 384
EAGER_MIN_ROWS_BY_NAME = (("H100", 512),)  # (part of torch.cuda.get_device_name, rows)


def eager_min_rows(device_name: str) -> int:
    return next((rows for part, rows in EAGER_MIN_ROWS_BY_NAME if part in device_name), EAGER_MIN_ROWS)


@functools.cache
def _gpu_min_rows(index: int) -> int:
    return eager_min_rows(torch.cuda.get_device_name(index))


def eager_pays(n_rows: int, n_classes: int, n_hidden: int, chunk_bytes: int, accum: str, min_rows: int) -> bool:
    """Whether "auto" should take the eager path on a GPU: the chunk its forward would cut (the
    same `plan`: float32 logits at 4 bytes a logit within `chunk_bytes`, less an fp32
    accumulator's share where plan takes one) holds every row or at least `min_rows`."""
    rows, _ = plan(n_rows, n_classes, n_hidden, SHARED_LOGIT_BYTES, chunk_bytes, None, accum)
    return rows >= n_rows or rows >= min_rows


def resolve_path(
    path: str, importance_level: str, grad_needed: bool, data_requires_grad: bool, eager_fast: bool = True
) -> str:
    """ "eager" or "recompute" for `path` (module docstring): "auto" takes "eager" where it
    applies (token-level ratios, a gradient wanted, old_logp / ref_logp / advantages /
    num_items without gradients) and `eager_fast` (eager_pays; always on CPU), else "recompute"."""
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    fits = importance_level == "token" and not data_requires_grad
    if path == "eager" and not fits:
        raise ValueError(
            "path='eager' needs importance_level='token' (a sequence's tokens share one ratio) and "
            "old_logp, ref_logp, advantages and num_items without gradients: use path='recompute'"
        )
    if path != "auto":
        return path
    return "eager" if fits and grad_needed and eager_fast else "recompute"


@opaque  # torch.compile runs it as it is, outside the graph: kernels/compile_boundary.py
def eager_loss(function, hidden, weight, completion_ids, old_logp, ref_logp, advantages, mask, *, bias, options,
               chunk_bytes, grad_weight_accum):  # fmt: skip
    """The loss through `function` (EagerGRPOFunction or a variant of it); `options`: every
    loss option of grpo_loss, temperature included."""
    need = tuple(torch.is_grad_enabled() and _requires_grad(t) for t in (hidden, weight, bias))
    target = torch.where(mask.bool(), completion_ids, IGNORE)
    return function.apply(hidden, weight, bias, target, old_logp, ref_logp, advantages, mask, options, need,
                          chunk_bytes, grad_weight_accum)  # fmt: skip


# policy_loss's options, passed through: the public function names them for its callers
def grpo_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    completion_ids: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    loss_type: str = "grpo",
    importance_level: str = "token",
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    beta: float = 0.0,
    kl_estimator: str = "k3",
    temperature: float = 1.0,
    num_items=None,
    max_completion_length: int | None = None,
    path: Path = "auto",
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    grad_weight_accum: GradWeightAccum = "auto",
) -> torch.Tensor:
    """The policy loss of the module docstring, the log-probs from our fused op.

    path: "auto" (default), "eager" or "recompute": how the gradients are formed (module
    docstring); "auto" takes "eager" wherever it applies and, on a GPU, its chunks hold enough
    rows to beat the recompute (eager_pays). chunk_bytes: the working memory
    budget beyond the gradients (default DEFAULT_CHUNK_BYTES, 192 MiB): the eager path's row
    chunk of float32 logits, the recompute path's vocabulary slices. grad_weight_accum: the
    eager path's weight-gradient accumulation, "auto", "dtype" or "fp32", as
    fused_linear_cross_entropy's (the recompute path forms each slice's once)."""
    shapes = {"completion_ids": tuple(completion_ids.shape), "old_logp": tuple(old_logp.shape),
              "ref_logp": None if ref_logp is None else tuple(ref_logp.shape), "mask": tuple(mask.shape),
              "advantages": tuple(advantages.shape)}  # fmt: skip
    _check(loss_type, importance_level, kl_estimator, eps_low, eps_high, beta, temperature, shapes)
    if beta > 0.0 and ref_logp is None:
        raise ValueError("beta > 0 needs ref_logp (the reference policy's log-probs)")
    options = dict(loss_type=loss_type, importance_level=importance_level, eps_low=eps_low, eps_high=eps_high,
                   beta=beta, kl_estimator=kl_estimator, num_items=num_items,
                   max_completion_length=max_completion_length)  # fmt: skip
    grad_needed = torch.is_grad_enabled() and any(_requires_grad(t) for t in (hidden, weight, bias))
    data_grad = any(_requires_grad(t) for t in (old_logp, ref_logp, advantages, mask, num_items))
    eager_fast = True
    if path == "auto" and hidden.is_cuda:
        n_rows = completion_ids.numel()
        index = hidden.device.index if hidden.device.index is not None else torch.cuda.current_device()
        min_rows = _gpu_min_rows(index)
        check_accum(grad_weight_accum)
        eager_fast = eager_pays(n_rows, weight.shape[0], weight.shape[1], chunk_bytes, grad_weight_accum, min_rows)
    if resolve_path(path, importance_level, grad_needed, data_grad, eager_fast) == "eager":
        return eager_loss(
            EagerGRPOFunction, hidden, weight, completion_ids, old_logp, ref_logp, advantages, mask, bias=bias,
            options={**options, "temperature": temperature}, chunk_bytes=chunk_bytes,
            grad_weight_accum=grad_weight_accum,
        )  # fmt: skip
    target = torch.where(mask.bool(), completion_ids, IGNORE)
    logp, _ = fused_linear_log_probs(hidden, weight, target, bias=bias, temperature=temperature,
                                     chunk_bytes=chunk_bytes)  # fmt: skip
    return policy_loss(logp, old_logp, ref_logp, advantages, mask, **options)

"""No host sync on any default path of our kernels on a GPU (forward and backward of cross_entropy,
fused_linear_cross_entropy, the vocab-parallel CE in one process, grpo_loss's two paths and the
transformers patch), and out-of-range targets still caught there, on the device.

Each call runs once first (Triton compiles; cuBLAS makes its handles), then again under
`torch.cuda.set_sync_debug_mode("error")`, where any synchronizing call (.item(), bool(tensor),
a blocking copy to the host, torch.nonzero, ...) raises."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
import types

import pytest
import torch

from ligerbench.kernels.cross_entropy import cross_entropy
from ligerbench.kernels.fused_linear_cross_entropy import fused_linear_cross_entropy
from ligerbench.kernels.hf import CausalLMPatch

pytestmark = pytest.mark.gpu


@contextlib.contextmanager
def no_sync():
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


def _twice(step):
    """Run `step` once to warm up, then under the sync detector; returns the second result."""
    step()
    with no_sync():
        return step()


def _ce_inputs(n=64, v=1000, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    logits = torch.randn(n, v, device="cuda", generator=g).to(dtype)
    target = torch.randint(0, v, (n,), device="cuda", generator=g)
    target[::7] = -100
    return logits, target


CE_OPTIONS = [
    {},
    {"reduction": "sum"},
    {"reduction": "none"},
    {"label_smoothing": 0.1, "softcap": 30.0, "z_loss_scale": 1e-4, "return_z_loss": True},
    {"inplace_backward": True},
    {"check_targets": False},
]


def _vocab_parallel(x, target, weight=None, **kw):
    """The vocab-parallel CE in one process (world 1: its gather is a copy), vocab_start given."""
    from ligerbench.kernels.vocab_parallel_cross_entropy import vocab_parallel_cross_entropy

    return vocab_parallel_cross_entropy(x, target, vocab_start=0, class_weight_shard=weight, **kw)


# cross_entropy, and the vocab-parallel CE's GPU path (statistics kernel, gather, finishing kernel)
CE_OPS = {"cross_entropy": cross_entropy, "vocab_parallel": _vocab_parallel}


@pytest.mark.parametrize("op", list(CE_OPS))
@pytest.mark.parametrize("opts", CE_OPTIONS, ids=[str(sorted(o)) for o in CE_OPTIONS])
def test_cross_entropy_forward_backward_never_syncs(opts, op):
    logits, target = _ce_inputs()
    weight = torch.rand(logits.shape[1], device="cuda")
    token_weight = torch.rand(logits.shape[0], device="cuda")

    def step():
        x = logits.clone().requires_grad_()
        extra = {"weight": weight, "token_weight": token_weight} if "label_smoothing" in opts else {}
        out = CE_OPS[op](x, target, **opts, **extra)
        loss = out[0] if isinstance(out, tuple) else out
        up = torch.rand_like(loss) if loss.dim() else torch.full((), 2.0, device="cuda")
        loss.backward(up)
        return x.grad

    grad = _twice(step)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


FLCE_OPTIONS = [
    {},
    {"reduction": "none"},
    {"reduction": "sum", "chunk_tokens": 5},  # many chunks: "auto" takes the fp32 accumulator
    {"chunk_bytes": 2**16},  # the budget sizes the chunks
    {"bias": True, "label_smoothing": 0.1, "softcap": 30.0, "z_loss_scale": 1e-4},
]


@pytest.mark.parametrize("opts", FLCE_OPTIONS, ids=[str(sorted(o)) for o in FLCE_OPTIONS])
def test_fused_linear_forward_backward_never_syncs(opts):
    opts = dict(opts)
    n, h_dim, v = 96, 64, 1000
    g = torch.Generator(device="cuda").manual_seed(1)
    h = torch.randn(n, h_dim, device="cuda", generator=g).bfloat16()
    w = (torch.randn(v, h_dim, device="cuda", generator=g) / 8).bfloat16()
    b = torch.randn(v, device="cuda", generator=g).bfloat16() if opts.pop("bias", False) else None
    target = torch.randint(0, v, (n,), device="cuda", generator=g)
    target[::5] = -100

    def step():
        hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
        bb = None if b is None else b.clone().requires_grad_()
        loss = fused_linear_cross_entropy(hh, ww, target, bias=bb, **opts)
        loss.backward(torch.rand_like(loss) if loss.dim() else None)
        return hh.grad, ww.grad

    gh, gw = _twice(step)
    assert torch.isfinite(gh).all() and torch.isfinite(gw).all() and gw.abs().sum() > 0


GRPO_OPTIONS = [
    {"path": "eager"},
    {"path": "eager", "chunk_bytes": 2**16, "loss_type": "grpo", "beta": 0.04, "bias": True},  # several chunks
    {"path": "eager", "loss_type": "cispo", "num_items": "tensor"},
    {"path": "recompute"},
]


@pytest.mark.parametrize("opts", GRPO_OPTIONS, ids=[str(sorted(o.items())) for o in GRPO_OPTIONS])
def test_grpo_loss_forward_backward_never_syncs(opts):
    from ligerbench.kernels.grpo_loss import grpo_loss

    opts = dict(opts)
    b_dim, t_dim, h_dim, v = 4, 24, 64, 1000
    g = torch.Generator(device="cuda").manual_seed(2)
    h = torch.randn(b_dim, t_dim, h_dim, device="cuda", generator=g).bfloat16()
    w = (torch.randn(v, h_dim, device="cuda", generator=g) / 8).bfloat16()
    b = torch.randn(v, device="cuda", generator=g).bfloat16() if opts.pop("bias", False) else None
    ids = torch.randint(0, v, (b_dim, t_dim), device="cuda", generator=g)
    old = 0.1 * torch.randn(b_dim, t_dim, device="cuda", generator=g) - 7.0  # log-probs near log(1/v): r ~ 1
    ref = old + 0.1
    adv = torch.randn(b_dim, device="cuda", generator=g)
    mask = torch.ones(b_dim, t_dim, dtype=torch.long, device="cuda")
    mask[1, t_dim // 2 :] = 0
    if opts.get("num_items") == "tensor":
        opts["num_items"] = mask.sum()

    def step():
        hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
        bb = None if b is None else b.clone().requires_grad_()
        loss = grpo_loss(hh, ww, ids, old, ref, adv, mask, bias=bb, **opts)
        loss.backward(torch.full((), 0.5, device="cuda"))
        return hh.grad, ww.grad

    gh, gw = _twice(step)
    assert torch.isfinite(gh).all() and torch.isfinite(gw).all() and gw.abs().sum() > 0


class Gemma2ForCausalLM(torch.nn.Module):
    """A stand-in for transformers' Gemma2ForCausalLM (named so that the patch's support check,
    which reads class names, takes it; it has Gemma-2's final-logit softcap): what CausalLMPatch
    touches of a *ForCausalLM, `model` (the base model), `lm_head`, `config`. The base model is
    a fixed tensor, so only our loss path is watched (transformers' own mask building may sync;
    that is not ours)."""

    def __init__(self, hidden, vocab, cap=None):
        super().__init__()
        self.lm_head = torch.nn.Linear(hidden.shape[-1], vocab, bias=False, device="cuda", dtype=hidden.dtype)
        self.config = types.SimpleNamespace(final_logit_softcapping=cap, vocab_size=vocab)
        self.hidden = hidden
        self.model = lambda **kw: types.SimpleNamespace(
            last_hidden_state=self.hidden, past_key_values=None, hidden_states=None, attentions=None
        )


@pytest.mark.parametrize("kind", ["ce", "flce"])
@pytest.mark.parametrize("n_items", [None, 37, "tensor"])
def test_hf_patch_loss_never_syncs(kind, n_items):
    pytest.importorskip("transformers")
    g = torch.Generator(device="cuda").manual_seed(2)
    hidden = torch.randn(2, 24, 32, device="cuda", generator=g).bfloat16()
    model = Gemma2ForCausalLM(hidden, 500, cap=30.0).train()
    labels = torch.randint(0, 500, (2, 24), device="cuda", generator=g)
    extra = {} if n_items is None else {"num_items_in_batch": n_items}
    if n_items == "tensor":
        extra["num_items_in_batch"] = torch.tensor(37, device="cuda")

    def step():
        model.zero_grad(set_to_none=True)
        with CausalLMPatch(model, kind) as patch:
            out = model(input_ids=labels, labels=labels, **extra)
            out.loss.backward()
        assert patch.calls[kind] == 1
        return model.lm_head.weight.grad

    grad = _twice(step)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


BAD_TARGET_CHILD = textwrap.dedent(
    """
    import sys, torch
    from ligerbench.kernels.{module} import {fn}
    kind = "{kind}"
    g = torch.Generator(device="cuda").manual_seed(0)
    t = torch.randint(0, 1000, (64,), device="cuda", generator=g)
    t[9] = {bad}
    torch.cuda.set_sync_debug_mode("error")
    if kind == "ce":
        x = torch.randn(64, 1000, device="cuda", generator=g).bfloat16().requires_grad_()
        loss = {fn}(x, t)
    else:
        h = torch.randn(64, 32, device="cuda", generator=g).bfloat16().requires_grad_()
        w = torch.randn(1000, 32, device="cuda", generator=g).bfloat16().requires_grad_()
        loss = {fn}(h, w, t)
    loss.backward()
    torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    print("NOT CAUGHT", float(loss), flush=True)
    """
)


@pytest.mark.parametrize("kind", ["ce", "flce"])
@pytest.mark.parametrize("bad", [1000, -3])
def test_out_of_range_target_fails_on_the_device(kind, bad):
    """The default check on a GPU: no sync is made for it; the device-side assertion fails the
    CUDA context (the error comes back at the next CUDA call), as PyTorch's own index checks do,
    after the kernel's printf named the value. A child process, since the context is lost."""
    module, fn = ("cross_entropy", "cross_entropy") if kind == "ce" else ("fused_linear_cross_entropy",) * 2
    code = BAD_TARGET_CHILD.format(module=module, fn=fn, kind=kind, bad=bad)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    # the error surfaces at the first CUDA call after the assertion ran (a later launch, or the
    # synchronize): never as a sync made by our code, never as a number
    assert proc.returncode != 0 and "NOT CAUGHT" not in proc.stdout, out[-3000:]
    assert "device-side assert triggered" in out, out[-3000:]
    assert "synchronizing CUDA operation" not in out, out[-3000:]
    assert "target out of range" in out and f"(operand 1) {bad}" in out, out[-3000:]

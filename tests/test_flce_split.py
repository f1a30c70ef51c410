"""flce's `split`: where "auto" cuts by vocabulary, and the vocabulary way against the chunks."""

import pytest
import torch

from ligerbench import tolerance
from ligerbench.kernels.fused_linear_cross_entropy import (
    DEFAULT_CHUNK_BYTES,
    SHARED_LOGIT_BYTES,
    VOCAB_SPLIT_BELOW,
    chunk_size,
    fused_linear_cross_entropy,
    resolve_split,
)


def _auto(n, v, **opts):
    chunk = chunk_size(n, v, SHARED_LOGIT_BYTES, DEFAULT_CHUNK_BYTES, None)
    return resolve_split("auto", n, chunk, opts.get("label_smoothing", 0.0), opts.get("z_loss_scale", 0.0)), chunk


def test_auto_cuts_by_vocabulary_only_where_token_chunks_are_small():
    assert _auto(8192, 256000) == ("vocab", 192)  # Gemma-2: 43 chunks of 192 tokens
    assert _auto(8192, 128256) == ("tokens", 384)  # Llama-3
    assert _auto(8192, 152064)[0] == "tokens" and _auto(8192, 32768)[0] == "tokens"
    assert _auto(128, 256000)[0] == "tokens"  # one chunk holds every token: three products at K = N
    assert _auto(8192, 256000, label_smoothing=0.1)[0] == "tokens"  # the vocabulary way has none
    assert _auto(8192, 256000, z_loss_scale=1e-4)[0] == "tokens"
    assert resolve_split("auto", 8192, None, 0.0, 0.0) == "tokens"  # chunk_tokens forced: keep them
    assert 192 < VOCAB_SPLIT_BELOW <= 384


def test_vocab_split_refuses_what_it_cannot_compute():
    with pytest.raises(ValueError, match="no label smoothing"):
        resolve_split("vocab", 10, 10, 0.1, 0.0)
    with pytest.raises(ValueError, match="split must be"):
        resolve_split("rows", 10, 10, 0.0, 0.0)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_vocab_split_gives_what_the_chunks_give(device, reduction):
    g = torch.Generator().manual_seed(5)
    n, h, v = 37, 16, 211
    hidden = torch.randn(n, h, generator=g).to(device)
    weight = torch.randn(v, h, generator=g).to(device)
    bias = torch.randn(v, generator=g).to(device)
    target = torch.randint(0, v, (n,), generator=g).to(device)
    target[::4] = -100
    cw = (torch.rand(v, generator=g) + 0.5).to(device)
    tw = (torch.rand(n, generator=g) + 0.5).to(device)
    up = (torch.rand(n, generator=g) if reduction == "none" else torch.tensor(0.7)).to(device)
    out = {}
    for split in ("tokens", "vocab"):
        leaves = [t.clone().requires_grad_() for t in (hidden, weight, bias)]
        loss = fused_linear_cross_entropy(
            *leaves[:2], target, bias=leaves[2], class_weight=cw, token_weight=tw, reduction=reduction,
            softcap=15.0, split=split, chunk_tokens=8 if split == "tokens" else None,
        )  # fmt: skip
        loss.backward(up)
        out[split] = [loss.detach(), *(t.grad for t in leaves)]
    for a, b in zip(out["tokens"], out["vocab"], strict=True):
        assert tolerance.rel_error(b, a) < 1e-5

"""flce's `split`: where "auto" cuts by vocabulary, and the vocabulary way against the chunks."""

import pytest
import torch

from ligerbench import tolerance
from ligerbench.kernels.chunking import DEFAULT_CHUNK_BYTES
from ligerbench.kernels.fused_linear_cross_entropy import (
    VOCAB_SPLIT_BELOW,
    default_chunk_bytes,
    fused_linear_cross_entropy,
    resolve_split,
    resolve_split_and_store,
)

CUDA = torch.device("cuda")  # only its type is read: where the chunk sizes are planned for
HIDDEN = {256000: 2304, 128256: 4096, 152064: 3584, 32768: 4096}  # the bench's heads, by vocabulary


def _auto(n, v, dtype=torch.bfloat16, **opts):
    """What "auto" picks at the default budget (a share of the gradients: the head's H counts)."""
    return resolve_split_and_store(
        "auto", "auto", n, v, dtype, CUDA, opts.get("label_smoothing", 0.0), opts.get("softcap"),
        opts.get("z_loss_scale", 0.0), default_chunk_bytes(n, v, HIDDEN[v], dtype), None,
    )  # fmt: skip


def test_auto_cuts_by_vocabulary_only_where_token_chunks_are_small():
    # bf16 without options, on a GPU: 2-byte chunks (kernels/NOTES.md, "the chunk in 2 bytes a
    # logit"; H200 figures: docs/profiles/flce-heads-h200.md)
    assert _auto(8192, 256000) == ("tokens", "shifted16", 384)  # Gemma-2: 64.0 ms by tokens, 67.7 by vocabulary
    assert _auto(8192, 128256) == ("tokens", "shifted16", 640)  # Llama-3
    assert _auto(8192, 152064) == ("tokens", "shifted16", 576)  # Qwen2.5: 52.6 ms by tokens, 57.0 by vocabulary (H100)
    assert _auto(8192, 32768) == ("tokens", "float32", 448)  # Mistral: 2 bytes buy no larger chunk there
    # float32 chunks (fp16 inputs, or options the 2-byte store lacks)
    assert _auto(8192, 256000, torch.float16) == ("vocab", "float32", 192)
    assert _auto(8192, 128256, torch.float16) == ("tokens", "float32", 384)
    assert _auto(8192, 256000, softcap=30.0) == ("vocab", "float32", 192)
    assert _auto(128, 256000)[0] == "tokens"  # one chunk holds every token: three products at K = N
    assert _auto(8192, 256000, label_smoothing=0.1)[0] == "tokens"  # the vocabulary way has none
    assert _auto(8192, 256000, z_loss_scale=1e-4)[0] == "tokens"
    assert resolve_split("auto", 8192, None, 0.0, 0.0) == "tokens"  # chunk_tokens forced: keep them
    # a fixed budget of 192 MiB still cuts Gemma-2 by vocabulary (320-token 2-byte chunks)
    gemma = resolve_split_and_store("auto", "auto", 8192, 256000, torch.bfloat16, CUDA, 0.0, None, 0.0,
                                    DEFAULT_CHUNK_BYTES, None)  # fmt: skip
    assert gemma == ("vocab", "shifted16", 320)
    assert 320 < VOCAB_SPLIT_BELOW <= 512


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

"""kernels/hf.py and kernels/packing.py on their own: the patch is per instance and undone,
and the per-sequence weights give a mean of per-sequence means."""

from __future__ import annotations

import pytest
import torch

from helpers import TINY_DECODER
from ligerbench.kernels.hf import CausalLMPatch, patch_causal_lm
from ligerbench.kernels.packing import per_sequence_token_weights, sequence_index, shift_labels_packed


def _tiny_llama(seed=0):
    import transformers as tf

    torch.manual_seed(seed)
    cfg = tf.LlamaConfig(**TINY_DECODER)
    cfg._attn_implementation = "eager"
    return tf.LlamaForCausalLM(cfg)


def _step(model):
    ids = torch.arange(3, 9).reshape(1, 6)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    return out


@pytest.mark.interpreter
def test_patch_is_per_instance_and_reverted():
    model, other = _tiny_llama(), _tiny_llama()
    class_forward = type(model).forward
    ref_loss = _step(model).loss.detach()
    with patch_causal_lm(model, "ce") as patch:
        assert patch.active and "forward" in vars(model)
        assert "forward" not in vars(other), "another instance must stay untouched"
        loss = _step(model).loss.detach()
        _step(other)
        assert patch.calls == {"ce": 1, "flce": 0}
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=0)
    assert not patch.active and "forward" not in vars(model)
    assert type(model).forward is class_forward
    _step(model)
    assert patch.calls == {"ce": 1, "flce": 0}, "our kernel ran after the context was left"


def test_patch_reverted_when_the_body_raises():
    model = _tiny_llama()
    with pytest.raises(RuntimeError, match="boom"), CausalLMPatch(model, "ce"):
        raise RuntimeError("boom")
    assert "forward" not in vars(model)


def test_nested_patch_refused_and_bad_kind():
    model = _tiny_llama()
    with CausalLMPatch(model, "ce"), pytest.raises(RuntimeError, match="already"), CausalLMPatch(model, "ce"):
        pass
    assert "forward" not in vars(model)
    with pytest.raises(ValueError, match="patch kind"):
        CausalLMPatch(model, "fast")


def test_packed_shift_and_weights_known_example():
    pos = torch.tensor([[0, 1, 2, 0, 1, 2, 3]])
    labels = torch.tensor([[5, 6, 7, 8, 9, 10, 11]])
    target = shift_labels_packed(labels, pos)
    assert target.tolist() == [[6, 7, -100, 9, 10, 11, -100]]  # no target across the boundary
    w = per_sequence_token_weights(target, pos)
    torch.testing.assert_close(w, torch.tensor([[1 / 4, 1 / 4, 0, 1 / 6, 1 / 6, 1 / 6, 0]]))
    assert sequence_index(torch.tensor([[0, 1, 0, 1], [0, 1, 2, 3]])).tolist() == [[0, 0, 1, 1], [2, 2, 2, 2]]


# lengths: uneven (where the two means differ), one sequence, a sequence of one token (no target)
@pytest.mark.parametrize("lengths", [(3, 9, 5), (7,), (1, 6, 4)])
def test_weighted_sum_is_mean_of_sequence_means(lengths):
    gen = torch.Generator().manual_seed(0)
    pos = torch.cat([torch.arange(n) for n in lengths])[None]
    labels = torch.randint(0, 50, pos.shape, generator=gen)
    labels[0, 0] = -100  # a prompt-masked token
    target = shift_labels_packed(labels, pos)
    per_token = torch.rand(pos.shape, generator=gen, dtype=torch.float64)
    got = (per_sequence_token_weights(target, pos).double() * per_token).sum()
    means, start = [], 0
    for n in lengths:
        t, v = target[0, start : start + n], per_token[0, start : start + n]
        if (t != -100).any():
            means.append(v[t != -100].mean())
        start += n
    torch.testing.assert_close(got, torch.stack(means).mean(), rtol=1e-6, atol=0)

"""kernels/hf_log_probs.py: a causal LM's completion log-probs and entropy through our fused op
equal TRL's logits path (logits_to_keep + 1 positions, the last dropped, divided by the
temperature) against a float64 run of the same model, values and every parameter's gradient,
under the one tolerance rule; masked positions give exact zeros; bad input is refused."""

from __future__ import annotations

import copy

import pytest
import torch

from ligerbench.kernels.hf_log_probs import completion_log_probs
from ligerbench.tolerance import limit_for, rel_error

V, C, T = 96, 5, 0.7
COMMON = dict(vocab_size=V, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
              intermediate_size=64, head_dim=16, use_cache=False)  # fmt: skip


def _tiny(class_name: str, **extra):
    import transformers as tf

    cfg = getattr(tf, class_name.replace("ForCausalLM", "Config"))(**COMMON, **extra)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = getattr(tf, class_name)(cfg)
    with torch.no_grad():  # logits of a few units (random init's are tiny: softcap would not bite)
        model.lm_head.weight.mul_(20.0)
    return model


def _batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, V, (3, 9), generator=g)
    attention = torch.ones_like(ids)  # no padding: a fully masked query row is NaN in a float64 run
    mask = torch.ones(3, C, dtype=torch.long)
    mask[1, 3:] = 0  # a completion that ended early
    upstream = (torch.randn(3, C, generator=g), torch.randn(3, C, generator=g))
    return ids, attention, mask, upstream


def trl_path(model, ids, attention, mask, temperature=T, shift=1):
    """TRL's per-token log-probs: the model's logits (softcapped by the model), divided by the
    temperature, log_softmax at the completion tokens; masked positions zeroed. `shift` 0 is
    the off-by-one bug (logits of the completion positions themselves)."""
    logits = model(input_ids=ids, attention_mask=attention, logits_to_keep=C + shift).logits
    logits = logits[:, : logits.shape[1] - shift].double() / temperature
    logp_all = torch.log_softmax(logits, -1)
    logp = logp_all.gather(-1, ids[:, -C:, None]).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp * mask, entropy * mask


def _run(model, fn, *args, **kwargs):
    """(logp, entropy, every parameter's gradient flattened) of fn(model, ...) under the upstreams."""
    model.zero_grad()
    ids, attention, mask, (u_logp, u_ent) = _batch()
    logp, entropy = fn(model, ids, attention, mask, *args, **kwargs)
    ((logp * u_logp.to(logp.dtype)).sum() + (entropy * u_ent.to(logp.dtype)).sum()).backward()
    grads = torch.cat([p.grad.reshape(-1).double() for p in model.parameters() if p.grad is not None])
    return logp.detach(), entropy.detach(), grads


def ours(model, ids, attention, mask, temperature=T):
    return completion_log_probs(model, ids, attention, logits_to_keep=C, temperature=temperature, completion_mask=mask)


def _errors(model, fn, **kwargs):
    truth = _run(copy.deepcopy(model).double(), trl_path)
    yardstick = _run(model, trl_path)  # transformers' own logits path in the model's dtype
    got = _run(model, fn, **kwargs)
    assert all(torch.isfinite(t).all() for t in truth + yardstick), "a check against a non-finite truth checks nothing"
    triples = zip(got, yardstick, truth, strict=True)
    return [(rel_error(g, t), limit_for(rel_error(y, t), torch.float32)) for g, y, t in triples]


@pytest.mark.interpreter
@pytest.mark.parametrize("class_name", ["LlamaForCausalLM", "Gemma2ForCausalLM"])  # Gemma-2: softcap 30
def test_log_probs_entropy_and_every_gradient_match_the_float64_logits_path(class_name):
    model = _tiny(class_name, **({"final_logit_softcapping": 3.0} if "Gemma2" in class_name else {}))
    for error, limit in _errors(model, ours):  # logp, entropy, the parameters' gradient
        assert error <= limit, (error, limit)


@pytest.mark.interpreter
def test_the_check_fails_an_off_by_one_position_and_a_missing_temperature():
    model = _tiny("LlamaForCausalLM")
    shifted = _errors(model, lambda m, i, a, k: trl_path(m, i, a, k, shift=0))
    assert any(e > lim for e, lim in shifted)
    no_temperature = _errors(model, ours, temperature=1.0)
    assert any(e > lim for e, lim in no_temperature)


@pytest.mark.interpreter
def test_masked_positions_are_exact_zeros_with_no_gradient():
    model = _tiny("LlamaForCausalLM")
    ids, attention, mask, _ = _batch()
    logp, entropy = ours(model, ids, attention, mask)
    assert logp.dtype == entropy.dtype == torch.float32 and logp.shape == (3, C)
    assert (logp[1, 3:] == 0).all() and (entropy[1, 3:] == 0).all()
    assert (logp[mask.bool()] < 0).all() and (entropy[mask.bool()] > 0).all()
    model.zero_grad()
    (logp[1, 3:].sum() + entropy[1, 3:].sum()).backward()
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())
    assert "forward" not in vars(model.lm_head)  # lm_head's call was borrowed and given back


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"logits_to_keep": 0}, "logits_to_keep must be an int in \\[1, 8\\]"),
        ({"logits_to_keep": 9}, "logits_to_keep must be an int in \\[1, 8\\]"),
        ({"logits_to_keep": C, "temperature": 0.0}, "temperature must be > 0"),
        ({"logits_to_keep": C, "completion_mask": torch.ones(3, C + 1)}, "completion_mask must be shaped like"),
    ],
)
def test_bad_input_is_refused_by_name(kwargs, match):
    ids, attention, _, _ = _batch()
    with pytest.raises(ValueError, match=match):
        completion_log_probs(_tiny("LlamaForCausalLM"), ids, attention, **kwargs)


def test_an_unsupported_model_is_refused():
    model = _tiny("CohereForCausalLM", logit_scale=0.5)
    ids, attention, _, _ = _batch()
    with pytest.raises(TypeError, match="CohereForCausalLM is not supported"):
        completion_log_probs(model, ids, attention, logits_to_keep=C)

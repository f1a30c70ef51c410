"""kernels/hf.py: the loss options the kernels have (z-loss, label smoothing, softcap, class and
token weights) go through the patch into the loss, for each supported transformers model class
the patched loss equals transformers' own, and an unsupported model class is a clear error."""

from __future__ import annotations

import pytest
import torch

from helpers import TINY_DECODER
from ligerbench.kernels.hf import SUPPORTED_MODELS, CausalLMPatch
from ligerbench.suites.ce.spec import ce_torch

COMMON = TINY_DECODER
V = COMMON["vocab_size"]


def _tiny(class_name: str, seed: int = 0, **extra):
    import transformers as tf

    config_class = getattr(tf, class_name.replace("ForCausalLM", "Config"))
    cfg = config_class(**COMMON, **extra)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(tf, class_name)(cfg)
    with torch.no_grad():  # logits of a few units: random init's are so small that softcap and
        model.lm_head.weight.mul_(20.0)  # label smoothing would hardly move the loss
    return model


def _batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, V, (2, 7), generator=g)
    labels = ids.clone()
    labels[0, :3] = -100  # a prompt mask
    token_weight = torch.rand(2, 7, generator=g) * 2.9 + 0.1
    return ids, labels, token_weight


@pytest.mark.interpreter
@pytest.mark.parametrize("class_name", SUPPORTED_MODELS)
def test_each_supported_model_gives_transformers_loss(class_name):
    model = _tiny(class_name)
    ids, labels, _ = _batch()
    ref = model(input_ids=ids, labels=labels).loss.detach()
    with CausalLMPatch(model, "ce") as patch:
        loss = model(input_ids=ids, labels=labels).loss.detach()
    assert patch.calls["ce"] == 1
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=0)


def test_an_unsupported_model_class_is_refused_by_name():
    model = _tiny("CohereForCausalLM", logit_scale=0.5)  # it scales its logits: the patch would drop that
    with pytest.raises(TypeError, match="CohereForCausalLM is not supported by the loss patch.*LlamaForCausalLM"):
        CausalLMPatch(model, "ce")
    assert "forward" not in vars(model)


def test_a_subclass_of_a_supported_model_is_accepted():
    import transformers as tf

    class MyLlama(tf.LlamaForCausalLM):
        pass

    model = MyLlama(tf.LlamaConfig(**COMMON))
    with CausalLMPatch(model, "ce"):  # no error, and the instance is patched while inside
        assert "forward" in vars(model)
    assert "forward" not in vars(model)


def _expected(model, ids, labels, token_weight=None, **options):
    """ce_torch (float64) on the model's own logits with the targets shifted as transformers does."""
    with torch.no_grad():
        logits = model(input_ids=ids).logits.double()
    target = torch.nn.functional.pad(labels, (0, 1), value=-100)[..., 1:].reshape(-1)
    if token_weight is not None:
        token_weight = torch.nn.functional.pad(token_weight, (0, 1), value=0.0)[..., 1:].reshape(-1).double()
    cw = options.pop("class_weight", None)
    loss, _ = ce_torch(
        logits.reshape(-1, V),
        target,
        weight=None if cw is None else cw.double(),
        token_weight=token_weight,
        reduction="mean",
        **options,
    )
    return loss.float()


# each option alone (each must move the loss: checked below), then all together
OPTIONS = {
    "z_loss_scale": dict(z_loss_scale=0.05),
    "label_smoothing": dict(label_smoothing=0.1),
    "class_weight": dict(class_weight=torch.rand(V, generator=torch.Generator().manual_seed(2)) * 1.8 + 0.2),
    "softcap": dict(softcap=2.0),
    "token_weight": dict(),
    "all": dict(z_loss_scale=0.05, label_smoothing=0.1, softcap=2.0),
}


@pytest.mark.interpreter
@pytest.mark.parametrize("kind", ["ce", "flce"])
@pytest.mark.parametrize("name", list(OPTIONS))
def test_loss_options_reach_the_loss(kind, name):
    model = _tiny("LlamaForCausalLM")
    ids, labels, tw = _batch()
    options = dict(OPTIONS[name])
    call = {"token_weight": tw} if name in ("token_weight", "all") else {}
    want = _expected(model, ids, labels, call.get("token_weight"), **dict(options))
    plain = _expected(model, ids, labels)
    assert (want - plain).abs() > 1e-3 * plain.abs(), "the option must change the loss, or this test proves nothing"
    with CausalLMPatch(model, kind, **options) as patch:
        out = model(input_ids=ids, labels=labels, **call)
    assert patch.calls["ce" if kind == "ce" else "flce"] == 1
    torch.testing.assert_close(out.loss.detach(), want, rtol=2e-5, atol=0)
    if kind == "ce" and "softcap" in options:  # the logits handed back are capped as the loss saw them
        raw = model(input_ids=ids).logits
        torch.testing.assert_close(out.logits, options["softcap"] * torch.tanh(raw / options["softcap"]))


@pytest.mark.interpreter
def test_with_options_the_eval_loss_of_flce_is_ours_too():
    model = _tiny("LlamaForCausalLM").eval()
    ids, labels, _ = _batch()
    with CausalLMPatch(model, "flce", z_loss_scale=0.05) as patch:
        loss = model(input_ids=ids, labels=labels).loss.detach()
    assert patch.calls == {"ce": 1, "flce": 0}  # transformers' loss has no z-loss
    torch.testing.assert_close(loss, _expected(model, ids, labels, z_loss_scale=0.05), rtol=2e-5, atol=0)


def test_a_softcap_that_disagrees_with_the_config_is_refused():
    model = _tiny("Gemma2ForCausalLM", final_logit_softcapping=5.0, query_pre_attn_scalar=16)
    with pytest.raises(ValueError, match="final_logit_softcapping=5.0"):
        CausalLMPatch(model, "ce", softcap=3.0)
    assert CausalLMPatch(model, "ce", softcap=5.0).softcap == 5.0
    assert CausalLMPatch(model, "ce").softcap == 5.0

"""Our loss kernels inside a Hugging Face causal LM, for one model instance, undone on exit.

    from ligerbench.kernels.hf import patch_causal_lm
    with patch_causal_lm(model, "ce") as patch:        # "ce", "flce" or "both"
        model(input_ids, labels=labels).loss.backward()
    assert patch.calls["ce"] == 1                      # proof that our kernel ran

What is replaced: the instance's `forward` (an attribute on the instance shadows the class's
method; the class and every other instance stay untouched; nothing global is patched). The new
forward does what `LlamaForCausalLM.forward` (and the Qwen3, Mistral and Gemma-2 ones) does in
transformers 5.x: run the base model, slice the hidden states by `logits_to_keep` in every mode
(training included: docs/bugs.md, bug 5), project with `lm_head`, then take the loss:

  ce    logits materialised as transformers does; the loss by our cross entropy kernel on them.
        Gemma-2's final_logit_softcapping is passed to the kernel, which applies it inside the
        loss, so the kernel gets the raw `lm_head` output (capping first would apply it twice).
        We replace `forward` rather than `loss_function` for exactly this reason: transformers
        caps the logits before it calls `loss_function`.
        Logits that are a DTensor sharded on the vocab dim (lm_head column-parallel under tensor
        parallelism, ColwiseParallel with use_local_output=False) go to the vocab-parallel
        cross entropy (kernels/vocab_parallel_cross_entropy.py), which takes them as they are.
  flce  in training with labels, the fused linear + cross entropy kernel on the sliced hidden
        states: no logits are materialised and `logits` is None in the output. Without labels
        or in eval mode the logits are needed, so transformers' own path (logits and loss;
        vocab-sharded DTensor logits, which transformers' loss cannot take, go to the
        vocab-parallel cross entropy as under `ce`).
        The kernel runs AS lm_head's forward, through the module's call (call_as_forward), so
        that FSDP2's hooks gather lm_head's weight once per step when lm_head (or the unit that
        owns a tied weight) is sharded, and handle its gradient in backward.
        Under tensor parallelism (lm_head ColwiseParallel: its weight a DTensor sharded on the
        vocab, Shard(0) on a 1-D mesh; alone, or under FSDP2 on a 2-D mesh with lm_head in the
        root's unit, whose forward leaves it the shard on the tp sub-mesh: kernels/hf_parallel.py's
        `vocab_sharded_head`) the weight is sharded for good:
        the vocab-parallel fused kernel (kernels/vocab_parallel_fused_linear_cross_entropy.py)
        runs on this rank's shard (`weight.to_local()`, whose gradient reaches the parameter),
        the mesh's group and the shard's first global row (kernels/hf_parallel.py's
        `vocab_shard`: uneven shards included), NOT through lm_head's call (ColwiseParallel's
        hooks expect a DTensor output). The hidden states are the same on every rank; the
        kernel sums their gradient over the group. Other placements, and class weights, are
        refused with a ValueError.
  both  flce where it applies, ce everywhere else a loss is taken.

The loss follows transformers' ForCausalLMLoss: labels shifted by one (or `shift_labels`
given), mean over counted targets, or sum / `num_items_in_batch` when that is passed (gradient
accumulation). No host sync on the way (the kernels check the targets on the device; a
2-D bool `logits_to_keep` mask, a data-dependent shape, is the one exception, as in
transformers). With `per_sequence_mean=True` the loss is instead the mean over sequences of each
sequence's mean, sequences found from `position_ids` restarts (packed rows): kernels/packing.py.

Loss options (those of the kernels, docs/providers.md has their semantics), all off by default:
  z_loss_scale, label_smoothing   floats, passed to the kernel (the loss returned includes z-loss);
  class_weight                    a [vocab] tensor of class weights (a mean is then divided by the
                                  summed weights of the counted targets, as PyTorch does);
  softcap                         a final-logit softcap for a model whose config has none (the
                                  returned logits are capped too); a model whose config sets
                                  `final_logit_softcapping` uses that, and a different value here
                                  is an error;
  token_weight                    per call: `model(..., labels=labels, token_weight=w)`, w shaped
                                  like labels, w[b, t] weighing the loss on labels[b, t] (shifted
                                  with them; aligned with `shift_labels` when those are given),
                                  on the model's device.
With any option set, every loss the patch takes is ours (kind "flce" in eval too), since
transformers' own loss has none of them.

Supported models: the classes in SUPPORTED_MODELS and their subclasses, whose forward is the one
re-implemented here (base model, lm_head, optional final-logit softcap, ForCausalLMLoss); tests
compare each with transformers' own loss. Others are refused with a TypeError: a model that scales
its logits (Cohere, Granite) or adds a loss (Mixtral's router loss) would come out silently wrong.
"""

from __future__ import annotations

import functools
from typing import Literal

import torch

from .hf_parallel import call_as_forward, is_dtensor, replicated_local, vocab_shard, vocab_sharded_head
from .packing import per_sequence_token_weights, shift_labels_packed

PatchKind = Literal["ce", "flce", "both"]
PATCH_KINDS: tuple[str, ...] = ("ce", "flce", "both")
SUPPORTED_MODELS: tuple[str, ...] = (
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "GemmaForCausalLM",
    "Gemma2ForCausalLM",
)


def check_supported(model) -> None:
    """TypeError unless the model is (a subclass of) a class in SUPPORTED_MODELS."""
    if any(cls.__name__ in SUPPORTED_MODELS for cls in type(model).__mro__):
        return
    raise TypeError(
        f"{type(model).__name__} is not supported by the loss patch: it re-implements the forward of "
        f"{', '.join(SUPPORTED_MODELS)} (base model, lm_head, optional final-logit softcap, ForCausalLMLoss). "
        "A model that scales its logits or adds a loss of its own would be silently wrong, so it is refused."
    )


def slice_hidden(hidden: torch.Tensor, logits_to_keep: int | torch.Tensor) -> torch.Tensor:
    """The hidden states transformers projects to logits, sliced as `slice_logits_to_keep` does in
    transformers 5.23 (re-stated here because older 5.x releases inline it in each model):
    an int k keeps the last k positions (0 keeps all); a 1-D tensor keeps those positions; a 2-D
    integer tensor gathers positions per row; a 2-D bool mask keeps its True positions, flattened."""
    if isinstance(logits_to_keep, torch.Tensor) and logits_to_keep.ndim == 2:
        if logits_to_keep.dtype == torch.bool:
            return hidden[logits_to_keep]
        return torch.take_along_dim(hidden, logits_to_keep[..., None], dim=1)
    if isinstance(logits_to_keep, int):
        logits_to_keep = slice(-logits_to_keep, None)
    return hidden[:, logits_to_keep, :]


def _fused_kernel():
    # Imported on first use: the fused kernel is optional, and `ce` must work without it.
    from . import fused_linear_cross_entropy as flce_module

    return flce_module.fused_linear_cross_entropy


class CausalLMPatch:
    """Context manager that routes one causal-LM instance's loss through our kernels.

    `calls` counts kernel launches per kernel ("ce", "flce") while active: the proof the patch was
    applied. Subclasses may override `slice_hidden` (the harness plants bugs that way)."""

    def __init__(
        self,
        model: torch.nn.Module,
        kind: PatchKind = "ce",
        *,
        per_sequence_mean: bool = False,
        inplace_backward: bool = False,
        z_loss_scale: float = 0.0,
        label_smoothing: float = 0.0,
        class_weight: torch.Tensor | None = None,
        softcap: float | None = None,
    ):
        if kind not in PATCH_KINDS:
            raise ValueError(f"patch kind must be one of {PATCH_KINDS}, got {kind!r}")
        check_supported(model)
        for part in ("model", "lm_head", "config"):
            if not hasattr(model, part):
                raise TypeError(f"{type(model).__name__} has no `{part}`: not a transformers *ForCausalLM")
        configured = getattr(model.config, "final_logit_softcapping", None)
        if softcap is not None and configured is not None and softcap != configured:
            raise ValueError(f"softcap={softcap} but the model's config sets final_logit_softcapping={configured}")
        self.softcap = configured if configured is not None else softcap
        self.options = {"z_loss_scale": z_loss_scale, "label_smoothing": label_smoothing, "class_weight": class_weight}
        self.model = model
        self.kind = kind
        self.per_sequence_mean = per_sequence_mean
        # Off by default: with it the returned `logits` would hold the gradient after forward.
        self.inplace_backward = inplace_backward
        self.calls = {"ce": 0, "flce": 0}
        self.active = False

    # ------------------------------------------------------------------ apply / undo
    def __enter__(self) -> CausalLMPatch:
        if "forward" in vars(self.model):
            raise RuntimeError("this model instance already has a patched forward; nest no patches")

        def forward(*args, **kwargs):
            return self.forward(self.model, *args, **kwargs)

        # __wrapped__ keeps inspect.signature (used by generate) on the original parameters.
        functools.update_wrapper(forward, self.model.forward)
        self.model.forward = forward
        self.active = True
        return self

    def __exit__(self, *exc) -> None:
        vars(self.model).pop("forward", None)
        self.active = False

    # ------------------------------------------------------------------ the forward
    def slice_hidden(self, model, hidden, logits_to_keep):
        return slice_hidden(hidden, logits_to_keep)

    def forward(
        self,
        model,
        input_ids=None,
        attention_mask=None,
        position_ids=None,
        past_key_values=None,
        inputs_embeds=None,
        labels=None,
        use_cache=None,
        logits_to_keep=0,
        **kwargs,
    ):
        from transformers.modeling_outputs import CausalLMOutputWithPast

        return_dict = kwargs.pop("return_dict", True)
        token_weight = kwargs.pop("token_weight", None)
        outputs = model.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        hidden = self.slice_hidden(model, outputs.last_hidden_state, logits_to_keep)
        cap = self.softcap
        if token_weight is not None:
            kwargs = {**kwargs, "token_weight": token_weight}
        loss = logits = None
        if labels is not None and model.training and self.kind in ("flce", "both"):
            loss = self._fused_loss(model, hidden, labels, position_ids, cap, kwargs)
        else:
            raw = model.lm_head(hidden)
            logits = raw
            if cap is not None:  # the same three operations, in the same order, as Gemma-2's forward
                logits = torch.tanh(raw / cap) * cap
            if labels is not None:
                # vocab-sharded DTensor logits (tensor parallel): transformers' loss cannot take them
                if self.kind in ("ce", "both") or self._has_options(kwargs) or is_dtensor(raw):
                    loss = self._ce_loss(raw, labels, position_ids, cap, kwargs)
                else:
                    loss = model.loss_function(logits, labels, model.config.vocab_size, **kwargs)
        out = CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            past_key_values=outputs.past_key_values,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
        return out if return_dict else out.to_tuple()

    # ------------------------------------------------------------------ losses
    def _has_options(self, kwargs) -> bool:
        o = self.options
        weighted = o["class_weight"] is not None or "token_weight" in kwargs
        return bool(o["z_loss_scale"] or o["label_smoothing"]) or weighted

    def _kernel_options(self, device, class_weight_name: str) -> dict:
        """The loss options as the kernel takes them (class weights on the logits' device)."""
        o = {k: v for k, v in self.options.items() if k != "class_weight"}
        weight = self.options["class_weight"]
        if weight is not None:
            if weight.device != device:  # moved once, not copied from the host every step
                weight = self.options["class_weight"] = weight.to(device)
            o[class_weight_name] = weight
        return o

    def _token_weight(self, kwargs, weights):
        """The caller's token_weight (shaped like labels) aligned with the targets, times `weights`."""
        given = kwargs.get("token_weight")
        if given is None:
            return weights
        if kwargs.get("shift_labels") is None:  # shifted with the labels
            given = torch.nn.functional.pad(given, (0, 1), value=0.0)[..., 1:]
        given = given.reshape(-1).float()
        return given if weights is None else weights * given.to(weights.device)

    def _targets(self, labels, position_ids, kwargs):
        """(flat targets, flat token weights or None, reduction, divisor or None)."""
        ignore_index = kwargs.get("ignore_index", -100)
        target = kwargs.get("shift_labels")
        if self.per_sequence_mean:
            if target is None:
                target = shift_labels_packed(labels, position_ids, ignore_index)
            weights = per_sequence_token_weights(target, position_ids, ignore_index)
            return target.reshape(-1), self._token_weight(kwargs, weights.reshape(-1)), "sum", None
        if target is None:  # ForCausalLMLoss's shift: token t predicts t+1, the last predicts nothing
            target = torch.nn.functional.pad(labels, (0, 1), value=ignore_index)[..., 1:]
        n_items = kwargs.get("num_items_in_batch")
        reduction = "mean" if n_items is None else "sum"
        return target.reshape(-1), self._token_weight(kwargs, None), reduction, n_items

    def _ce_loss(self, raw_logits, labels, position_ids, cap, kwargs):
        target, weights, reduction, n_items = self._targets(labels, position_ids, kwargs)
        common = dict(
            ignore_index=kwargs.get("ignore_index", -100),
            reduction=reduction,
            softcap=cap,
            inplace_backward=self.inplace_backward,
        )
        self.calls["ce"] += 1
        if is_dtensor(raw_logits):  # lm_head column-parallel (tensor parallel): logits sharded on the vocab
            loss = self._vocab_parallel_ce(raw_logits, target, weights, common)
        else:
            from .cross_entropy import cross_entropy

            flat = raw_logits.reshape(-1, raw_logits.shape[-1])
            loss = cross_entropy(
                flat,
                target.to(flat.device),
                token_weight=None if weights is None else weights.to(flat.device),
                **common,
                **self._kernel_options(flat.device, "weight"),
            )
        return _divide(loss, n_items)

    def _vocab_parallel_ce(self, logits, target, weights, common):
        """Logits a DTensor sharded on its last dim (ColwiseParallel lm_head, use_local_output=False):
        the vocab-parallel loss takes it as it is (its group and offsets come from the DTensor);
        the targets and token weights are the same on every rank. Class weights are not sharded
        here, so they are refused rather than applied to the wrong classes."""
        from .vocab_parallel_cross_entropy import vocab_parallel_cross_entropy

        if self.options["class_weight"] is not None:
            raise ValueError("class_weight with vocab-parallel logits is not supported by the patch")
        device, rows = logits.device, logits.shape[:-1]  # targets shaped like the logits' rows
        return vocab_parallel_cross_entropy(
            logits,
            target.to(device).reshape(rows),
            token_weight=None if weights is None else weights.to(device).reshape(rows),
            z_loss_scale=self.options["z_loss_scale"],
            label_smoothing=self.options["label_smoothing"],
            **common,
        )

    def _fused_loss(self, model, hidden, labels, position_ids, cap, kwargs):
        target, weights, reduction, n_items = self._targets(labels, position_ids, kwargs)
        common = dict(ignore_index=kwargs.get("ignore_index", -100), reduction=reduction, softcap=cap)
        head = model.lm_head
        if vocab_sharded_head(model):  # tensor parallel (alone, or under FSDP2): the weight stays sharded
            loss = self._vocab_parallel_fused(head, hidden, target, weights, common)
            self.calls["flce"] += 1  # counted once it ran (a refusal raises before)
            return _divide(loss, n_items)
        fused = _fused_kernel()
        flat = hidden.reshape(-1, hidden.shape[-1])
        extra = {} if weights is None else {"token_weight": weights.to(flat.device)}
        options = self._kernel_options(flat.device, "class_weight")

        def fused_forward(x):  # runs as lm_head's forward: its weight is the one the module sees now
            if is_dtensor(head.weight):
                raise TypeError(
                    "lm_head's weight is still a DTensor inside lm_head's own forward under FSDP2 (FSDP2 "
                    "composed with tensor parallelism, lm_head a unit of its own?): the fused kernel needs the "
                    "whole weight there; under FSDP2 x TP leave lm_head to the root's unit"
                )
            return fused(x, head.weight, target.to(x.device), bias=head.bias, **common, **extra, **options)

        self.calls["flce"] += 1
        return _divide(call_as_forward(head, fused_forward, flat), n_items)

    def vocab_shard(self, head):
        """(weight shard, bias shard or None, process group, vocab_start) of a column-parallel
        lm_head: kernels/hf_parallel.py's `vocab_shard`. A method so that a planted bug can replace it."""
        return vocab_shard(head)

    def _vocab_parallel_fused(self, head, hidden, target, weights, common):
        """lm_head column-parallel (tensor parallel: its weight a DTensor sharded on the vocab,
        Shard(0) on a 1-D mesh), the hidden states replicated: the vocab-parallel fused kernel on
        this rank's weight shard. Not through lm_head's call: its ColwiseParallel hooks would make
        the input a DTensor and expect a DTensor output, and the weight is sharded for good (there
        is nothing to gather). `to_local()` is differentiable: the shard's gradient reaches the
        parameter as its Shard(0) gradient. The hidden gradient comes back summed over the group
        (the kernel's all_reduce), as ColwiseParallel's backward gives it. Class weights are not
        sharded here, so they are refused rather than applied to the wrong classes."""
        from .vocab_parallel_fused_linear_cross_entropy import vocab_parallel_fused_linear_cross_entropy

        if self.options["class_weight"] is not None:
            raise ValueError(
                "class_weight with a vocab-parallel (column-parallel) lm_head is not supported by the patch"
            )
        weight, bias, group, vocab_start = self.vocab_shard(head)
        if is_dtensor(hidden):  # our plans hand plain tensors; a Replicate DTensor is the same on every rank
            hidden = replicated_local(hidden)
        flat = hidden.reshape(-1, hidden.shape[-1])
        return vocab_parallel_fused_linear_cross_entropy(
            flat,
            weight,
            target.to(flat.device),
            group=group,
            vocab_start=vocab_start,
            bias_shard=bias,
            token_weight=None if weights is None else weights.to(flat.device),
            z_loss_scale=self.options["z_loss_scale"],
            label_smoothing=self.options["label_smoothing"],
            **common,
        )


def _divide(loss: torch.Tensor, n_items) -> torch.Tensor:
    """loss / num_items_in_batch without a host sync: a number divides as a number, a tensor is
    moved to the loss's device (a no-op when it is there already; never a copy to the host)."""
    if n_items is None:
        return loss
    if isinstance(n_items, torch.Tensor) and not (n_items.dim() == 0 and n_items.device.type == "cpu"):
        return loss / n_items.to(loss.device, non_blocking=True)
    return loss / n_items  # a number, or a CPU scalar tensor (PyTorch reads it on the host)


def patch_causal_lm(model, kind: PatchKind = "ce", **options) -> CausalLMPatch:
    """`CausalLMPatch(model, kind, **options)`: use it as a context manager."""
    return CausalLMPatch(model, kind, **options)

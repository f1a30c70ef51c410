"""What every kernel spec shares: the Outcome of a provider (or the reference) on one case,
and the bitwise comparison that tells whether an input was written."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

# Outcome.form of the model code's yardstick: the logits in the inputs' 16-bit dtype, then float32
# math (suites/common/rounding.py); a provider that promises float32 logits is not measured against it
MODEL_CODE = "model_code"


@dataclass
class Outcome:
    """What a provider (or the reference) produced for one case."""

    values: dict[str, torch.Tensor]  # quantity name -> tensor ("loss", "z_loss", "grad_logits", ...)
    input_mutated: bool = False
    # input name -> layout (shape, strides, storage offset): as the case built it, and as the
    # provider's callable received it (None: the callable was never called with it)
    built: dict | None = None
    received: dict | None = None
    mutated_inputs: tuple[str, ...] = ()  # the inputs found written, by name (input_mutated says if any)
    # The float64 truth only: quantity -> the norm its errors are measured against instead of the
    # truth's own, where the truth is exactly 0 mathematically (ligerbench/tolerance.py, "A truth
    # that is exactly 0"); absent: the truth's norm.
    scales: dict[str, float] = field(default_factory=dict)
    # quantity -> the error with which the provider refused to produce it, where a refusal is an
    # answer its contract allows (a second backward through one forward: suites/common/retained_backward.py)
    refusals: dict[str, str] = field(default_factory=dict)
    # A yardstick only: the way of writing the semantics it stands for, where a provider's promise
    # may rule it out ("model_code": the logits in the inputs' 16-bit dtype: suites/common/rounding.py)
    form: str = ""


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaN equals itself), for telling whether a tensor was written."""
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return torch.equal(a.contiguous().view(as_int), b.contiguous().view(as_int))


# ----------------------------------------------------------------------------- input layouts
# A case hands the provider its inputs exactly as it built them: a view with the case's shape,
# strides and storage offset into a storage of its own (padding columns, the rows before a
# kept slice). Each run gets a fresh copy of that whole storage, so a provider that writes its
# input changes only its own copy, and the contracts suite can compare the storage bit by bit
# (padding included).

Layout = tuple[tuple[int, ...], tuple[int, ...], int]  # shape, strides, storage offset


def layout_of(t: torch.Tensor) -> Layout:
    return tuple(t.shape), tuple(t.stride()), t.storage_offset()


def storage_elements(t: torch.Tensor) -> int:
    """Elements in the whole storage `t` views (padding and rows outside the view included)."""
    return t.untyped_storage().nbytes() // t.element_size()


def fresh_view(t: torch.Tensor, *, requires_grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(flat, view): a copy of the whole storage `t` lives in, as a 1-D tensor, and a leaf view
    into it with t's shape, strides and storage offset."""
    src = t.detach()
    flat = src.as_strided((storage_elements(src),), (1,), 0).clone()
    view = flat.as_strided(src.shape, src.stride(), src.storage_offset()).detach()
    return flat, view.requires_grad_(requires_grad)


def copies_of(tensors: dict) -> dict:
    """Fresh copies (same layouts) of the side inputs a provider is handed (targets, weights),
    so one provider writing them cannot change what the next one sees; `written` compares."""
    return {k: None if t is None else fresh_view(t, requires_grad=False)[1] for k, t in tensors.items()}


def written(originals: dict, handed: dict) -> list[str]:
    return [k for k, t in originals.items() if t is not None and not same_bits(handed[k], t)]


class Spy:
    """Wraps a provider's callable and records the layout of the tensors it was actually called
    with (by argument name), so a run can prove its inputs reached the provider as built."""

    def __init__(self, fn, names: tuple[str, ...]):
        self.fn, self.names, self.seen = fn, names, None

    def __call__(self, *args, **kwargs):
        self.seen = {name: layout_of(a) for name, a in zip(self.names, args, strict=False) if torch.is_tensor(a)}
        return self.fn(*args, **kwargs)


def upstream_for(loss, upstream, reduction: str, target_shape: tuple[int, ...]):
    """The case's upstream gradient for a provider's loss, after checking the loss has the shape
    the loss contract says (the target's for reduction='none', a scalar otherwise): a wrong shape
    is the provider's error, named as such, not a broadcasting error inside the harness."""
    want = target_shape if reduction == "none" else ()
    if tuple(loss.shape) != want:
        raise ValueError(
            f"the provider returned a loss of shape {tuple(loss.shape)}; with reduction={reduction!r} the contract "
            f"is {want} (docs/providers.md)"
        )
    return as_handed(upstream, dtype=loss.dtype).expand_as(loss)


def as_handed(up: torch.Tensor, *, device=None, dtype=None) -> torch.Tensor:
    """`up.to(device, dtype)` that keeps an expanded upstream expanded: stride 0 in every
    dimension, one element of storage, as autograd hands backward the gradient of
    `loss.sum().backward()` (`.to` onto another device would materialise it)."""
    device, dtype = device or up.device, dtype or up.dtype
    if up.dim() and up.numel() > 1 and all(s == 0 for s in up.stride()):
        return up.as_strided((), ()).to(device=device, dtype=dtype).expand(up.shape)
    return up.to(device=device, dtype=dtype)

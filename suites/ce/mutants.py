"""Planted bugs: wrong variants of our `ce` kernel, registered like any provider.

Each reproduces a bug a real kernel shipped (docs/bugs.md), built around our kernel so that
everything else about it is right. A suite that cannot make verify fail on one of these is not
checking what it claims. They run only when named (`--provider mutant_...`) or by selftest, which
runs each on its `targets`: the smallest slices of the grid that expose it (CI runs them all on CPU).
"""

from __future__ import annotations

import functools

import torch

from ligerbench.registry import Provider
from ligerbench.suites.common import input_mutants, split_step


def _ours(**fixed):
    from ligerbench.kernels.cross_entropy import cross_entropy

    return functools.partial(cross_entropy, return_z_loss=True, **fixed)


class _FirstRowUpstream(torch.autograd.Function):
    """reduction='none' backward that scales every row by the first row's upstream gradient
    (docs/bugs.md, bug 1): a leading run of masked tokens then zeroes every gradient."""

    @staticmethod
    def forward(ctx, rows):
        ctx.n = rows.shape
        return rows.view_as(rows)

    @staticmethod
    def backward(ctx, grad):
        return grad.reshape(-1)[:1].expand(ctx.n).contiguous()


def _first_row_upstream(logits, target, **opts):
    loss, z = _ours()(logits, target, **opts)
    if opts["reduction"] == "none":
        loss = _FirstRowUpstream.apply(loss)
    return loss, z


def _softcap_without_tanh_derivative(logits, target, *, softcap, **opts):
    """Caps the logits, then hands back the gradient with respect to the capped logits as if it
    were the gradient of the raw ones (the chain rule's 1 - tanh^2 factor dropped)."""
    if not softcap:
        return _ours()(logits, target, **opts)
    capped = (softcap * torch.tanh(logits.detach().float() / softcap)).to(logits.dtype)
    capped = logits + (capped - logits).detach()  # value of the capped logits, gradient of identity
    return _ours()(capped, target, **opts)


def _softcap_slope_cancels(logits, target, *, softcap, **opts):
    """The softcap applied in PyTorch before our kernel, its slope autograd's 1 - tanh^2: right in
    value, but the slope loses its digits where |tanh| -> 1 (docs/bugs.md, "What the careful
    yardstick found in our own kernels": it passed while the yardstick used the same formula)."""
    if not softcap:
        return _ours()(logits, target, **opts)
    capped = softcap * torch.tanh(logits.float() / softcap)
    return _ours()(capped, target, **opts)


def _mean_counts_ignored(logits, target, *, reduction, **opts):
    """Ignored tokens counted in the mean's denominator."""
    loss, z = _ours()(logits, target, reduction="sum" if reduction == "mean" else reduction, **opts)
    if reduction == "mean":
        return loss / target.numel(), z / target.numel()
    return loss, z


def _zloss_missing_from_gradient(logits, target, *, z_loss_scale, **opts):
    """The z-loss is in the loss value but not in the gradient."""
    with_z, z = _ours()(logits.detach(), target, z_loss_scale=z_loss_scale, **opts)
    # value of the loss with z-loss, gradient of the z-free loss of the same logits
    grad_path, _ = _ours()(logits, target, **opts)
    return with_z.detach() + (grad_path - grad_path.detach()), z


def _smoothing_ignores_class_weight(logits, target, *, weight, label_smoothing, **opts):
    """Label smoothing's uniform term computed without the class weights."""
    if weight is None or not label_smoothing:
        return _ours()(logits, target, weight=weight, label_smoothing=label_smoothing, **opts)
    nll, z = _ours()(logits, target, weight=weight, **opts)
    smooth, _ = _ours()(logits, target, weight=None, label_smoothing=1.0, **{**opts, "z_loss_scale": 0.0})
    return (1 - label_smoothing) * nll + label_smoothing * smooth, z


class _LowPrecisionTargetGrad(torch.autograd.Function):
    """Our loss, but the target's gradient formed from p_y rounded to bf16, as 1 - bf16(p_y):
    exact for random logits, 20-100% wrong when p_y is near 1 (docs/bugs.md, bug 6)."""

    @staticmethod
    def forward(ctx, logits, target, opts):
        with torch.enable_grad():
            leaf = logits.detach().requires_grad_(True)
            loss, z = _ours()(leaf, target, **opts)
        ctx.state = (leaf, loss, target, opts)
        ctx.mark_non_differentiable(z)
        return loss.detach(), z.detach()

    @staticmethod
    def backward(ctx, grad, _gz):
        leaf, loss, target, opts = ctx.state
        (g,) = torch.autograd.grad(loss, leaf, grad)
        x = leaf.detach().float()
        if opts.get("softcap"):
            x = opts["softcap"] * torch.tanh(x / opts["softcap"])
        rows = torch.arange(x.shape[0], device=x.device)
        counted = target != opts["ignore_index"]
        safe = torch.where(counted, target, 0).clamp(0, x.shape[-1] - 1)
        p_y = torch.softmax(x, dim=-1)[rows, safe]
        exact, rounded = 1.0 - p_y, 1.0 - p_y.to(torch.bfloat16).float()
        ratio = torch.where(counted & (exact > 0), rounded / exact.clamp_min(1e-30), 1.0)
        g = g.clone()
        g[rows, safe] = (g[rows, safe].float() * ratio).to(g.dtype)
        return g, None, None


def _low_precision_target_grad(logits, target, **opts):
    return _LowPrecisionTargetGrad.apply(logits, target, opts)


class _SavedGradScaledInPlace(torch.autograd.Function):
    """A gradient formed in forward (by our kernel, for an upstream of 1) and scaled in place by
    each backward's upstream, with no refusal of a second call (QuACK #209): retain_graph's second
    backward returns the first upstream's scaling times its own."""

    @staticmethod
    def forward(ctx, logits, formed, loss):
        ctx.formed = formed
        return loss

    @staticmethod
    def backward(ctx, grad):
        up = grad.reshape(grad.shape + (1,) * (ctx.formed.dim() - grad.dim()))
        return ctx.formed.mul_(up), None, None


def _saved_grad_scaled_in_place(logits, target, **opts):
    with torch.enable_grad():
        x = logits.detach().requires_grad_()
        loss, z = _ours()(x, target, **opts)
        (formed,) = torch.autograd.grad(loss.sum(), x)  # rows are independent: each its own gradient
    return _SavedGradScaledInPlace.apply(logits, formed, loss.detach()), z


def _max_started_at_zero(logits, target, *, ignore_index, reduction, **opts):
    """A cross entropy whose row maximum starts at 0, not -inf (verl #7439): exact wherever a
    row's largest logit is above 0, every exponential 0 where all are far below. Plain cross
    entropy only (other options: our kernel)."""
    if any(opts.get(k) for k in ("weight", "label_smoothing", "softcap", "z_loss_scale", "token_weight")):
        return _ours()(logits, target, ignore_index=ignore_index, reduction=reduction, **opts)
    x = logits.reshape(-1, logits.shape[-1]).float()
    t = target.reshape(-1)
    m = x.detach().amax(-1, keepdim=True).clamp_min(0.0)
    lse = (x - m).exp().sum(-1).log() + m.squeeze(-1)
    counted = t != ignore_index
    picked = x.gather(1, torch.where(counted, t, 0).unsqueeze(1)).squeeze(1)
    rows = torch.where(counted, lse - picked, 0.0)
    loss = {"none": rows.view(target.shape), "sum": rows.sum(), "mean": rows.sum() / counted.sum()}[reduction]
    return loss.to(logits.dtype), torch.zeros((), dtype=logits.dtype, device=logits.device)


def _mutant(name: str, description: str, load, **kw) -> Provider:
    return Provider(name=name, kernel="ce", description=description, load=load, mutant=True, **kw)


PROVIDERS = (
    _mutant(
        "mutant_first_row_upstream",
        "reduction='none' backward uses the first row's upstream gradient for every row",
        lambda: _first_row_upstream,
        # rows of a random upstream each have their own value, so using row 0's for all is wrong
        # (with all-ones upstream the bug is invisible: every row's value is 1)
        targets=({"reduction": "none", "ignore_pattern": "leading_run", "dtype": "fp32"},),
    ),
    _mutant(
        "mutant_softcap_no_tanh_grad",
        "softcap gradient without the tanh derivative",
        lambda: _softcap_without_tanh_derivative,
        targets=({"option": "softcap", "reduction": "sum", "dtype": "fp32"},),
    ),
    _mutant(
        "mutant_mean_counts_ignored",
        "ignored tokens counted in the mean's denominator",
        lambda: _mean_counts_ignored,
        # 90% ignored: the mean comes out ten times too small
        targets=({"reduction": "mean", "ignore_pattern": "random_90", "dtype": "fp32", "option": "plain"},),
    ),
    _mutant(
        "mutant_low_precision_target_grad",
        "true-class gradient formed from a bf16 probability (wrong for confident logits)",
        lambda: _low_precision_target_grad,
        # random-normal logits cannot show it: p_y must be within bf16's rounding of 1
        targets=({"logits": "confident", "reduction": "sum", "dtype": "fp32", "option": "plain"},),
    ),
    _mutant(
        "mutant_low_precision_target_grad_bf16",
        "the same bug in bf16: Liger <= 0.4.0's true-class gradient from a bf16 softmax",
        lambda: _low_precision_target_grad,
        # passed when PyTorch's own bf16 path was the yardstick (~100% wrong on confident rows)
        targets=({"logits": "confident", "dtype": "bf16", "option": "plain"},),
    ),
    _mutant(
        "mutant_softcap_slope_cancels",
        "softcap slope computed as 1 - tanh^2 (cancels for logits far beyond the cap)",
        lambda: _softcap_slope_cancels,
        targets=({"option": "softcap", "dtype": "fp32", "logits": "large"},),
    ),
    _mutant(
        "mutant_silent_inplace",
        "writes its gradient into the caller's logits without declaring it",
        lambda: _ours(inplace_backward=True),
        targets=({"reduction": "none", "ignore_pattern": "leading_run", "dtype": "fp32"},),
    ),
    _mutant(
        "mutant_zloss_no_grad",
        "z-loss in the loss value but missing from the gradient",
        lambda: _zloss_missing_from_gradient,
        targets=({"option": "z_loss", "reduction": "sum", "dtype": "fp32", "logits": "normal"},),
    ),
    _mutant(
        "mutant_saved_grad_scaled_in_place",
        "the gradient formed in forward scaled in place by each backward, a second backward not refused (QuACK #209)",
        lambda: _saved_grad_scaled_in_place,
        targets=({"backward": "retained"},),
    ),
    _mutant(
        "mutant_max_started_at_zero",
        "the softmax's running maximum starts at 0, not -inf: logits all far below 0 underflow (verl #7439)",
        lambda: _max_started_at_zero,
        targets=({"logits": "far_below", "option": "plain"},),
    ),
    _mutant(
        "mutant_smoothing_ignores_class_weight",
        "label smoothing's uniform term ignores the class weights",
        lambda: _smoothing_ignores_class_weight,
        targets=({"option": "smoothing_class_weight", "reduction": "sum", "dtype": "fp32"},),
    ),
)


# ----------------------------------------------------------------------------- inputs (layouts, upstreams)


def _dense_rows(logits, target, **opts):
    return _ours()(input_mutants.assume_dense(logits), target, **opts)


def _unit_column_stride(logits, target, **opts):
    flat = logits.reshape(-1, logits.shape[-1])  # a view (no copy) for every layout of the grid
    return _ours()(input_mutants.assume_unit_column_stride(flat).view(logits.shape), target, **opts)


def _targets_transposed(logits, target, **opts):
    return _ours()(logits, input_mutants.targets_transposed(target), **opts)


def _upstream_mutant(wrong_for):
    def call(logits, target, **opts):
        loss, z = _ours()(logits, target, **opts)
        wrong = wrong_for(opts["reduction"], target)
        return (loss if wrong is None else input_mutants.with_upstream(loss, wrong)), z

    return call


def _writes_vocab_padding(logits, target, **opts):
    """Right loss and gradient, but clears each row's padding columns of the caller's storage (a
    kernel that treats the row stride as the row width and zero-fills the whole row)."""
    if logits.dim() == 3 and logits.stride(1) > logits.shape[-1]:
        width = logits.stride(1)
        rows = torch.as_strided(logits.detach(), (*logits.shape[:-1], width), (*logits.stride()[:-1], 1))
        rows[..., logits.shape[-1] :] = 0.0
    return _ours()(logits, target, **opts)


_zero_rows = _upstream_mutant(lambda red, t: input_mutants.zero_rows_unscaled if red == "none" else None)
_mean_upstream_ignored = _upstream_mutant(lambda red, t: input_mutants.upstream_ignored if red == "mean" else None)
_fp16_upstream = _upstream_mutant(lambda red, t: input_mutants.upstream_through_fp16)
_upstream_dense = _upstream_mutant(lambda red, t: input_mutants.upstream_read_dense if red == "none" else None)
_unit_sum_as_mean = _upstream_mutant(lambda red, t: input_mutants.unit_sum_as_mean(t.numel()) if red == "sum" else None)

PROVIDERS += (
    _mutant(
        "mutant_assumes_dense_rows",
        "reads the logits as if contiguous (data pointer and shape, no strides): reads the vocab padding",
        lambda: _dense_rows,
        # the mean (6 cases) fails every quantity the 20 padded_vocab cases fail
        targets=({"layout": "padded_vocab", "reduction": "mean"},),
    ),
    _mutant(
        "mutant_writes_vocab_padding",
        "zero-fills the padding columns of a padded-vocab caller's logits (row stride taken as row width)",
        lambda: _writes_vocab_padding,
        # the plain option (10 cases) fails every quantity the 20 padded_vocab cases fail
        targets=({"layout": "padded_vocab", "option": "plain"},),
    ),
    _mutant(
        "mutant_unit_column_stride",
        "honours the row stride but assumes a column stride of 1: transposed storage read wrong",
        lambda: _unit_column_stride,
        targets=({"layout": "transposed"},),
    ),
    _mutant(
        "mutant_targets_flattened_transposed",
        "flattens [B, T] targets column-major while the logits are flattened row-major",
        lambda: _targets_transposed,
        targets=({"layout": "3d"},),
    ),
    _mutant(
        "mutant_zero_upstream_rows_unscaled",
        "reduction='none': rows whose upstream gradient is exactly 0 keep an upstream of 1",
        lambda: _zero_rows,
        # the plain option (3 cases) fails every quantity the 16 masked-upstream cases fail
        targets=({"upstream": "masked", "option": "plain"},),
    ),
    _mutant(
        "mutant_mean_ignores_upstream",
        "reduction='mean': backward takes the upstream scalar as 1 (loss / accum_steps ignored)",
        lambda: _mean_upstream_ignored,
        targets=({"reduction": "mean", "upstream": "accum"},),
    ),
    _mutant(
        "mutant_fp16_upstream",
        "the upstream gradient kept in float16: GradScaler's 65536 overflows to inf",
        lambda: _fp16_upstream,
        # the plain option (6 cases) fails every quantity the 21 grad_scaler cases fail
        targets=({"upstream": "grad_scaler", "dtype": ("fp32", "bf16"), "option": "plain"},),
    ),
    _mutant(
        "mutant_upstream_read_dense",
        "reduction='none': the upstream read row by row as a dense vector (loss.sum().backward() hands a 1 "
        "expanded over the rows, one element of storage)",
        lambda: _upstream_dense,
        # invisible with a materialised upstream: the harness hands the expanded one autograd hands;
        # the plain option (28 cases) fails every quantity the 70 of every option fail
        targets=({"reduction": "none", "upstream": "ones", "option": "plain"},),
    ),
    _mutant(
        "mutant_unit_sum_as_mean",
        "reduction='sum' with an upstream of exactly 1 takes mean's fast path (divides by N)",
        lambda: _unit_sum_as_mean,
        targets=({"reduction": "sum", "upstream": "ones"},),
    ),
)


# ------------------------------------------------------------------------- the split step (suites/common/split_step.py)

PROVIDERS += (
    split_step.local_normaliser(
        "ce", "mutant_local_token_count", _ours,
        "each piece of a split step normalised by its own valid tokens, the pieces' means averaged "
        "(Megatron-LM #7452: one valid token, CP=4, a quarter of the gradient)",
        # the mean only (a sum has no normaliser), where the pieces' counts differ
        {"reduction": "mean", "spread": ("uneven", "one_token", "empty_piece")},
    ),
)  # fmt: skip

"""Planted bugs in the `flce` kernel, registered like any provider (see suites/ce/mutants.py).

Run only when named (`--kernel flce --provider mutant_...`); a suite that cannot make verify fail on
one of these is not checking what it claims.
"""

from __future__ import annotations

import torch

from ligerbench.registry import Provider
from ligerbench.suites.ce.spec import ce_torch
from ligerbench.suites.common import input_mutants, split_step
from ligerbench.suites.flce.providers import MANY_CHUNKS, flce_upcast

_CHUNK = 5  # as providers.py SMALL_CHUNK_TOKENS: no grid token count is a multiple


def _drops_last_partial_chunk(hidden, weight, target, *, token_weight, **opts):
    """A chunk loop written as `range(0, N - chunk + 1, chunk)`: the last partial chunk is never
    visited, so its tokens add nothing to the loss or any gradient, while the mean's denominator
    (computed before the loop) still counts them. Emulated on our kernel by giving those tokens
    a token weight of 0, which is exactly 'never visited' with zero-initialised outputs."""
    from ligerbench.kernels.fused_linear_cross_entropy import fused_linear_cross_entropy

    n = target.numel()
    visited = (torch.arange(n, device=target.device) < (n // _CHUNK) * _CHUNK).reshape(target.shape)
    tw = visited.float() if token_weight is None else token_weight * visited
    return fused_linear_cross_entropy(
        hidden, weight, target, token_weight=tw, chunk_tokens=_CHUNK, return_z_loss=True, **opts
    )


def _ours(hidden, weight, target, **opts):
    from ligerbench.kernels.fused_linear_cross_entropy import fused_linear_cross_entropy

    return fused_linear_cross_entropy(hidden, weight, target, return_z_loss=True, **opts)


def _ignores_storage_offset(hidden, weight, target, **opts):
    """hidden read from the start of its storage as if contiguous: a logits_to_keep slice gives
    the states of the wrong positions."""
    start = torch.as_strided(hidden, hidden.shape, input_mutants.dense_strides(hidden.shape), 0)
    return _ours(start, weight, target, **opts)


def _targets_transposed(hidden, weight, target, **opts):
    return _ours(hidden, weight, input_mutants.targets_transposed(target), **opts)


def _wraps_at_64_chunks(hidden, weight, target, *, bias, token_weight, **opts):
    """Per-chunk weight-gradient partials kept in 64 slots indexed by chunk id modulo 64: with
    MANY_CHUNKS chunks, chunk 64 + k overwrites chunk k's partial, so the first chunks never
    reach the weight gradient (the loss, hidden and bias gradients are right). Emulated as ours
    over MANY_CHUNKS chunks less the weight gradient of the lost chunks' tokens, formed by the
    eager provider on those tokens alone (one interpreted call of ours, not two)."""
    n = target.numel()
    per_chunk = -(-n // MANY_CHUNKS)
    chunks = -(-n // per_chunk)
    chunk_of = (torch.arange(n, device=target.device) // per_chunk).reshape(target.shape)
    lost = (chunk_of < chunks - 64).float()
    tw_lost = lost if token_weight is None else token_weight * lost
    fixed = dict(chunk_tokens=per_chunk, grad_weight_accum="fp32")
    loss, z = _ours(hidden, weight, target, bias=bias, token_weight=token_weight, **fixed, **opts)
    b = None if bias is None else bias.detach()
    gone, _ = flce_upcast(hidden.detach(), weight, target, bias=b, token_weight=tw_lost, **opts)
    return loss - (gone - gone.detach()), z


def _one_chunk_upstream_ignored(hidden, weight, target, **opts):
    """When every token fits in one chunk, a fast path returns the gradients formed in forward
    without scaling them by the upstream scalar (mean and sum)."""
    from ligerbench.kernels.chunking import chunk_size
    from ligerbench.kernels.fused_linear_cross_entropy import default_chunk_bytes

    loss, z = _ours(hidden, weight, target, **opts)
    n = target.numel()
    budget = default_chunk_bytes(n, weight.shape[0], weight.shape[1], weight.dtype)
    one_chunk = chunk_size(n, weight.shape[0], hidden.element_size(), budget, None) >= n
    if one_chunk and opts["reduction"] != "none":
        loss = input_mutants.with_upstream(loss, input_mutants.upstream_ignored)
    return loss, z


def _zero_rows_compacted(hidden, weight, target, **opts):
    loss, z = _ours(hidden, weight, target, **opts)
    if opts["reduction"] == "none":
        loss = input_mutants.with_upstream(loss, input_mutants.zero_rows_compacted)
    return loss, z


def _upstream_read_dense(hidden, weight, target, **opts):
    loss, z = _ours(hidden, weight, target, **opts)
    if opts["reduction"] == "none":
        loss = input_mutants.with_upstream(loss, input_mutants.upstream_read_dense)
    return loss, z


class _RowsAssumedContiguous(torch.autograd.Function):
    """Identity on hidden; backward writes the (right) gradient's values in row-major order into
    a tensor with hidden's strides, as a kernel that forms dh assuming contiguous rows does
    (Liger-Kernel 0.1.0-0.8.4's fused linear cross entropy): wrong whenever hidden is not."""

    @staticmethod
    def forward(ctx, hidden):
        ctx.shape, ctx.stride = hidden.shape, hidden.stride()
        return hidden.view_as(hidden)

    @staticmethod
    def backward(ctx, grad):
        flat = grad.contiguous().reshape(-1)
        span = 1 + sum((s - 1) * st for s, st in zip(ctx.shape, ctx.stride, strict=True))
        storage = torch.zeros(max(span, flat.numel()), dtype=grad.dtype, device=grad.device)
        storage[: flat.numel()] = flat
        return torch.as_strided(storage, ctx.shape, ctx.stride)


def _rows_assumed_contiguous(hidden, weight, target, **opts):
    return _ours(_RowsAssumedContiguous.apply(hidden), weight, target, **opts)


def _blocks_as_if_at_row_max(exact_loss: bool):
    """store='shifted16' losing each block's own max: every block's shifted values y = x - m_b
    are read back as if shifted by the row's max (y + m, not y + m_b), so each block's
    probabilities come out exp(m - m_b) too large. With `exact_loss` only the gradient does this
    (the rows kernel dropped m_b); without, the loss too (block sums added without rescaling)."""

    def call(hidden, weight, target, *, bias=None, class_weight=None, **options):
        from ligerbench.kernels import shifted_logits

        x = hidden.float() @ weight.float().t()
        if bias is not None:
            x = x + bias.float()
        block, v = shifted_logits.block_size(x.device), x.shape[-1]
        padded = torch.nn.functional.pad(x.detach(), (0, (-v) % block), value=float("-inf"))
        m_b = padded.unflatten(-1, (-1, block)).amax(-1, keepdim=True).expand(*padded.shape[:-1], -1, block)
        wrong = x - m_b.flatten(-2)[..., :v] + x.detach().amax(-1, keepdim=True)
        loss, z_loss = ce_torch(wrong, target, weight=class_weight, **options)
        if exact_loss:
            loss = loss + (ce_torch(x.detach(), target, weight=class_weight, **options)[0] - loss).detach()
        return loss, z_loss

    return call


def _mutant(name: str, description: str, fn, **kw) -> Provider:
    return Provider(name=name, kernel="flce", description=description, load=lambda: fn, mutant=True, **kw)


PROVIDERS = (
    _mutant(
        "mutant_ignores_storage_offset",
        "reads hidden from the start of its storage as if contiguous (a logits_to_keep slice read wrong)",
        _ignores_storage_offset,
        # per-row losses: each row read at the wrong offset shows in its own loss (6 cases fail every
        # quantity the 14 kept_slice cases fail)
        targets=({"layout": "kept_slice", "reduction": "none"},),
    ),
    _mutant(
        "mutant_flce_targets_flattened_transposed",
        "flattens [B, T] targets column-major while hidden [B, T, H] is flattened row-major",
        _targets_transposed,
        # per-row losses show each transposed target (6 cases fail every quantity the 13 3d cases fail)
        targets=({"layout": "3d", "reduction": "none"},),
    ),
    _mutant(
        "mutant_wraps_at_64_chunks",
        "weight-gradient partials in 64 slots by chunk id: past 64 chunks the first chunks are lost",
        _wraps_at_64_chunks,
        # the many-chunk cases (suites/flce/grid.py, E): 72 chunks
        targets=({"n": 72},),
    ),
    _mutant(
        "mutant_one_chunk_upstream_ignored",
        "single-chunk fast path: gradients not scaled by the upstream scalar (1/8, 65536, random)",
        _one_chunk_upstream_ignored,
        # every quick case fits one chunk of the default budget; the upstream must not be 1;
        # the plain option in both dtypes, the core's 10% ignored (7 cases fail every quantity the
        # 20 of every ignore pattern fail: neither the option nor the pattern matters to this bug)
        targets=(
            {
                "reduction": ("mean", "sum"),
                "upstream": ("accum", "grad_scaler", "random"),
                "option": "plain",
                "ignore_pattern": "random_10",
            },
        ),
    ),
    _mutant(
        "mutant_flce_upstream_read_dense",
        "reduction='none': the upstream read row by row as a dense vector (ours until 508b573: "
        "loss.sum().backward()'s expanded 1 read past its one element)",
        _upstream_read_dense,
        targets=({"reduction": "none", "upstream": "ones"},),
    ),
    _mutant(
        "mutant_hidden_grad_rows_assumed_contiguous",
        "hidden's gradient formed as if its rows were contiguous (Liger-Kernel 0.1.0-0.8.4)",
        _rows_assumed_contiguous,
        targets=({"layout": "column_major"},),
    ),
    _mutant(
        "mutant_zero_upstream_rows_compacted",
        "reduction='none': rows with an exact-zero upstream compacted away, later rows get others' values",
        _zero_rows_compacted,
        targets=({"upstream": "masked"},),
    ),
    _mutant(
        "mutant_shifted_block_max_lost",
        "store='shifted16' gradient formed as if every block were shifted by the row's max (m_b dropped)",
        _blocks_as_if_at_row_max(exact_loss=True),
        # bf16 without options (what the store takes); rows of several blocks (V >= 64 on CPU); the
        # core's 10% ignored (13 cases fail every quantity the 25 of every ignore pattern fail)
        targets=({"dtype": "bf16", "option": "plain", "v": (256, 257), "ignore_pattern": "random_10"},),
    ),
    _mutant(
        "mutant_shifted_blocks_not_rescaled",
        "store='shifted16' row statistics from block sums added without rescaling to the row's max",
        _blocks_as_if_at_row_max(exact_loss=False),
        targets=({"dtype": "bf16", "option": "plain", "v": (256, 257), "ignore_pattern": "random_10"},),
    ),
    Provider(
        name="mutant_drops_last_chunk",
        kernel="flce",
        description="chunk loop that skips the last partial chunk of tokens",
        load=lambda: _drops_last_partial_chunk,
        mutant=True,
        # selftest's slice (ligerbench/selftest.py): no token ignored, so the tokens the loop skips show
        targets=({"dtype": "fp32", "ignore_pattern": "none", "option": "plain", "logits": "normal"},),
    ),
)


# ------------------------------------------------------------------------- the split step (suites/common/split_step.py)

PROVIDERS += (
    split_step.local_normaliser(
        "flce", "mutant_flce_local_token_count", lambda: _ours,
        "each piece of a split step normalised by its own valid tokens, the pieces' means averaged "
        "(Megatron-LM #7452; gradient accumulation's: Liger-Kernel #1082)",
        {"reduction": "mean", "spread": ("uneven", "one_token", "empty_piece")},
    ),
)  # fmt: skip

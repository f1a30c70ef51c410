"""Providers of `flp`: ours at several cuttings (the result must not depend on them: Liger #1472)
and the peers (docs/peers.md). Each returns (logp, entropy) float32."""

from __future__ import annotations

import functools

import torch
from torch.utils.checkpoint import checkpoint

from ligerbench.registry import OURS, Provider
from ligerbench.suites.common.compiled import compiled_on_gpu
from ligerbench.suites.families import log_prob as semantics


def _ours(**settings):
    from ligerbench.kernels.fused_linear_log_probs import fused_linear_log_probs

    return functools.partial(fused_linear_log_probs, **settings) if settings else fused_linear_log_probs


def eager_fp32(hidden, weight, target, *, bias=None, **options):
    """Full float32 logits from upcast operands, then the semantics in PyTorch."""
    x = hidden.float() @ weight.float().t()
    if bias is not None:
        x = x + bias.float()
    return semantics.reference(x, target, **options)


def textbook_fp32(hidden, weight, target, *, bias=None, **options):
    """What TRL, verl and transformers users write: float32 logits from upcast operands, then
    `torch.log_softmax` and entropy as -(p * logp).sum(-1), the softcap through autograd's tanh."""
    return eager_fp32(hidden, weight, target, bias=bias, textbook=True, **options)


def chunked_checkpoint(hidden, weight, target, *, bias=None, chunk_rows=8, body=eager_fp32, **options):
    """`body` (eager by default) over row chunks under torch.utils.checkpoint: what trainers do to
    save memory."""
    rows = hidden.reshape(-1, hidden.shape[-1])
    t = target.reshape(rows.shape[0], *target.shape[hidden.dim() - 1 :])
    pieces = [
        checkpoint(functools.partial(body, bias=bias, **options), rows[i : i + chunk_rows], weight,
                   t[i : i + chunk_rows], use_reentrant=False)
        for i in range(0, rows.shape[0], chunk_rows)
    ]  # fmt: skip
    if not pieces:
        return body(hidden, weight, target, bias=bias, **options)
    logp = torch.cat([p[0] for p in pieces]).reshape(target.shape)
    entropy = torch.cat([p[1] for p in pieces]).reshape(hidden.shape[:-1])
    return logp, entropy


PROVIDERS = (
    Provider(name="ours", **OURS, kernel="flp", description="kernels/fused_linear_log_probs.py (vocabulary slices; "
             "backward recomputes the logits)", load=_ours),
    Provider(name="ours_small_chunks", **OURS, kernel="flp",
             description="ours with 16 KiB pieces: many vocabulary slices",
             load=lambda: _ours(chunk_bytes=16 * 1024), settings={"chunk_bytes": 16 * 1024}),
    Provider(name="ours_rows", **OURS, kernel="flp", description="ours, backward by row chunks (7 rows each)",
             load=lambda: _ours(backward_split="rows", chunk_rows=7),
             settings={"backward_split": "rows", "chunk_rows": 7}),
    Provider(name="eager", kernel="flp", description="PyTorch on float32 logits from upcast operands",
             load=lambda: eager_fp32),
    Provider(name="textbook", kernel="flp", load=lambda: textbook_fp32,
             description="PyTorch as users write it: torch.log_softmax, -(p * logp).sum(-1) (fails --strict "
             "where the formula cancels: the entropy of a peaked row)"),
    Provider(name="chunked_checkpoint", kernel="flp", description="PyTorch over 8-row chunks under checkpoint",
             load=lambda: chunked_checkpoint),
    Provider(name="torch_compile", kernel="flp", description="torch.compile of the float32 PyTorch semantics",
             load=lambda: compiled_on_gpu(eager_fp32, dynamic=True), devices=("cuda",)),
)  # fmt: skip

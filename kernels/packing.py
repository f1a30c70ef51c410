"""Per-sequence loss normalisation for packed rows (several sequences in one row of a batch).

    from ligerbench.kernels.packing import shift_labels_packed, per_sequence_token_weights
    pos = torch.tensor([[0, 1, 2, 0, 1, 2, 3]])           # two sequences packed in one row
    labels = torch.tensor([[5, 6, 7, 8, 9, 10, 11]])
    target = shift_labels_packed(labels, pos)               # [[6, 7, -100, 9, 10, 11, -100]]
    w = per_sequence_token_weights(target, pos)             # [[1/4]*2, 0, [1/6]*3, 0]
    loss = (w * per_token_loss).sum()                       # mean over sequences of their means

Why: a mean over all tokens of a packed row weights each sequence by its length, so short
sequences count less than they would in a padded batch with a per-sequence mean (docs/bugs.md,
bug 4). These weights make the packed loss, and its gradients, equal the padded one.

Boundaries are found exactly as transformers finds packed sequences for its attention mask
(`masking_utils.find_packed_sequence_indices`): a new sequence starts wherever the position id
does not increase by exactly 1. Sequences never span two rows.
"""

from __future__ import annotations

import torch


def sequence_index(position_ids: torch.Tensor) -> torch.Tensor:
    """[B, T] int64: index of the sequence each token belongs to, counted across the whole batch
    (row r's sequences are numbered after row r-1's)."""
    first = position_ids[:, :1] - 1  # so that the first token never starts a new sequence by itself
    starts = torch.diff(position_ids, prepend=first, dim=-1) != 1
    local = starts.long().cumsum(-1)  # 0, 0, 1, 1, 1, ... within each row
    per_row = local[:, -1] + 1
    offset = torch.cumsum(per_row, 0) - per_row
    return local + offset[:, None]


def shift_labels_packed(labels: torch.Tensor, position_ids: torch.Tensor | None, ignore_index: int = -100):
    """Labels shifted so token t predicts t+1, as transformers' ForCausalLMLoss shifts them, but with
    `ignore_index` also at the last token of every packed sequence: without it that token would be
    trained to predict the first token of the next, unrelated sequence."""
    shifted = torch.nn.functional.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    if position_ids is None:
        return shifted.contiguous()
    seq = sequence_index(position_ids.expand_as(labels))
    crosses = torch.zeros_like(labels, dtype=torch.bool)
    crosses[:, :-1] = seq[:, 1:] != seq[:, :-1]
    return shifted.masked_fill(crosses, ignore_index).contiguous()


def per_sequence_token_weights(
    target: torch.Tensor, position_ids: torch.Tensor | None, ignore_index: int = -100
) -> torch.Tensor:
    """float32 [B, T] weights w such that sum(w * loss_per_token) is the mean over sequences of each
    sequence's mean token loss. `target` is already shifted (see `shift_labels_packed`).

    w[t] = 1 / (targets counted in t's sequence) / (sequences with at least one counted target),
    0 on ignored tokens. Sequences with no counted target do not enter the mean (a padded batch
    with a per-sequence mean would have to drop them too, or divide by zero). Without position_ids
    each row is one sequence (a padded batch)."""
    b, t = target.shape
    if position_ids is None:
        position_ids = torch.arange(t, device=target.device).expand(b, t)
    seq = sequence_index(position_ids.expand(b, t)).reshape(-1)
    counted = (target != ignore_index).reshape(-1)
    n_seq = seq.numel()  # an upper bound on the sequences (each token its own): no host sync
    per_seq = torch.zeros(n_seq, dtype=torch.float32, device=target.device)
    per_seq.index_add_(0, seq, counted.float())
    n_with_targets = (per_seq > 0).sum().clamp(min=1).float()
    w = torch.where(counted, 1.0 / per_seq.clamp(min=1.0)[seq], torch.zeros((), device=target.device))
    return (w / n_with_targets).reshape(b, t)

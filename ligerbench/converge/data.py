"""Synthetic supervised fine-tuning data: deterministic from a seed, learnable, padded and masked.

    from ligerbench.converge.data import make_batches, pack
    batches = make_batches(vocab=256, batch=2, seq_len=16, steps=12, seed=0)
    row = pack(batches[0])          # the same sequences in one row, position_ids restarting

The language: a fixed random permutation `succ` of a small set of "active" tokens; each token is
followed by succ(token) with probability FOLLOW, else by a random active token. A model that
learns the unigram (only ACTIVE tokens occur) is already at log(ACTIVE) < log(vocab); one that
learns `succ` gets near the entropy of the noise. So the loss falls well below log(vocab) in a
few dozen steps, and the curve has a shape worth comparing.

Each sequence: a prompt whose labels are -100 (prompt-masked, as in SFT), then a response that
is trained on; rows are right-padded with PAD (label -100, attention mask 0). Lengths vary per
sequence so padding, masking and packing all have something to do.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

PAD, FIRST_ACTIVE = 0, 3  # ids 0-2 are pad/bos/eos, as in the model configs
ACTIVE = 32  # tokens in use (fewer when the vocab is smaller)
FOLLOW = 0.85
IGNORE = -100


@dataclass(frozen=True)
class Batch:
    input_ids: torch.Tensor  # [B, T] int64
    attention_mask: torch.Tensor  # [B, T] int64, 0 on padding
    labels: torch.Tensor  # [B, T] int64, -100 on prompt and padding (not shifted)
    lengths: tuple[int, ...]  # real tokens per row

    def to(self, device) -> Batch:
        return Batch(self.input_ids.to(device), self.attention_mask.to(device), self.labels.to(device), self.lengths)

    def inputs(self) -> dict:
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask, "labels": self.labels}


@dataclass(frozen=True)
class PackedRow:
    input_ids: torch.Tensor  # [1, L]
    position_ids: torch.Tensor  # [1, L], restarting at 0 at each sequence
    labels: torch.Tensor  # [1, L], not shifted


def _language(vocab: int, gen: torch.Generator) -> tuple[torch.Tensor, int]:
    n_active = min(ACTIVE, vocab - FIRST_ACTIVE)
    succ = torch.randperm(n_active, generator=gen) + FIRST_ACTIVE
    return succ, n_active


def _sequence(length: int, succ: torch.Tensor, n_active: int, gen: torch.Generator) -> torch.Tensor:
    first = FIRST_ACTIVE + int(torch.randint(n_active, (1,), generator=gen))
    noise = (torch.rand(length, generator=gen) >= FOLLOW).tolist()
    random_next = (FIRST_ACTIVE + torch.randint(n_active, (length,), generator=gen)).tolist()
    follow = succ.tolist()
    # the chain in Python ints: indexing tensors element by element cost ~3 s for the gpu
    # preset's 60 x 8 x 256 tokens, on every rank and dtype of a --nproc run
    tokens = [first]
    for t in range(1, length):
        tokens.append(random_next[t] if noise[t] else follow[tokens[-1] - FIRST_ACTIVE])
    return torch.tensor(tokens, dtype=torch.long)


def make_batches(*, vocab: int, batch: int, seq_len: int, steps: int, seed: int) -> list[Batch]:
    """`steps` padded batches of `batch` sequences, each of 3/4 to all of `seq_len` tokens."""
    gen = torch.Generator().manual_seed(seed)
    succ, n_active = _language(vocab, gen)
    out = []
    for _ in range(steps):
        ids = torch.full((batch, seq_len), PAD, dtype=torch.long)
        labels = torch.full((batch, seq_len), IGNORE, dtype=torch.long)
        mask = torch.zeros((batch, seq_len), dtype=torch.long)
        lengths = []
        for b in range(batch):
            n = int(torch.randint(max(3 * seq_len // 4, 4), seq_len + 1, (1,), generator=gen))
            prompt = int(torch.randint(1, max(n // 3, 2), (1,), generator=gen))
            seq = _sequence(n, succ, n_active, gen)
            ids[b, :n], mask[b, :n] = seq, 1
            labels[b, prompt:n] = seq[prompt:]
            lengths.append(n)
        out.append(Batch(ids, mask, labels, tuple(lengths)))
    return out


def make_uneven_batch(*, vocab: int, lengths: tuple[int, ...], seed: int) -> Batch:
    """One padded batch with the given sequence lengths: the packed check wants them uneven, since
    that is where a per-token mean and a per-sequence mean differ (docs/bugs.md, bug 4)."""
    gen = torch.Generator().manual_seed(seed + 7919)
    succ, n_active = _language(vocab, gen)
    width = max(lengths)
    ids = torch.full((len(lengths), width), PAD, dtype=torch.long)
    labels = torch.full_like(ids, IGNORE)
    mask = torch.zeros_like(ids)
    for b, n in enumerate(lengths):
        seq = _sequence(n, succ, n_active, gen)
        prompt = max(1, n // 4)
        ids[b, :n], mask[b, :n] = seq, 1
        labels[b, prompt:n] = seq[prompt:]
    return Batch(ids, mask, labels, tuple(lengths))


def pack(batch: Batch) -> PackedRow:
    """The batch's sequences, unpadded and concatenated into one row; position_ids restart at each
    sequence, which is how transformers (and our per-sequence weights) find the boundaries."""
    ids, pos, labels = [], [], []
    for b, n in enumerate(batch.lengths):
        ids.append(batch.input_ids[b, :n])
        labels.append(batch.labels[b, :n])
        pos.append(torch.arange(n, device=batch.input_ids.device))
    return PackedRow(torch.cat(ids)[None], torch.cat(pos)[None], torch.cat(labels)[None])

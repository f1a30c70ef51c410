"""How many tokens a chunk of the fused kernels (flce, flp and their vocab-parallel forms) holds
for a memory budget: one rule, shared, so the kernels that call each other import it from here."""

from __future__ import annotations

# 192 MiB of logits per chunk: at N=8192 the Llama-3-8B head (V=128256, bf16) gets chunks of
# 768 tokens and the Gemma-2 head (V=256000) 384; with the gradients themselves (1066 and
# 1161 MiB) that stays under the 1.25 / 1.35 GiB design targets (docs/performance.md) in "dtype" accumulation.
DEFAULT_CHUNK_BYTES = 192 * 2**20
_TILE = 64  # 128 left the Gemma-2 head (V=256000) at 128 tokens a chunk where 196 fit: 64 chunks, not 43


def chunk_size(n_tokens: int, n_classes: int, logit_bytes: int, chunk_bytes: int, chunk_tokens: int | None) -> int:
    """Tokens per chunk: `chunk_tokens` if given, else the most whose logits fit `chunk_bytes`."""
    if chunk_tokens is not None:
        if chunk_tokens < 1:
            raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
        return min(chunk_tokens, max(n_tokens, 1))
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
    rows = max(chunk_bytes // max(n_classes * logit_bytes, 1), 1)
    if rows > _TILE:
        rows -= rows % _TILE
    return min(rows, max(n_tokens, 1))

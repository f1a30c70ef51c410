"""Unsloth (unsloth + unsloth_zoo): no provider registered, and why.

Its GRPO log-prob path is `unsloth_zoo.rl_replacements.chunked_selective_log_softmax(logits,
index, temperature)`: log-probs only (the entropy comes from elsewhere in its trainer), so it
cannot meet `lp`'s contract of (logp, entropy). And `import unsloth_zoo` refuses to run without
`unsloth` installed, which in turn needs a CUDA device, torchao, tyro, cut_cross_entropy and a
TRL <= 1.15 (we pin TRL 1.16). docs/peers.md says what was tried on the GPU box.
"""

from __future__ import annotations

DISTRIBUTION = "unsloth"
PINNED = "2026.10.9"
PROVIDERS = ()

"""Mini transformers models for the convergence suite, from config classes with random init
(nothing is downloaded), and the presets that size them and their training runs.

    from ligerbench.converge.models import PRESETS, build_model
    model = build_model("gemma2-mini", PRESETS["tiny"], seed=0, dtype=torch.float32)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MODELS: tuple[str, ...] = ("llama-mini", "qwen3-mini", "gemma2-mini", "mistral-mini")

# Gemma-2 ships 30.0. Our random-init logits stay within a few units, where tanh(x / 30) is
# nearly the identity, so softcap would be exercised in name only: at 5.0 the cap bends the
# trained logits visibly and a softcap applied twice, or not at all, changes the loss.
GEMMA2_MINI_SOFTCAP = 5.0


@dataclass(frozen=True)
class Preset:
    name: str
    device: str  # where it is meant to run: "cpu" (Triton interpreter) or "cuda"
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    batch: int  # sequences per step (padded batch)
    seq_len: int  # tokens per padded row
    steps: int
    lr: float
    topk: int  # eval log-probs compared for the top-k tokens
    description: str


# AdamW's learning rate, chosen so that transformers' own bf16 run stays near the float64 run,
# which is the yardstick of every trajectory limit (ligerbench/converge/tolerance.py): AdamW moves
# every weight by about lr a step whatever its gradient, and a weight stored in bf16 rounds each
# update, so the bf16 run's distance grows with lr x steps. Measured on the tiny preset (CPU,
# llama-mini, 12 steps, transformers' bf16 run against float64): at 1e-2 the final parameters
# 13% apart and the eval log-probs 0.70 nats (10x that is past every cap: no bug could fail
# them), at 3e-3 1.7% and 0.067 nats, the loss still falling from 5.51 to 3.99 (log V 5.55). The
# gpu preset's 1e-3 left fp32 eval log-probs 2.1 nats apart (a phase transition a step early or
# late): the same factor, 3e-4.
LR = {"tiny": 3e-3, "gpu": 3e-4}

PRESETS: dict[str, Preset] = {
    # The interpreter costs ~12 ms per logits row at V=256 on a 2-core CPU: 2 x 16 tokens per
    # step keeps one model's run (two trainings plus the checks) to about ten seconds.
    "tiny": Preset("tiny", device="cpu",
                   hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab=256,
                   batch=2, seq_len=16, steps=12, lr=LR["tiny"], topk=5,
                   description="CPU / CI: hidden 64, 2 layers, vocab 256, 12 steps of 2x16 tokens"),
    # Sized so one model's two trainings and all checks take well under a minute on an H100.
    "gpu": Preset("gpu", device="cuda",
                  hidden=1024, layers=4, heads=16, kv_heads=4, intermediate=2816, vocab=32000,
                  batch=8, seq_len=256, steps=60, lr=LR["gpu"], topk=10,
                  description="GPU: hidden 1024, 4 layers, vocab 32000, 60 steps of 8x256 tokens"),
}  # fmt: skip


def _config(name: str, p: Preset):
    import transformers as tf

    common = dict(
        vocab_size=p.vocab,
        hidden_size=p.hidden,
        num_hidden_layers=p.layers,
        num_attention_heads=p.heads,
        num_key_value_heads=p.kv_heads,
        intermediate_size=p.intermediate,
        head_dim=p.hidden // p.heads,
        max_position_embeddings=max(256, 4 * p.seq_len),
        # use_cache would build a KV cache in training, and transformers only detects packed rows
        # (position_ids restarting) when there is no cache: the packed check needs it off.
        use_cache=False,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        attention_dropout=0.0,
    )
    if name == "llama-mini":
        return tf.LlamaConfig(**common, tie_word_embeddings=False)
    if name == "qwen3-mini":
        return tf.Qwen3Config(**common, tie_word_embeddings=False)
    if name == "mistral-mini":
        # a window wider than any sequence we train on: the sliding window is not under test
        return tf.MistralConfig(**common, sliding_window=4 * p.seq_len, tie_word_embeddings=False)
    if name == "gemma2-mini":
        return tf.Gemma2Config(
            **common,
            final_logit_softcapping=GEMMA2_MINI_SOFTCAP,
            query_pre_attn_scalar=p.hidden // p.heads,
            sliding_window=4 * p.seq_len,
            tie_word_embeddings=True,
        )
    raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")


def _model_class(name: str):
    import transformers as tf

    return {
        "llama-mini": tf.LlamaForCausalLM,
        "qwen3-mini": tf.Qwen3ForCausalLM,
        "mistral-mini": tf.MistralForCausalLM,
        "gemma2-mini": tf.Gemma2ForCausalLM,
    }[name]


def build_model(name: str, preset: Preset, *, seed: int, dtype: torch.dtype, device="cpu") -> torch.nn.Module:
    """A freshly initialised model; the same (name, preset, seed) gives the same weights."""
    config = _config(name, preset)
    # eager attention: the same kernels on CPU and GPU, and it honours packed-sequence masks
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    # initialised where it will run: on the host, the gpu preset's 110M parameters take 2-4 s of
    # one core each time (a --nproc rank has one thread: torch.distributed.run's OMP_NUM_THREADS=1),
    # and a converge rank builds several models per dtype. A device draws its own random stream,
    # so the same seed gives other weights on CUDA than on CPU; every run of one comparison is
    # built on the same device.
    with torch.device(device):
        model = _model_class(name)(config)
    return model.to(dtype=dtype)

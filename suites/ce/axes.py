"""The case axes of `ce`, and of the kernels built on it (`flce`, `vp_ce`, `vp_flce` add theirs):
each axis's values and what each value stands for. Case ids, records columns and `--where`
follow from this declaration (ligerbench/axes.py).

    ligerbench verify --kernel ce --where reduction=none --where layout=transposed
"""

from __future__ import annotations

from ligerbench.axes import NO_DEFAULT, Axis
from ligerbench.cases import IGNORE_PATTERNS, OPTIONS, UPSTREAMS, Case
from ligerbench.suites.common import retained_backward, split_step

DTYPE = Axis(
    "dtype",
    "the logits' dtype",
    ("fp32", "bf16", "fp16"),
    means={
        "fp32": "full-precision training, and the tightest tolerance",
        "bf16": "mixed-precision training, what most models run",
        "fp16": "fp16 autocast with a GradScaler (GPU grids only)",
    },
    default="fp32",
)
REDUCTION = Axis(
    "reduction",
    "how the per-token losses are reduced",
    ("none", "mean", "sum"),
    means={
        "none": "per-token losses the caller masks or weights itself",
        "mean": "loss.backward() as transformers' models call it",
        "sum": "a summed loss the caller divides later (tokens over accumulation steps)",
    },
    default="mean",
)
UPSTREAM = Axis(
    "upstream",
    "the gradient backward receives (valid ones per reduction: cases.UPSTREAMS)",
    tuple(dict.fromkeys(u for ups in UPSTREAMS.values() for u in ups)),
    means={
        "ones": "loss.backward(): a scalar 1, or all-ones rows",
        "random": "a weighted sum of losses: rows (none) or a scalar (sum) away from 1",
        "masked": "(loss * mask).sum() after per-token losses: exact zeros on padding and prompt rows",
        "accum": "loss / accumulation_steps before backward (a scalar 1/8)",
        "grad_scaler": "torch.amp.GradScaler's default initial scale (a scalar 65536)",
    },
    default="ones",
    tag="up-",
)
IGNORE_PATTERN = Axis(
    "ignore_pattern",
    "which targets are ignored, and the ignore_index they use",
    tuple(IGNORE_PATTERNS),
    means={
        "none": "every token counted",
        "random_10": "padding: ~10% of the rows ignored with -100",
        "random_90": "mostly padding, with another negative ignore_index (-1)",
        "leading_run": "a prompt mask: the first 60% ignored (docs/bugs.md, bug 1)",
        "middle_run": "a masked span in the middle of the batch",
        "all": "a batch with no counted token (the mean is 0/0)",
        "index_is_class": "ignore_index 0, also a valid class id",
    },
    default="random_10",
)
OPTION = Axis(
    "option",
    "the loss terms beside plain cross entropy (cases.OPTIONS)",
    tuple(OPTIONS),
    means={
        "plain": "F.cross_entropy as most models call it",
        "label_smoothing": "label_smoothing=0.1 (classification and some LM recipes)",
        "softcap": "Gemma-2's final-logit softcapping (tanh)",
        "z_loss": "PaLM's z-loss on the log-sum-exp",
        "class_weight": "per-class weights, and PyTorch's weighted mean",
        "token_weight": "per-token weights (a weighted loss mask)",
        "smoothing_class_weight": "smoothing with class weights: PyTorch's mixed denominator",
        "all": "every term at once",
    },
    default="plain",
)
LOGITS = Axis(
    "logits",
    "the kind of logits drawn",
    ("normal", "confident", "large", "far_below"),
    means={
        "normal": "an untrained model: random normal logits (std 1)",
        "confident": "a trained model: 1 - p(target) between 1e-6 and 1e-2 (docs/bugs.md, bug 6)",
        "large": "large magnitude and spread: a nearly one-hot softmax, softcap saturated",
        "far_below": "every logit below -1e4: a running max must start at -inf, not 0 (verl #7439)",
    },
    default="normal",
)
LAYOUT = Axis(
    "layout",
    "how the logits tensor a provider receives is laid out in memory",
    ("2d", "3d", "padded_vocab", "transposed"),
    means={
        "2d": "[N, V] contiguous: logits already flattened by the caller",
        "3d": "[B, T, V] contiguous, targets [B, T]: logits straight from a model's lm_head",
        "padded_vocab": "[B, T, Vp][..., :V]: a vocabulary padded to a multiple of 64",
        "transposed": "[V, N].T: logits computed as (W @ h.T).T",
    },
    default="2d",
    tag="lay-",
    hidden=("2d",),  # the default layout stays out of case ids: ids of older runs still match
)


SPLIT = split_step.split_axis(
    "how the step's tokens are split (mean and sum: the summed gradients must be the one batch's)",
    {
        "none": "one batch",
        "dp2": "2 data-parallel ranks, each a contiguous shard of the tokens (whole sequences, or a "
        "context-parallel shard of one): each sums its tokens, divides by the step's count (num_items_in_batch) "
        "and multiplies by the world, DDP averages; real ranks under verify --nproc 2",
        "dp4": "4 ranks so (Megatron-LM #7513: one valid token, CP=4, a quarter of the gradient when each "
        "rank divides by its own count)",
        "accum2": "2 micro-batches of gradient accumulation, each its sum over the step's count, summed",
        "accum4": "4 micro-batches so",
    },
)
SPREAD = split_step.spread_axis(
    {
        "uneven": "the last piece keeps one valid token: a short sequence's shard beside full ones",
        "one_token": "one valid token in the whole step: the other pieces' shards are all padding or prompt",
        "empty_piece": "the first piece has no valid token (its mean would be 0/0)",
    }
)


def tokens(values: dict[str, tuple]) -> Axis:
    return Axis("n", "tokens (rows of the logits)", values, tag="n", default=NO_DEFAULT)


def vocab(values: dict[str, tuple], means: dict | None = None) -> Axis:
    return Axis("v", "classes (the vocabulary size)", values, means=means or {}, tag="v", default=NO_DEFAULT)


VOCABS = {
    1: "one class: the loss is 0 and every gradient 0",
    3: "a tiny vocabulary: most of a block is masked",
    4099: "an odd size just past a power of two: a partial last block",
    32000: "Llama-2 / Mistral",
    128256: "Llama-3",
    256000: "Gemma",
}


def loss_axes(n: Axis, v: Axis, *shape: Axis, layout: Axis) -> tuple[Axis, ...]:
    """The axes every cross-entropy kernel has, in case-id order; `shape` (hidden size, bias)
    sits after the vocabulary."""
    return (n, v, *shape, DTYPE, REDUCTION, UPSTREAM, IGNORE_PATTERN, OPTION, LOGITS, layout)


# the split and backward axes stay out of loss_axes: they are this kernel's and flce's, not every CE kernel's
AXES = (
    *loss_axes(
        tokens({"quick": (16, 8, 1), "full": (1024, 512, 1, 256)}),
        vocab({"quick": (1000, 1, 3, 4099, 256), "full": (32000, 1, 3, 4099, 128256, 256000)}, VOCABS),
        layout=LAYOUT,
    ),
    SPLIT,
    SPREAD,
    retained_backward.AXIS,
)


def case(**params) -> Case:
    """A `ce` case; the axes' defaults fill what is not named."""
    return Case.of("ce", AXES, **params)

"""The case axes of `grpo` (the GRPO family of policy losses on flp): what each value stands for.

ligerbench verify --kernel grpo --where loss_type=dapo --where split=dp2
ligerbench verify --kernel grpo --split dp4 --spread one_token
"""

from __future__ import annotations

from ligerbench.axes import NO_DEFAULT, Axis
from ligerbench.cases import Case
from ligerbench.suites.common import split_step


def completion_axes(full_t: int, full_h: int, full_v: int) -> tuple[Axis, Axis, Axis, Axis]:
    """T, H, V and DTYPE of a batch of completions through a head, as spec.sampled_completions
    draws it (grpo's and pref's): the quick sizes shared, the full ones given."""
    return (
        Axis("t", "completion length (tokens per sequence, ragged under the mask)", {"quick": (6,), "full": (full_t,)},
             tag="t", default=NO_DEFAULT),
        Axis("h", "the hidden size", {"quick": (16,), "full": (full_h,)}, tag="h", default=NO_DEFAULT),
        Axis("v", "the vocabulary size", {"quick": (64, 61), "full": (full_v,)}, tag="v", default=NO_DEFAULT,
             means={61: "odd: a partial block"}),
        Axis("dtype", "hidden's and weight's dtype", ("fp32", "bf16"), default="fp32"),
    )  # fmt: skip


B = Axis("b", "sequences (completions) in the batch", {"quick": (4,), "full": (8,)}, tag="b", default=NO_DEFAULT)
T, H, V, DTYPE = completion_axes(1024, 4096, 128256)
LOSS_TYPE = Axis("loss_type", "how per-token losses are reduced", ("grpo", "bnpo", "dr_grpo", "dapo", "cispo"),
                 default="grpo", means={
    "grpo": "mean over sequences of each sequence's token mean (DeepSeekMath)",
    "bnpo": "token mean of the batch",
    "dr_grpo": "token sum / (B * max completion length), a constant (Dr. GRPO)",
    "dapo": "token sum / num_items, the step's token count (DAPO)",
    "cispo": "clipped, detached IS weight times logp, token sum / num_items (MiniMax-M1)",
})  # fmt: skip
IMPORTANCE = Axis("importance_level", "the importance ratio per token or per sequence (GSPO)", ("token", "sequence"),
                  default="token", tag="is-", hidden=("token",))  # fmt: skip
KL = Axis(
    "kl",
    "the KL penalty against the reference policy (beta 0.04)",
    ("none", "k3", "k1"),
    default="none",
    tag="kl-",
    hidden=("none",),
    means={"k1": "logp - ref_logp", "k3": "exp(d) - d - 1, d = ref_logp - logp"},
)
TEMPERATURE = Axis("temperature", "the sampling temperature the logits are divided by", (1.0, 0.7), tag="temp",
                   default=1.0)  # fmt: skip
EPS = Axis("eps", "the clip range (eps_low, eps_high)", ("sym", "asym"), default="sym", tag="eps-",
           means={"sym": "(0.2, 0.2)", "asym": "(0.2, 0.28): DAPO's clip-higher"})  # fmt: skip
SPLIT = split_step.split_axis("how the step's batch is split (the gradient must not depend on it)", {
    "none": "one batch",
    "dp2": "2 data-parallel ranks, gradients averaged (DDP): dapo and cispo with num_items = the step's count / "
           "world, grpo and dr_grpo each rank's mean weighted by its share of the sequences; real ranks under "
           "verify --nproc 2",
    "dp4": "4 ranks so (Megatron-LM #7452: one valid token in the step, a quarter of the gradient when each rank "
           "divides by its own count)",
    "accum2": "2 micro-batches of gradient accumulation: losses summed (dapo, cispo with the step's num_items) or "
              "weighted by their share of the sequences (grpo, dr_grpo)",
    "accum4": "4 micro-batches so",
})  # fmt: skip
SPREAD = split_step.spread_axis({
    "uneven": "pieces of unequal numbers of sequences (3 and 1): dynamic batch sizes pack micro-batches by tokens",
    "one_token": "one completion token in the whole step (the other completions empty)",
    "empty_piece": "the first piece's completions all empty (truncated or filtered)",
})  # fmt: skip

AXES = (B, T, H, V, DTYPE, LOSS_TYPE, IMPORTANCE, KL, TEMPERATURE, EPS, SPLIT, SPREAD)
EPS_VALUES = {"sym": (0.2, 0.2), "asym": (0.2, 0.28)}
BETA = 0.04


def case(**params) -> Case:
    """A `grpo` case; the axes' defaults fill what is not named."""
    return Case.of("grpo", AXES, **params)

"""Planted bugs of `flp`: suites/families/log_prob_mutants.py's bug classes on the logits of the head, plus
two only a fused head has: logits rounded to the inputs' dtype before the float32 math (Liger
#1432: 4-23% gradient error), and a softmax normalised per vocabulary chunk (Liger #1472)."""

from __future__ import annotations

from ligerbench.registry import Provider
from ligerbench.suites.common.input_mutants import upstream_read_dense, with_upstream
from ligerbench.suites.families import log_prob as semantics
from ligerbench.suites.families.log_prob_mutants import BUGS, buggy
from ligerbench.suites.families.same_row_mutants import SAME_ROW_SEMANTICS, call_order_sum

HEAD_BUGS = (
    "temperature_on_logp",
    "scale_after_softcap",
    "entropy_grad_dropped",
    "max_from_zero",
    "ignores_logit_scale",
)  # fmt: skip (the padding bugs need -inf columns: lp's)


def _on_head(bug: str):
    inner = buggy(bug)

    def fn(hidden, weight, target, *, bias=None, **options):
        x = hidden.float() @ weight.float().t()
        return inner(x if bias is None else x + bias.float(), target, **options)

    return fn


def rounded_logits(hidden, weight, target, *, bias=None, **options):
    x = hidden @ weight.t()  # in the inputs' dtype: bf16 logits
    if bias is not None:
        x = x + bias
    return semantics.reference(x.float(), target, **options)


def per_chunk_softmax(hidden, weight, target, *, bias=None, **options):
    """The vocabulary cut in two and each half normalised on its own (a chunking-dependent result)."""
    x = hidden.float() @ weight.float().t()
    if bias is not None:
        x = x + bias.float()
    half = max(1, x.shape[-1] // 2)
    logp_lo, ent_lo = semantics.reference(x[..., :half], target.clamp(max=half - 1), **options)
    return logp_lo, ent_lo


def _upstream_read_dense():
    """Our op with each output's upstream read row by row as a dense vector."""
    from ligerbench.kernels.fused_linear_log_probs import fused_linear_log_probs

    def fn(hidden, weight, target, **options):
        logp, entropy = fused_linear_log_probs(hidden, weight, target, **options)
        return with_upstream(logp, upstream_read_dense), with_upstream(entropy, upstream_read_dense)

    return fn


# the cases of the determinism and batch-invariance suites (suites/flp/__init__.py, SAME_ROW_CASES)
SAME_ROW_SLICE = {"n": (24, 513), "v": (500, 128256), "h": (32, 1024), "dtype": "bf16", "bias": False,
                  **SAME_ROW_SEMANTICS}  # fmt: skip


def _mutant(name, about, load, slices=(), **fields) -> Provider:
    return Provider(name=f"mutant_flp_{name}", kernel="flp", description=about, load=load, mutant=True, targets=slices,
                    **fields)  # fmt: skip


def _call_order_sum():
    from ligerbench.kernels.fused_linear_log_probs import fused_linear_log_probs

    return call_order_sum(fused_linear_log_probs)


PROVIDERS = (
    *(_mutant(bug, BUGS[bug][0], lambda bug=bug: _on_head(bug), BUGS[bug][1]) for bug in HEAD_BUGS),
    # Each slice is as narrow as still fails every quantity the bug fails anywhere in the grid
    # (logp, entropy and every gradient): bf16 logits shifted by the bias round farthest; flat
    # logits put half the mass in each half of the vocabulary, so logp is off by log 2 on every row.
    _mutant("rounded_logits", "logits rounded to the inputs' dtype before the float32 math", lambda: rounded_logits,
            ({"dtype": "bf16", "logits": "shifted"},)),
    _mutant("per_chunk_softmax", "the softmax normalised over half the vocabulary", lambda: per_chunk_softmax,
            ({"logits": "flat"},)),
    # invisible with a materialised upstream: the harness hands the expanded one autograd hands
    _mutant("upstream_read_dense", "each upstream read as a dense vector: logp.sum() + entropy.sum() hands a 1 "
            "expanded over the rows (docs/bugs.md bug 8)", _upstream_read_dense, ({"upstream": "sums"},)),
    # ours over three chunks of rows whose gradients autograd sums in an order each call reverses:
    # an atomic add's order; it promises the same bits as ours does, and only the determinism suite
    # sees it break that (suites/families/same_row_mutants.py)
    _mutant("call_order_sum", "the weight's gradient summed over chunks of rows in an order that changes from call "
            "to call (an atomic add's)", _call_order_sum, (SAME_ROW_SLICE,), deterministic=True),
)  # fmt: skip

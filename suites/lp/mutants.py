"""Planted bugs of `lp`: suites/families/log_prob_mutants.py's bug classes, each on the slices of the grid
where it shows (padding needs the padded_vocab layout here)."""

from __future__ import annotations

from ligerbench.registry import Provider
from ligerbench.suites.common.input_mutants import upstream_read_dense, with_upstream
from ligerbench.suites.families.log_prob_mutants import BUGS, buggy

PADDED = {"mass_on_padding", "entropy_nan_at_zero"}  # -inf columns exist only in this layout


def _mutant(bug: str) -> Provider:
    about, slices = BUGS[bug]
    if bug in PADDED:
        slices = tuple({**s, "layout": "padded_vocab"} for s in slices)
    return Provider(name=f"mutant_lp_{bug}", kernel="lp", description=about, load=lambda: buggy(bug), mutant=True,
                    targets=slices)  # fmt: skip


def _upstream_read_dense():
    """Our op with each output's upstream read row by row as a dense vector."""
    from ligerbench.kernels.log_probs import log_probs

    def fn(logits, target, **options):
        logp, entropy = log_probs(logits, target, **options)
        return with_upstream(logp, upstream_read_dense), with_upstream(entropy, upstream_read_dense)

    return fn


PROVIDERS = (
    *(_mutant(bug) for bug in BUGS),
    # invisible with a materialised upstream: the harness hands the expanded one autograd hands
    Provider(name="mutant_lp_upstream_read_dense", kernel="lp", mutant=True, load=_upstream_read_dense,
             description="each upstream read as a dense vector: logp.sum() + entropy.sum() hands a 1 expanded "
             "over the rows (docs/bugs.md bug 8)", targets=({"upstream": "sums"},)),
)  # fmt: skip

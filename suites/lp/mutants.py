"""Planted bugs of `lp`: suites/families/log_prob_mutants.py's bug classes, each on the slices of the grid
where it shows (padding needs the padded_vocab layout here)."""

from __future__ import annotations

from ligerbench.registry import Provider
from ligerbench.suites.common.input_mutants import upstream_read_dense, with_upstream
from ligerbench.suites.families import sampler_masks
from ligerbench.suites.families.log_prob_mutants import BUGS, buggy
from ligerbench.suites.families.same_row_mutants import SAME_ROW_SEMANTICS, tile_from_rows

PADDED = {"mass_on_padding", "entropy_nan_at_zero"}  # -inf columns exist only in these cases


def _mutant(bug: str) -> Provider:
    about, slices = BUGS[bug]
    if bug in PADDED:
        # -inf columns: a padded vocabulary's tail, or a sampler's masks across the row
        slices = tuple({**s, **where} for s in slices for where in ({"layout": "padded_vocab"},
                                                                    {"logits": sampler_masks.KIND}))  # fmt: skip
    return Provider(name=f"mutant_lp_{bug}", kernel="lp", description=about, load=lambda: buggy(bug), mutant=True,
                    targets=slices)  # fmt: skip


def _upstream_read_dense():
    """Our op with each output's upstream read row by row as a dense vector."""
    from ligerbench.kernels.log_probs import log_probs

    def fn(logits, target, **options):
        logp, entropy = log_probs(logits, target, **options)
        return with_upstream(logp, upstream_read_dense), with_upstream(entropy, upstream_read_dense)

    return fn


# the cases of the determinism and batch-invariance suites (suites/lp/__init__.py, SAME_ROW_CASES)
SAME_ROW_SLICE = {"n": (24, 2048), "v": (1000, 151936), "dtype": "bf16", **SAME_ROW_SEMANTICS}

PROVIDERS = (
    *(_mutant(bug) for bug in BUGS),
    # invisible with a materialised upstream: the harness hands the expanded one autograd hands
    Provider(name="mutant_lp_upstream_read_dense", kernel="lp", mutant=True, load=_upstream_read_dense,
             description="each upstream read as a dense vector: logp.sum() + entropy.sum() hands a 1 expanded "
             "over the rows (docs/bugs.md bug 8)", targets=({"upstream": "sums"},)),
    # within every tolerance: only the batch-invariance suite sees a row's bits move with the batch
    Provider(name="mutant_lp_tile_from_rows", kernel="lp", mutant=True, load=tile_from_rows,
             description="the softmax's sum taken a tile of columns at a time, the tile chosen from the number of "
             "rows: a row's bits depend on the batch", targets=(SAME_ROW_SLICE,)),
)  # fmt: skip

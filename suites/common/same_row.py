"""The determinism and batch-invariance suites of a kernel (ligerbench/verify/invariance.py), on a
few named cases of its grid: each property costs every provider one more call a case (determinism)
or four (batch invariance: ligerbench/rowwise.py's batches), so a grid's one or two small cases
carry it, and the quick verify stays quick. Each kernel names one small 16-bit case of its quick
grid and the same case at the full grid's sizes.

    SUITES = (..., *same_row_suites("lp", ("lp/n24/v1000/bf16/.../up-both/random/normal",)))
"""

from __future__ import annotations

from ligerbench.cases import Case
from ligerbench.registry import Suite
from ligerbench.rowwise import BATCH_INVARIANCE, DETERMINISM, LAST_ROWS, RANK_COUNT


def _named(case_ids: tuple[str, ...]):
    ids = frozenset(case_ids)
    return lambda case: case.id in ids


def others(cases: tuple[Case, ...]):
    """A suite's `select` leaving out `cases` (those only the past-int32 suite runs: no float64
    truth of theirs is formed, ligerbench/verify/engine.py)."""
    ids = frozenset(c.id for c in cases)
    return lambda case: case.id not in ids


def past_int32_suite(kernel: str, cases: tuple[Case, ...]) -> Suite:
    """The last rows of logits past 2**31 elements, alone, vs the same rows in the whole batch, bit
    for bit (ligerbench/rowwise.py, LAST): a 32-bit row offset wraps there. `cases`: the grid's
    (the full preset's, on a GPU: CPU grids have none)."""
    return Suite(name="past_int32", kernel=kernel, quantities=(LAST_ROWS,), select=_named(tuple(c.id for c in cases)),
                 description="logits past 2**31 elements (full preset, GPU): the last two rows' outputs and "
                             "gradients alone vs in the whole batch, bit for bit")  # fmt: skip


def same_row_suites(kernel: str, determinism: tuple[str, ...], invariance: tuple[str, ...] = (),
                    rank_count: tuple[str, ...] = ()) -> tuple[Suite, ...]:  # fmt: skip
    """The kernel's determinism suite on the cases `determinism` names and, where it declares its
    rows (KernelSpec.rows), its batch-invariance suite on the cases `invariance` names and (a
    vocab-parallel kernel: Rows.ranks) its rank-count suite on the cases `rank_count` names."""
    suites = [
        Suite(name="determinism", kernel=kernel, quantities=(DETERMINISM,), select=_named(determinism),
              description="a second call on the same inputs: the same bits in every output and gradient "
                          "(largest distance in ulp; info where the provider does not promise it)"),
    ]  # fmt: skip
    if invariance:
        suites.append(
            Suite(name="batch_invariance", kernel=kernel, quantities=(BATCH_INVARIANCE,), select=_named(invariance),
                  description="a row's outputs and gradients, alone, at another position, in a smaller batch and "
                              "padded with other rows, vs the same row in the case's batch (ulp; info where not "
                              "promised)")
        )  # fmt: skip
    if rank_count:
        suites.append(
            Suite(name="rank_count", kernel=kernel, quantities=(RANK_COUNT,), select=_named(rank_count),
                  description="the vocabulary split over fewer ranks (1; 2 of 4), the same processes: every output "
                              "and gradient vs the case's split (ulp), and the RL ratio's tokens off 1 (info: the "
                              "merge's order of summation follows the split)")
        )  # fmt: skip
    return tuple(suites)

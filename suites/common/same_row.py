"""The determinism and batch-invariance suites of a kernel (ligerbench/verify/invariance.py), on a
few named cases of its grid: each property costs every provider one more call a case (determinism)
or four (batch invariance: ligerbench/rowwise.py's batches), so a grid's one or two small cases
carry it, and the quick verify stays quick.

    SUITES = (..., *same_row_suites("lp", ("lp/n24/v1000/bf16/.../up-both/random/normal",)))
"""

from __future__ import annotations

from ligerbench.registry import Suite
from ligerbench.rowwise import BATCH_INVARIANCE, DETERMINISM


def _named(case_ids: tuple[str, ...]):
    ids = frozenset(case_ids)
    return lambda case: case.id in ids


def same_row_suites(kernel: str, determinism: tuple[str, ...], invariance: tuple[str, ...] = ()) -> tuple[Suite, ...]:
    """The kernel's determinism suite on the cases `determinism` names and, where it declares its
    rows (KernelSpec.rows), its batch-invariance suite on the cases `invariance` names."""
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
    return tuple(suites)

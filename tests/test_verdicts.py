"""The two verdicts of one rule (ligerbench/tolerance.py): correct PyTorch as users write it passes
the default verdict and fails `--strict` only where its formula cancels; careful PyTorch and our
kernels pass `--strict`; one planted bug only `--strict` catches, one both catch. Plus what the
rule's records carry (both yardsticks' errors), the consensus check, --repeat and the hints."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from ligerbench import tolerance
from ligerbench.builtin import default_registry
from ligerbench.records import Record, load_records, records_file
from ligerbench.testing import cases, run_provider
from ligerbench.verify import diagnose
from ligerbench.verify.engine import make_plan, run_plan

BASELINES = Path(__file__).resolve().parents[1] / "results" / "baselines"
# The cases of the quick CPU grids where a textbook formula cancels in float32 (measured: 12 ce
# checks, 8 flce, 1 flp fail --strict: docs/bugs.md, bug 11) beside ones where it does not.
CANCELS = {
    # the softcap's slope 1 - tanh^2 on large logits
    "ce": "ce/n16/v1000/fp32/mean/up-ones/random_10/softcap/large",
    "flce": "flce/n12/v256/h32b/fp32/none/up-random/random_10/all/large",
    # the entropy of a peaked row through torch.log_softmax
    "flp": "flp/n24/v500/h32/fp32/t0.6/cap0.0/s1.0/k1/up-both/none/peaked/lay-3d",
    "lp": "lp/n24/v1000/fp32/t1.0/cap0.0/s1.0/k1/up-entropy/none/peaked",
}
PLAIN = {
    "ce": "ce/n16/v1000/fp32/none/up-ones/none/plain/normal",
    "flp": "flp/n24/v500/h32/fp32/t1.0/cap0.0/s1.0/k1/up-both/random/normal",
}


def _case(kernel: str, case_id: str):
    found = [c for c in cases(kernel) if c.id == case_id]
    assert found, f"{case_id} is not in {kernel}'s quick grid any more: pick another that cancels"
    return found


def _run(kernel: str, provider: str, case_id: str, *, strict: bool):
    registry = default_registry()
    p = registry.provider(kernel, provider)
    return run_provider(kernel, p, cases=_case(kernel, case_id), strict=strict, registry=registry)


def test_limit_is_the_larger_yardstick_by_default_and_the_careful_one_when_strict():
    bf16 = torch.bfloat16
    assert tolerance.limit_for(1e-3, bf16) == tolerance.FACTOR * 1e-3 + tolerance.FLOOR[bf16]
    assert tolerance.limit_for(1e-3, bf16, 4e-3) == tolerance.FACTOR * 4e-3 + tolerance.FLOOR[bf16]
    assert tolerance.limit_for(1e-3, bf16, 4e-3, strict=True) == tolerance.limit_for(1e-3, bf16)
    # a textbook formula that breaks down never widens the limit
    for broken in (math.inf, math.nan):
        assert tolerance.limit_for(1e-3, bf16, broken) == tolerance.limit_for(1e-3, bf16)


@pytest.mark.parametrize("kernel", sorted(CANCELS))
def test_textbook_pytorch_passes_the_default_and_fails_strict_where_it_cancels(kernel):
    default = _run(kernel, "textbook", CANCELS[kernel], strict=False)
    assert default.passed and default.compared, default.explain()
    strict = _run(kernel, "textbook", CANCELS[kernel], strict=True)
    assert not strict.passed, "the textbook formula met the careful yardstick where it should cancel"
    failed = strict.failures
    assert (failed["rule"] == "strict").all()
    assert (failed["textbook"] > 2 * failed["careful"]).all(), failed[["quantity", "value", "careful", "textbook"]]


@pytest.mark.parametrize("kernel", sorted(PLAIN))
def test_textbook_pytorch_passes_strict_where_nothing_cancels(kernel):
    result = _run(kernel, "textbook", PLAIN[kernel], strict=True)
    assert result.passed and result.compared, result.explain()


@pytest.mark.parametrize("kernel", sorted(CANCELS))
def test_careful_pytorch_passes_strict(kernel):
    result = _run(kernel, "eager", CANCELS[kernel], strict=True)
    assert result.passed and result.compared, result.explain()


@pytest.mark.interpreter
def test_ours_is_judged_strict_without_asking():
    result = _run("ce", "ours", CANCELS["ce"], strict=False)
    assert result.passed, result.explain()
    compared = result.records[result.records["metric"] == "rel_l2"]
    assert len(compared) and (compared["rule"] == "strict").all()
    # both yardsticks' errors are kept: either verdict can be read back from the rows
    assert compared["careful"].notna().all() and compared["textbook"].notna().all()


def _as_peer(provider):
    """A planted bug judged as a third party's provider is (the default verdict)."""
    return dataclasses.replace(provider, mutant=False, strict=False, name=provider.name + "_as_peer")


@pytest.mark.interpreter
def test_a_planted_bug_only_strict_catches_and_one_both_catch():
    registry = default_registry()
    cancels = registry.provider("ce", "mutant_softcap_slope_cancels")  # autograd's softcap slope before ours
    target = _case("ce", CANCELS["ce"])
    caught = run_provider("ce", cancels, cases=target, registry=registry)
    assert not caught.passed, "mutant_softcap_slope_cancels survived the strict verdict"
    assert run_provider("ce", _as_peer(cancels), cases=target, registry=registry).passed

    wrong = registry.provider("ce", "mutant_mean_counts_ignored")
    target = _case("ce", "ce/n16/v1000/fp32/mean/up-ones/random_10/softcap/large")
    assert not run_provider("ce", wrong, cases=target, registry=registry).passed
    assert not run_provider("ce", _as_peer(wrong), cases=target, registry=registry).passed


def test_records_without_the_yardstick_columns_still_load(tmp_path):
    """Runs written before the two verdicts (older baselines, examples) read as they were."""
    old = pd.read_csv(records_file(BASELINES / "verify-ce-quick")).drop(columns=["careful", "textbook", "rule"])
    old.to_csv(tmp_path / "records.csv", index=False)
    records = load_records(tmp_path / "records.csv")
    assert {"careful", "textbook", "rule"} <= set(records.columns) and len(records) == len(old)
    assert records["careful"].isna().all() and (records["rule"] == "").all()


def _row(provider, value, *, case="c1", quantity="grad_weight", verdict="fail"):
    return Record(run_id="r", suite="gradients", kernel="flp", provider=provider, case=case, quantity=quantity,
                  metric="rel_l2", value=value, unit="relative", limit=1e-3, verdict=verdict).row()  # fmt: skip


@pytest.mark.parametrize(
    "rows, families, suspect",
    [
        # two independent kernels, one error to 4 digits (docs/bugs.md, bug 10): the check is suspect
        ([("ours", 6.721e-3), ("verl", 6.721e-3)], {"ours": "ours"}, True),
        # within 10%
        ([("ours", 6.0e-3), ("verl", 6.5e-3)], {}, True),
        # one kernel under two settings is one family: not a consensus
        ([("ours", 6.721e-3), ("ours_rows", 6.721e-3)], {"ours": "ours", "ours_rows": "ours"}, False),
        # far apart: each provider answers for itself
        ([("ours", 2e-3), ("verl", 6.7e-3)], {}, False),
        # one failing provider
        ([("ours", 6.721e-3)], {}, False),
    ],
)
def test_consensus_names_a_check_two_independent_providers_fail_alike(rows, families, suspect):
    df = pd.DataFrame([_row(p, v) for p, v in rows] + [_row("eager", 1e-4, verdict="pass")])
    found = diagnose.suspects(df, families)
    assert (len(found) == 1) == suspect, found
    if suspect:
        assert diagnose.suspect_lines(df, families)[0].startswith("SUSPECT CHECK gradients grad_weight c1")


class _Writer:
    def __init__(self):
        self.rows = []

    def write(self, record):
        self.rows.append(record)


def _racy(base):
    """A provider whose gradient differs in its last bits from call to call, as a race does."""

    calls = []

    def call(logits, target, **options):
        loss, z = base(logits, target, **options)
        calls.append(None)
        return loss * (1 + len(calls) * 2.0**-20), z  # a few last bits, never the same twice

    return call


@pytest.mark.parametrize(
    "deterministic, racy, verdict",
    [(True, False, "pass"), (True, True, "fail"), (False, True, "skip")],
)
def test_repeat_fails_differing_bits_of_a_provider_that_declares_itself_deterministic(deterministic, racy, verdict):
    registry = default_registry()
    eager = registry.provider("ce", "eager")
    fn = _racy(eager.load()) if racy else eager.load()
    load = lambda: fn  # noqa: E731 -- one callable, however often the engine loads it
    registry.providers[("ce", "under_test")] = dataclasses.replace(eager, name="under_test", load=load,
                                                                    deterministic=deterministic)  # fmt: skip
    plan = make_plan(registry, kernel="ce", preset="quick", device_type="cpu", providers=["under_test"],
                     case_filter=lambda c: c.id == PLAIN["ce"], repeat=3)  # fmt: skip
    writer = _Writer()
    run_plan(plan, registry, run_id="t", seed=0, device=torch.device("cpu"), writer=writer)
    repeat = [r for r in writer.rows if r.suite == "repeat"]
    assert [r.verdict for r in repeat] == [verdict], [(r.verdict, r.message) for r in repeat]
    if verdict == "fail":
        assert "2 of 2 reruns differ" in repeat[0].message and "loss" in repeat[0].message


def test_a_rerun_that_raises_is_an_error_row_and_the_run_goes_on():
    registry = default_registry()
    eager = registry.provider("ce", "eager")
    base, calls = eager.load(), []

    def second_call_raises(logits, target, **options):
        calls.append(None)
        if len(calls) == 2:
            raise RuntimeError("an illegal memory access, the second time")
        return base(logits, target, **options)

    registry.providers[("ce", "under_test")] = dataclasses.replace(eager, name="under_test", deterministic=True,
                                                                    load=lambda: second_call_raises)  # fmt: skip
    plan = make_plan(registry, kernel="ce", preset="quick", device_type="cpu", providers=["under_test"],
                     case_filter=lambda c: c.id == PLAIN["ce"], repeat=3)  # fmt: skip
    writer = _Writer()
    run_plan(plan, registry, run_id="t", seed=0, device=torch.device("cpu"), writer=writer)
    (row,) = [r for r in writer.rows if r.suite == "repeat"]
    assert row.verdict == "error" and "rerun 1 of 2: RuntimeError" in row.message, row


def test_repeat_one_writes_no_repeat_rows():
    registry = default_registry()
    plan = make_plan(registry, kernel="ce", preset="quick", device_type="cpu", providers=["eager"],
                     case_filter=lambda c: c.id == PLAIN["ce"])  # fmt: skip
    writer = _Writer()
    run_plan(plan, registry, run_id="t", seed=0, device=torch.device("cpu"), writer=writer)
    assert writer.rows and not [r for r in writer.rows if r.suite == "repeat"]


def test_a_fail_line_names_the_known_pattern():
    result = _run("ce", "textbook", CANCELS["ce"], strict=True)
    messages = " ".join(result.failures["message"])
    assert "known pattern: a softcap slope that cancels" in messages
    result = _run("flp", "textbook", CANCELS["flp"], strict=True)
    assert "the entropy of a peaked row" in " ".join(result.failures["message"])


def test_a_narrowed_run_lists_a_case_only_under_the_suites_with_something_to_check_there():
    # pref's split-step invariance applies to a few losses: `--suite invariance` on its full grid
    # once ran every case, formed each float64 truth and wrote no row for 20 of 26 (on an H200)
    from ligerbench.verify.engine import _quantities_for, make_plan

    registry = default_registry()
    spec = registry.kernels["pref"]
    plan = make_plan(registry, kernel="pref", preset="full", device_type="cpu", suites=["invariance"])
    (suite,) = plan.suites
    every = list(registry.cases_of(suite, "full", "cpu"))
    assert 0 < len(plan.cases) < len(every)
    assert all(_quantities_for(spec, suite, c) for c in plan.cases)
    assert {c.id for c in every if _quantities_for(spec, suite, c)} == {c.id for c in plan.cases}

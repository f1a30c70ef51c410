"""`ligerbench selftest`: every planted kernel bug is killed on CPU by the suite that exists for it,
a mutant no check can see fails the command, and the kill accounting trusts a failure only
where the correct provider passes the same check."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
from typer.testing import CliRunner

from helpers import register_plugin
from ligerbench import registry
from ligerbench.builtin import default_registry
from ligerbench.cli import app
from ligerbench.selftest import engine, killmatrix
from ligerbench.selftest.kernels import control_cases
from ligerbench.selftest.model import Mutant, check_targets, targeted
from ligerbench.suites.ce import axes as ce_axes
from ligerbench.suites.families.distill_mutants import MUST_KILL as DISTILL_MUST_KILL

runner = CliRunner()
# Each kernel mutant and the suite that must kill it (the knowledge of tests/test_cli_verify.py).
MUST_KILL = {
    # log-probs (suites/families/log_prob_mutants.py): the entropy's dropped gradient shows in gradients only
    "mutant_lp_temperature_on_logp": "correctness",
    "mutant_lp_scale_after_softcap": "correctness",
    "mutant_lp_mass_on_padding": "correctness",
    "mutant_lp_entropy_grad_dropped": "gradients",
    "mutant_lp_max_from_zero": "correctness",
    "mutant_lp_entropy_nan_at_zero": "correctness",
    "mutant_lp_ignores_logit_scale": "correctness",
    "mutant_lp_upstream_read_dense": "gradients",  # logp.sum() + entropy.sum(): expanded upstreams
    "mutant_flp_temperature_on_logp": "correctness",
    "mutant_flp_scale_after_softcap": "correctness",
    "mutant_flp_entropy_grad_dropped": "gradients",
    "mutant_flp_max_from_zero": "correctness",
    "mutant_flp_ignores_logit_scale": "correctness",
    "mutant_flp_rounded_logits": "correctness",
    "mutant_flp_per_chunk_softmax": "correctness",
    "mutant_flp_upstream_read_dense": "gradients",
    "mutant_first_row_upstream": "gradients",
    "mutant_softcap_no_tanh_grad": "gradients",
    "mutant_mean_counts_ignored": "correctness",
    "mutant_low_precision_target_grad": "gradients",
    "mutant_silent_inplace": "contracts",
    "mutant_zloss_no_grad": "gradients",
    "mutant_smoothing_ignores_class_weight": "correctness",
    "mutant_saved_grad_scaled_in_place": "second_backward",
    "mutant_max_started_at_zero": "correctness",
    "mutant_drops_last_chunk": "correctness",
    # vp_ce (tests/test_vp_ce.py has the cases each needs)
    "mutant_vp_local_smoothing": "correctness",
    "mutant_vp_remote_target_lost": "correctness",
    "mutant_vp_edge_off_by_one": "gradients",
    "mutant_vp_even_shards": "gradients",
    "mutant_vp_ignore_by_local_id": "correctness",
    "mutant_vp_local_mean": "correctness",
    "mutant_vp_world_division": "gradients",
    "mutant_vp_upstream_ignored": "gradients",
    "mutant_vp_mean_of_nothing_is_zero": "correctness",
    "mutant_vp_silent_inplace": "contracts",
    # on a mesh only (suites/vp_ce/mesh.py); logits handed gathered must be refused
    "mutant_vp_world_rank_offset": "correctness",
    "mutant_vp_world_group": "correctness",
    "mutant_vp_gathered_accepted": "contracts",
    # vp_flce (tests/test_vp_flce_cli.py runs one on real ranks)
    "mutant_vpf_local_smoothing": "correctness",
    "mutant_vpf_dh_not_reduced": "gradients",
    "mutant_vpf_dh_reduced_twice": "gradients",
    "mutant_vpf_dh_averaged": "gradients",
    "mutant_vpf_dh_not_reduced_in_backward": "gradients",
    "mutant_vpf_even_shards": "correctness",
    "mutant_vpf_edge_off_by_one": "gradients",
    "mutant_vpf_ignore_by_local_id": "correctness",
    "mutant_vpf_local_mean": "correctness",
    "mutant_vpf_mean_of_nothing_is_zero": "correctness",
    "mutant_vpf_upstream_ignored": "gradients",
    "mutant_vpf_dh_in_hidden": "contracts",
    "mutant_vpf_world_rank_offset": "correctness",
    "mutant_vpf_world_group": "correctness",
    "mutant_vpf_shard_sum_unguarded": "correctness",  # a sampler's mask through the bias only
    # vp_flp (tests/test_vp_flp_cli.py runs one on real ranks)
    "mutant_vpflp_entropy_not_moved": "correctness",
    "mutant_vpflp_max_copy_per_rank": "correctness",
    "mutant_vpflp_logp_summed_over_ranks": "correctness",
    "mutant_vpflp_target_wrong_offset": "correctness",
    "mutant_vpflp_dh_not_reduced": "gradients",
    "mutant_vpflp_vocab_start_ignored": "correctness",
    "mutant_vpflp_world_rank_offset": "correctness",
    "mutant_vpflp_world_group": "correctness",
    "mutant_vpflp_target_logp_plain_all_reduce": "gradients",  # the log-prob's value is right
    "mutant_vpflp_entropy_identity_log_softmax": "gradients",
    "mutant_vpflp_entropy_nan_at_zero": "correctness",  # a sampler's mask through the bias only
    # one per new case-axis value (suites/common/input_mutants.py)
    "mutant_assumes_dense_rows": "correctness",  # ce layout padded_vocab
    "mutant_writes_vocab_padding": "contracts",  # ce layout padded_vocab: the caller's whole storage
    "mutant_unit_column_stride": "correctness",  # ce layout transposed
    "mutant_targets_flattened_transposed": "correctness",  # ce layout 3d
    "mutant_zero_upstream_rows_unscaled": "gradients",  # upstream masked
    "mutant_mean_ignores_upstream": "gradients",  # upstream accum (mean)
    "mutant_fp16_upstream": "gradients",  # upstream grad_scaler
    "mutant_unit_sum_as_mean": "gradients",  # upstream ones with sum
    "mutant_upstream_read_dense": "gradients",  # none, the expanded ones of loss.sum().backward()
    "mutant_flce_upstream_read_dense": "gradients",
    "mutant_vpf_upstream_read_dense": "gradients",
    "mutant_ignores_storage_offset": "correctness",  # flce layout kept_slice
    "mutant_flce_targets_flattened_transposed": "correctness",  # flce layout 3d
    "mutant_wraps_at_64_chunks": "gradients",  # flce >= 64 chunks
    "mutant_one_chunk_upstream_ignored": "gradients",  # flce one chunk
    "mutant_zero_upstream_rows_compacted": "gradients",  # flce upstream masked
    "mutant_hidden_grad_rows_assumed_contiguous": "gradients",  # flce layout column_major
    "mutant_shifted_block_max_lost": "gradients",  # flce store='shifted16' (kernels/shifted_logits.py)
    "mutant_shifted_blocks_not_rescaled": "correctness",
    # the GRPO family (suites/grpo/mutants.py; docs/bugs.md, "Bug classes in RL losses")
    "mutant_grpo_num_items_ignored": "invariance",
    "mutant_grpo_dr_grpo_as_mean": "correctness",
    "mutant_grpo_k3_for_k1": "correctness",
    "mutant_grpo_kl_sign_flipped": "gradients",
    "mutant_grpo_eps_high_ignored": "correctness",
    "mutant_grpo_clip_max": "gradients",
    "mutant_grpo_temperature_ignored": "gradients",
    "mutant_grpo_eager_upstream_ignored": "invariance",  # the split step's losses are scaled (1/2)
    "mutant_grpo_eager_cispo_ratio_kept": "gradients",
    # the split step (suites/common/split_step.py): a trainer normalising each piece by its own count
    "mutant_local_token_count": "invariance",
    "mutant_flce_local_token_count": "invariance",
    "mutant_grpo_local_normaliser": "invariance",
    # preference losses (suites/pref/mutants.py; docs/bugs.md, "Bug classes in RL losses")
    "mutant_pref_label_smoothing_ignored": "correctness",
    "mutant_pref_kto_weights_ignored": "correctness",
    "mutant_pref_ipo_on_sums": "correctness",
    "mutant_pref_kto_point_not_detached": "gradients",
    "mutant_pref_kto_point_per_microbatch": "invariance",
    # distillation (suites/families/distill_mutants.py): each bug's suite is declared beside it
    **{f"mutant_kd_{bug}": suite for bug, suite in DISTILL_MUST_KILL.items()},
    **{f"mutant_flkd_{bug}": suite for bug, suite in DISTILL_MUST_KILL.items() if not bug.startswith("topk_")},
    # docs/bugs.md, "What the careful yardstick found in our own kernels": both passed while
    # PyTorch's own formula was the yardstick
    "mutant_low_precision_target_grad_bf16": "gradients",
    "mutant_softcap_slope_cancels": "gradients",
    # same row, same answer (suites/families/same_row_mutants.py): right within every tolerance,
    # only the bits move, with the batch or from one call to the next
    "mutant_lp_tile_from_rows": "batch_invariance",
    "mutant_flp_call_order_sum": "determinism",
    # a sampler's masks on both sides of a distillation (suites/kd/mutants.py)
    "mutant_kd_kl_zero_times_inf": "correctness",
}


# Planted bugs only the strict verdict catches: a formula that cancels in float32 (docs/bugs.md,
# bug 11), and logits rounded to the inputs' 16-bit dtype before a float32 softmax, which is how
# model code forms them (suites/common/rounding.py: the default verdict's model-code form). The kill
# matrix's default_verdict says `survived` for these and `killed` for every other mutant.
STRICT_ONLY = {"mutant_softcap_slope_cancels", "mutant_flp_rounded_logits"}


def _selftest(tmp_path, *mutants, kernel=None):
    args = ["selftest", "--preset", "quick", "--device", "cpu", "--out", str(tmp_path)]
    args += ["--kernel", kernel] if kernel else []
    result = runner.invoke(app, [*args, *[a for m in mutants for a in ("--mutant", m)]])
    folders = list(tmp_path.iterdir())
    return result, (folders[0] if len(folders) == 1 else None)


def test_every_kernel_mutant_has_the_suite_that_must_kill_it():
    kernel_mutants = [p.name for p in default_registry().providers.values() if p.mutant]
    assert set(kernel_mutants) == set(MUST_KILL), "a new mutant needs its row in MUST_KILL"


# One selftest run per built-in kernel (its whole campaign, as `ligerbench selftest --kernel K`),
# so pytest-xdist spreads them over the workers; CI's selftest is these runs (.ci/run). The longest
# are scheduled first (tests/conftest.py): each kernel's `ligerbench selftest` alone, CPU seconds on
# CI's kind of machine (2026-11-29, one thread, the control on the kills' cases only).
SELFTEST_SECONDS = {"flce": 35, "grpo": 22, "ce": 21, "vp_flp": 18, "vp_flce": 14, "pref": 12, "lp": 12, "flp": 11,
                    "vp_ce": 9, "kd": 9, "flkd": 8}  # fmt: skip


@pytest.mark.interpreter
@pytest.mark.parametrize(
    "kernel",
    [
        pytest.param(k, marks=pytest.mark.slow(seconds=SELFTEST_SECONDS.get(k, 8)))
        for k in sorted(default_registry().kernels)
    ],
)
def test_every_kernel_mutant_is_killed(tmp_path, kernel):
    reg = default_registry()
    kernel_mutants = [p.name for p in reg.mutants_for(kernel)]
    assert kernel_mutants, f"{kernel} has no planted bug: nothing proves its checks can fail"
    result, run = _selftest(tmp_path, kernel=kernel)
    assert result.exit_code == 0, result.output
    table = pd.read_csv(run / "kill_matrix.csv").set_index("mutant")
    assert sorted(table.index) == sorted(kernel_mutants)
    for mutant in kernel_mutants:
        suite = MUST_KILL[mutant]
        assert table.loc[mutant, suite] == "killed", (mutant, table.loc[mutant].to_dict())
        assert table.loc[mutant, "verdict"] == "killed"
        by_default = "survived" if mutant in STRICT_ONLY else "killed"
        assert table.loc[mutant, killmatrix.DEFAULT_VERDICT] == by_default, (mutant, table.loc[mutant].to_dict())
    # each mutant ran on its targeted slice only, and the control on the cases of the first
    # killing checks (the evidence), among the cases where a mutant failed a check
    records = pd.read_csv(run / "records.csv")
    ran = records.groupby(["kernel", "provider"])["case"].nunique()
    spec = reg.kernels[kernel]
    union = {c.id for p in reg.mutants_for(kernel) for c in spec.grid("quick", "cpu") if targeted(p)(c)}
    mine = set(records.loc[records["provider"].str.startswith("mutant_"), "case"])
    assert mine == union
    mutant_rows = records[records["provider"].str.startswith("mutant_")]
    failed = set(mutant_rows.loc[mutant_rows["verdict"].isin(["fail", "error"]), "case"])
    control = set(records.loc[records["provider"] == spec.control, "case"])
    mutants = engine.collect(reg, "cpu")
    assert set(killmatrix.evidence(records, [m for m in mutants if m.kernel == kernel])["case"]) <= control <= failed
    assert "every mutant killed" in result.stdout
    assert "PASSED" in (run / "kill_matrix.md").read_text()
    if kernel == "ce":
        assert ran[("ce", "mutant_mean_counts_ignored")] == 1
        # the kill matrix names the case-axis values each mutant needs, the evidence the killing case
        assert table.loc["mutant_unit_column_stride", "needs"] == "layout=transposed"
        assert table.loc["mutant_mean_ignores_upstream", "needs"] == "reduction=mean, upstream=accum"
        assert "lay-transposed" in (run / "kill_matrix.md").read_text()


def _ours():
    from ligerbench.kernels.cross_entropy import cross_entropy

    return lambda logits, target, **opts: cross_entropy(logits, target, return_z_loss=True, **opts)


@pytest.mark.interpreter
def test_a_mutant_nothing_catches_fails_the_command(tmp_path, monkeypatch):
    """An 'equivalent mutant' (our kernel, unchanged) survives every suite: selftest must exit 1."""

    def with_equivalent(reg):
        reg.add(
            registry.Provider(
                name="mutant_equivalent", kernel="ce", description="no bug at all", load=_ours, mutant=True,
                targets=({"reduction": "sum", "dtype": "fp32", "option": "plain", "logits": "normal"},),
            )
        )  # fmt: skip

    register_plugin(monkeypatch, with_equivalent)
    result, run = _selftest(tmp_path, "mutant_equivalent")
    assert result.exit_code == 1, result.output
    assert "survived every suite" in result.stdout and "mutant_equivalent" in result.stdout
    table = pd.read_csv(run / "kill_matrix.csv").set_index("mutant")
    columns = ["kernel", "correctness", "gradients", "invariance", "second_backward", "contracts", "determinism",
               "batch_invariance", "past_int32", "verdict", "default_verdict", "about", "needs"]  # fmt: skip
    assert list(table.columns) == columns
    row = table.loc["mutant_equivalent"]
    assert row["verdict"] == "SURVIVED"
    assert (row["correctness"], row["gradients"], row["contracts"]) == ("survived",) * 3
    assert row["invariance"] == "survived"  # its slice holds a split case (a sum), which it runs unharmed


@pytest.mark.interpreter
def test_unknown_mutant_exits_2(tmp_path):
    result, _ = _selftest(tmp_path, "mutant_nope")
    assert result.exit_code == 2
    assert "mutant_first_row_upstream" in result.output  # the choices are listed
    assert not any(tmp_path.iterdir()), "a usage error leaves no results folder"


def test_targets_with_an_unknown_field_are_refused():
    p = registry.Provider(name="m", kernel="ce", description="", load=_ours, mutant=True, targets=({"reduce": "sum"},))
    with pytest.raises(ValueError, match="reduce"):
        check_targets(p, ce_axes.AXES)


MUT = Mutant(name="m", campaign="kernels", description="", control="ours", suites=("correctness", "converge"))


def _rows(*rows):
    cols = ["provider", "suite", "case", "quantity", "verdict", "value", "limit", "message"]
    return pd.DataFrame([dict(zip(cols, r + (1.0, 0.5, ""), strict=True)) for r in rows])


@pytest.mark.parametrize(
    "control_verdict, expected",
    [("pass", "killed"), ("fail", "survived"), ("error", "survived")],  # a shared failure proves nothing
)
def test_a_kill_needs_the_control_to_pass(control_verdict, expected):
    df = _rows(("m", "correctness", "c1", "loss", "fail"), ("ours", "correctness", "c1", "loss", control_verdict))
    table = killmatrix.matrix(df, [MUT])
    assert table.loc[0, "correctness"] == expected
    assert table.loc[0, "converge"] == "n/a"  # no rows: nothing compared


def test_an_error_kills_when_the_control_passes_every_check_under_it():
    """converge records a raising check under its group's name; the control's rows carry suffixes."""
    mutant_rows = [("m", "converge", "c", "ltk[train,k=1]", "error")]
    passing = [("ours", "converge", "c", f"ltk[train,k=1].{q}", "pass") for q in ("loss", "grads")]
    assert killmatrix.matrix(_rows(*mutant_rows, *passing), [MUT]).loc[0, "converge"] == "killed"
    one_fails = [*passing[:1], ("ours", "converge", "c", "ltk[train,k=1].grads", "fail")]
    assert killmatrix.matrix(_rows(*mutant_rows, *one_fails), [MUT]).loc[0, "converge"] == "survived"
    assert killmatrix.matrix(_rows(*mutant_rows), [MUT]).loc[0, "converge"] == "survived"  # no control row


def test_matrix_is_not_fooled_by_another_mutants_rows():
    other = dataclasses.replace(MUT, name="other")
    df = _rows(("other", "correctness", "c1", "loss", "fail"), ("ours", "correctness", "c1", "loss", "pass"),
               ("m", "correctness", "c1", "loss", "pass"))  # fmt: skip
    table = killmatrix.matrix(df, [MUT, other]).set_index("mutant")
    assert table.loc["m", "verdict"] == "SURVIVED" and table.loc["other", "verdict"] == "killed"
    assert killmatrix.survivors(table.reset_index()) == ["m"]


def _row(provider, suite, case, verdict, *, strict_only=False):
    # strict_only: over the careful limit, within the default one (a formula that cancels)
    textbook = 1e-3 if strict_only else float("nan")
    return {"kernel": "k", "provider": provider, "suite": suite, "case": case, "quantity": "loss",
            "verdict": verdict, "rule": "strict", "value": 1e-5, "limit": 1e-6, "careful": 1e-7,
            "textbook": textbook}  # fmt: skip


def test_the_control_runs_where_a_kill_is_judged_and_on_the_next_case_where_it_fails_too():
    mutant = Mutant(name="m", campaign="kernels", description="", control="ours", suites=("a", "b"), kernel="k")
    rows = [
        _row("m", "a", "c1", "pass"),
        _row("m", "a", "c2", "fail", strict_only=True),
        _row("m", "a", "c3", "fail"),
        _row("m", "b", "c2", "fail", strict_only=True),
    ]
    df = pd.DataFrame(rows)
    # the first failing check of each suite (c2 for both), and the first that fails the default
    # verdict too (c3); a passed check needs no control
    assert control_cases(df, [mutant], set()) == {"c2", "c3"}
    # the control fails suite a's check on c2 and passes the rest: no kill there, so a's next
    # failing check (c3, run) decides, and b's kill on c2 stands: nothing more to run
    done = {"c2", "c3"}
    ran = [_row("ours", "a", "c2", "fail"), _row("ours", "a", "c3", "pass"), _row("ours", "b", "c2", "pass")]
    assert control_cases(pd.DataFrame(rows + ran), [mutant], done) == set()
    table = killmatrix.matrix(pd.DataFrame(rows + ran), [mutant]).set_index("mutant")
    assert (table.loc["m", "a"], table.loc["m", "b"], table.loc["m", killmatrix.DEFAULT_VERDICT]) == (
        "killed", "killed", "killed")  # fmt: skip
    # where the control fails c3 too, suite a has nothing left to try: no more cases, a survives
    ran[1] = _row("ours", "a", "c3", "fail")
    assert control_cases(pd.DataFrame(rows + ran), [mutant], done) == set()
    table = killmatrix.matrix(pd.DataFrame(rows + ran), [mutant]).set_index("mutant")
    assert (table.loc["m", "a"], table.loc["m", "b"], table.loc["m", killmatrix.DEFAULT_VERDICT]) == (
        "survived", "killed", "survived")  # fmt: skip
    # and a control that has not run c2 yet is asked for it before c3 is looked at
    assert control_cases(df, [mutant], {"c3"}) == {"c2"}

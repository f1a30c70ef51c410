"""`verify` and `selftest` of the log-prob kernels (`lp`, `flp`) through the CLI, on slices of
their quick grids: ours passes against float64, a planted bug fails, `list` shows their axes."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ligerbench.cli import app
from ligerbench.testing import run_provider

runner = CliRunner()


def _verify(tmp_path, *args):
    result = runner.invoke(app, ["verify", "--device", "cpu", "--json", "--out", str(tmp_path), *args])
    return result, json.loads(result.stdout) if result.stdout.strip().startswith("{") else None


@pytest.mark.interpreter
@pytest.mark.parametrize(
    "kernel, where",
    [
        ("lp", ["--where", "temperature=0.6"]),  # the temperature slice, both dtypes
        ("lp", ["--where", "layout=padded_vocab"]),  # -inf columns: no mass, no NaN
        ("flp", ["--where", "layout=column_major"]),  # Liger <= 0.8.4's hidden-gradient layout
        ("flp", ["--where", "logits=shifted"]),  # every logit 200 below zero through the bias
    ],
)
def test_ours_and_the_peers_pass_on_a_slice(tmp_path, kernel, where):
    # flp's chunked_checkpoint peer is left to the CLI runs (CI's quick verify of every kernel,
    # each in a fresh process): in a pytest worker where an earlier test ran torch.compile on the
    # CPU, torch.utils.checkpoint's lazy inductor import fails ("module 'triton.backends' has no
    # attribute 'compiler'"), which says nothing about the provider
    peers = ["--provider", "ours", "--provider", "ours_rows", "--provider", "eager"] if kernel == "flp" else []
    result, payload = _verify(tmp_path, "--kernel", kernel, *where, *peers)
    assert result.exit_code == 0, result.output
    assert payload["counts"]["pass"] > 0 and payload["counts"]["fail"] == 0 and payload["counts"]["error"] == 0
    if kernel == "flp":  # a provider's settings are data in its records
        from ligerbench.records import read_records, settings_of

        (run,) = tmp_path.iterdir()
        records = read_records(run / "records.csv")
        got = {
            p: settings_of(s if isinstance(s, str) else "")
            for p, s in zip(records["provider"], records["settings"], strict=True)
        }
        assert got == {"ours": {}, "eager": {}, "ours_rows": {"backward_split": "rows", "chunk_rows": 7}}


@pytest.mark.interpreter
@pytest.mark.parametrize(
    "kernel, mutant, where",
    [
        ("lp", "mutant_lp_temperature_on_logp", "temperature=0.6"),
        ("lp", "mutant_lp_mass_on_padding", "layout=padded_vocab"),
        ("flp", "mutant_flp_rounded_logits", "dtype=bf16"),
        ("flp", "mutant_flp_entropy_grad_dropped", "upstream=entropy"),
    ],
)
def test_a_planted_bug_fails(tmp_path, kernel, mutant, where):
    result, payload = _verify(tmp_path, "--kernel", kernel, "--provider", mutant, "--where", where)
    assert result.exit_code == 1, result.output
    assert payload["counts"]["fail"] > 0


def test_list_shows_the_log_prob_kernels_and_their_axes():
    result = runner.invoke(app, ["list", "--json"])
    assert result.exit_code == 0
    kernels = {k["name"]: k for k in json.loads(result.stdout)["catalog"]["kernels"]}
    for name, axis in (("lp", "temperature"), ("flp", "h")):
        assert axis in {a["name"] for a in kernels[name]["axes"]}


@pytest.mark.parametrize("eps, passes", [(2.0**-24, True), (0.25, False)])
def test_one_class_gradient_is_judged_against_its_natural_size(eps, passes):
    """V = 1: the gradient is exactly 0 whatever the logits (suites/lp/spec.py, _one_class_scale).
    A rounding of it (TRL's unfused path on an H100: 2**-24 where float64 gives 0) passes; a
    gradient of a class's size fails."""
    from ligerbench.suites.common.input_mutants import with_upstream
    from ligerbench.suites.lp.providers import eager_fp32

    def nudged(logits, target, **options):  # the logits' gradient, plus eps everywhere
        return eager_fp32(with_upstream(logits, lambda grad: grad + eps), target, **options)

    result = run_provider("lp", nudged, name="nudged", v=1, dtype="fp32")
    grads = result.records[result.records["quantity"] == "grad_logits"]
    assert len(grads) > 0 and set(grads["unit"]) == {"relative to natural magnitude"}
    assert (set(grads["verdict"]) == {"pass"}) == passes, grads[["case", "value", "limit", "verdict"]]
